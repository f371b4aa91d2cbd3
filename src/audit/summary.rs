//! An audit's result, as `dlio-rs audit` prints it: a line per epoch and phase and the first
//! violations, then the verdict on the access pattern beside the run's own verdict on the
//! storage (a run can read exactly as planned and still have measured the page cache), or
//! (`--json`) one JSON object with the same content.

use std::fmt::Write as _;

use serde::Serialize;

/// One phase of one epoch, as the traces show it against its plan.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PhaseAudit {
    pub epoch: u64,
    /// `train` or `eval`.
    pub phase: &'static str,
    /// Samples the plan reads.
    pub samples_planned: u64,
    /// Planned samples the traces show read (each counted once).
    pub samples_read: u64,
    /// Reads of a planned sample after its first.
    pub repeated: u64,
    /// Rows reading something the plan does not: an unknown file or sample, or the remainder.
    pub unplanned: u64,
    /// Planned samples never read.
    pub missing: u64,
    /// Samples of the split the plan leaves out (the remainder, and any step cap).
    pub samples_not_read: u64,
    /// Steps per rank in the plan.
    pub steps: u64,
    /// Training epochs after the first: the share of positions holding another sample than in
    /// the previous training epoch.
    pub order_changed_fraction: Option<f64>,
    /// Likewise: mean distance a sample moved, as a share of the epoch.
    pub mean_displacement_fraction: Option<f64>,
    /// Likewise, with more than one rank: per rank, the share of the files it read that it did
    /// not read the previous epoch (null for a rank that read nothing).
    pub rank_files_changed_fraction: Option<Vec<Option<f64>>>,
    /// Reads of the remainder (counted in `unplanned` too).
    #[serde(skip)]
    pub remainder_read: u64,
    /// Samples the TensorFlow pipeline read past those its steps take, within what its buffers
    /// allow: the shuffle buffer's fill for the last batches, and the prefetch's read-ahead.
    pub read_ahead: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct AuditReport {
    pub passed: bool,
    pub violations: u64,
    /// The first violations, each naming the trace file and line (or the rank's file when
    /// nothing was read).
    pub first_violations: Vec<String>,
    pub phases: Vec<PhaseAudit>,
    /// Ranks of the run.
    #[serde(skip)]
    pub world: u64,
    /// Whether the run measured the storage: its report.json's verdict, not checked here.
    pub storage: StorageValidity,
    /// A run a signal stopped: the epochs it completed (only those are checked) and the rows of
    /// the epoch it cut short, which are not.
    pub interrupted: Option<Cut>,
}

/// What an audit leaves out of a run a signal stopped.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Cut {
    pub epochs_completed: u64,
    pub rows_not_checked: u64,
}

/// The run's own verdict on whether it measured the storage (report.json's `verdict`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StorageValidity {
    /// `None`: the run's report.json has no verdict (an older dlio-rs).
    pub valid: Option<bool>,
    /// Each reason, `code: message`.
    pub reasons: Vec<String>,
}

fn percent(fraction: f64) -> String {
    format!("{:.1}%", fraction * 100.0)
}

impl PhaseAudit {
    /// `epoch 2 train: 1024 samples read once each by 4 ranks × 8 steps; 0 unplanned, …`
    pub fn to_text(&self, world: u64) -> String {
        let mut line = format!("epoch {} {}: ", self.epoch, self.phase);
        if self.samples_read == self.samples_planned && self.repeated == 0 {
            let _ = write!(line, "{} samples read once each", self.samples_read);
        } else {
            let _ = write!(
                line,
                "{} of {} planned samples read",
                self.samples_read, self.samples_planned
            );
        }
        let _ = write!(
            line,
            " by {world} ranks × {} steps; {} unplanned, {} repeated, {} missing; ",
            self.steps, self.unplanned, self.repeated, self.missing
        );
        if self.remainder_read == 0 {
            let _ = write!(
                line,
                "{} not read (remainder, as planned)",
                self.samples_not_read
            );
        } else {
            let _ = write!(
                line,
                "{} in the remainder, {} of them read against the plan",
                self.samples_not_read, self.remainder_read
            );
        }
        if self.read_ahead > 0 {
            let _ = write!(
                line,
                "; {} more read ahead by the pipeline's buffers",
                self.read_ahead
            );
        }
        if let (Some(changed), Some(displacement)) =
            (self.order_changed_fraction, self.mean_displacement_fraction)
        {
            let _ = write!(
                line,
                "; order changed {} of positions (mean displacement {})",
                percent(changed),
                percent(displacement)
            );
        } else if let Some(changed) = self.order_changed_fraction {
            let _ = write!(line, "; order changed {} of positions", percent(changed));
        }
        if let Some(ranks) = &self.rank_files_changed_fraction {
            let shares: Vec<String> = ranks
                .iter()
                .enumerate()
                .map(|(rank, share)| match share {
                    Some(share) => format!("r{rank} {:.0}%", share * 100.0),
                    None => format!("r{rank} -"),
                })
                .collect();
            let _ = write!(line, "; rank files changed: {}", shares.join(", "));
        }
        line
    }
}

impl AuditReport {
    /// The human report: a line per phase, the first violations, and the verdict.
    pub fn to_text(&self) -> String {
        let mut text = String::new();
        for phase in &self.phases {
            text.push_str(&phase.to_text(self.world));
            text.push('\n');
        }
        if !self.first_violations.is_empty() {
            text.push_str("first violations:\n");
            for violation in &self.first_violations {
                let _ = writeln!(text, "  {violation}");
            }
            let unlisted = self.violations - self.first_violations.len() as u64;
            if unlisted > 0 {
                let _ = writeln!(text, "  … and {unlisted} more");
            }
        }
        match self.storage.valid {
            Some(true) => text.push_str("storage: VALID (the run's verdict)\n"),
            Some(false) => {
                text.push_str(
                    "storage: NOT VALID (the run's verdict): its figures are not the storage's, \
                     whatever the access pattern:\n",
                );
                for reason in &self.storage.reasons {
                    let _ = writeln!(text, "  {reason}");
                }
            }
            None => text.push_str("storage: not judged (report.json has no verdict)\n"),
        }
        if let Some(cut) = &self.interrupted {
            let _ = writeln!(
                text,
                "interrupted: the {} completed epoch(s) checked; {} row(s) of the epoch the \
                 signal cut short not checked",
                cut.epochs_completed, cut.rows_not_checked
            );
        }
        if self.passed {
            text.push_str("access pattern: audit passed\n");
        } else {
            let _ = writeln!(
                text,
                "access pattern: audit FAILED: {} violations",
                self.violations
            );
        }
        text
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }
}
