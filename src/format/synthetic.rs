//! `synthetic`: DLIO's reader that hands the loader a fixed tensor without touching storage. It
//! measures the loader and the training loop alone: no file is written or read.

use rand::rngs::SmallRng;

use super::{Encoded, FileFormat, ReadBuffer, SampleRead, SampleReader};
use crate::dataset::FileShape;
use crate::error::Result;
use crate::storage::Storage;

pub struct Synthetic;

impl FileFormat for Synthetic {
    fn encode(&self, _: &str, _: &FileShape, _: &mut SmallRng, out: &mut Encoded) -> Result<()> {
        out.clear();
        Ok(())
    }

    fn reader(&self) -> Box<dyn SampleReader + '_> {
        Box::new(Synthetic)
    }

    fn reads_storage(&self) -> bool {
        false
    }

    fn opened_per_sample_on_demand(&self) -> bool {
        false
    }
}

impl SampleReader for Synthetic {
    fn read_sample(
        &mut self,
        _: &dyn Storage,
        _: &str,
        _: u64,
        _: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        Ok(SampleRead::default())
    }

    /// Nothing is fetched: every sample is served at once.
    fn in_hand(&self, _: &str, _: u64) -> bool {
        true
    }
}
