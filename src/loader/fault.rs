//! Planted faults, built only with the `fault-injection` feature, so tests can prove what catches
//! them. `DLIO_RS_PLANTED_FAULT` chooses one:
//!
//! - `repeat`: rank 0 reads the first sample of its first batch of epoch 2 twice instead of the
//!   second sample; `skip`: it leaves out the last sample of that batch (needs batch_size ≥ 2).
//!   `dlio-rs audit` must catch both.
//! - `kill`: the process holding rank 1 kills itself with SIGKILL when that rank's reader loads
//!   its third batch of epoch 1, as the kernel's OOM killer would: the job must end, and nothing
//!   may claim success.

use crate::plan::SampleRef;

pub fn plant(mut batch: Vec<SampleRef>, epoch: u64, rank: u64, step: u64) -> Vec<SampleRef> {
    let fault = std::env::var("DLIO_RS_PLANTED_FAULT");
    if fault.as_deref() == Ok("kill") && (epoch, rank, step) == (1, 1, 2) {
        // SAFETY: raise() only sends a signal to this process.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    if epoch != 2 || rank != 0 || step != 0 || batch.len() < 2 {
        return batch;
    }
    match fault.as_deref() {
        Ok("repeat") => batch[1] = batch[0],
        Ok("skip") => {
            batch.pop();
        }
        _ => {}
    }
    batch
}
