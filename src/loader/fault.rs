//! A planted reader fault, built only with the `fault-injection` feature, so tests can prove that
//! `dlio-rs audit` catches a reader that skips or repeats a sample. `DLIO_RS_PLANTED_FAULT=repeat`
//! makes rank 0 read the first sample of its first batch of epoch 2 twice instead of the
//! second sample; `skip` makes it leave out the last sample of that batch. Needs batch_size ≥ 2.

use crate::plan::SampleRef;

pub fn plant(mut batch: Vec<SampleRef>, epoch: u64, rank: u64, step: u64) -> Vec<SampleRef> {
    if epoch != 2 || rank != 0 || step != 0 || batch.len() < 2 {
        return batch;
    }
    match std::env::var("DLIO_RS_PLANTED_FAULT").as_deref() {
        Ok("repeat") => batch[1] = batch[0],
        Ok("skip") => {
            batch.pop();
        }
        _ => {}
    }
    batch
}
