//! The check of one segment (one epoch's train or eval phase) of the run: each trace row of the
//! segment, from every rank, against the segment's plan; then what the segment missed.
//!
//! A row is located in the plan by inverting the plan's permutations ([`EpochPlan::position_of`]):
//! its position gives the rank, step and index in the batch it was planned for, and one bit per
//! planned position catches a second read. Each row gets at most one violation, the most basic of
//! what is wrong with it.

use crate::error::{Error, Result};
use crate::plan::{EpochPlan, Phase, SampleRef};

use super::bitset::BitSet;
use super::file_names::FileNames;
use super::order::OrderTracker;
use super::trace::{trace_label, TraceRow};
use super::violations::{RepeatToLocate, Violations};
use super::PhaseAudit;

/// What one reader thread of one rank has read so far in the segment.
#[derive(Debug, Clone, Default)]
struct ThreadState {
    /// Planned (step, index in batch) of its last correctly placed row.
    last_planned: Option<(u64, u64)>,
    /// The step column of its last row, and how many rows of that step it has read: the index
    /// in the batch as measured.
    measured_step: u64,
    read_in_step: u64,
}

#[derive(Debug, Default)]
struct Counts {
    distinct: u64,
    repeated: u64,
    unplanned: u64,
    remainder_read: u64,
    read_ahead: u64,
}

pub struct SegmentCheck<'a> {
    epoch: u64,
    phase: Phase,
    plan: EpochPlan,
    read_threads: u64,
    /// Whether any reader thread may read any step's samples (DALI's workers take the pieces of
    /// each batch from one queue), rather than step k being thread k mod `read_threads`'s.
    any_thread: bool,
    /// Thread states per rank: `read_threads`, or 1 when the training loop reads inline.
    threads_per_rank: u64,
    names: FileNames<'a>,
    /// Plan positions read, over `[0, samples_read)`.
    read: BitSet,
    /// Per rank, per thread seen; grown as threads appear so an absurd `read_threads` costs
    /// nothing.
    threads: Vec<Vec<ThreadState>>,
    highest_step: Vec<u64>,
    /// Under the native DALI loader, per rank: the next stream position its reader must read,
    /// and the step the reads at it are pulled in for (0-based).
    stream: Vec<(u64, u64)>,
    counts: Counts,
}

/// `trace/1.csv:57: epoch 2 train step 3`
/// A row's place and what it read, for messages.
fn describe_read(rank: u64, row: &TraceRow) -> String {
    format!(
        "{}: {} sample {}",
        row_context(rank, row),
        row.file,
        row.sample
    )
}

fn row_context(rank: u64, row: &TraceRow) -> String {
    format!(
        "{}:{}: epoch {} {} step {}",
        trace_label(rank),
        row.line,
        row.epoch,
        row.phase.as_str(),
        row.step
    )
}

impl<'a> SegmentCheck<'a> {
    /// `read` is a bitmap to reuse (its contents are discarded). Fails when the memory for one
    /// bit per planned sample cannot be had (a configuration far beyond any real run's).
    pub fn new(
        epoch: u64,
        phase: Phase,
        plan: EpochPlan,
        (read_threads, any_thread): (u64, bool),
        names: FileNames<'a>,
        mut read: BitSet,
    ) -> Result<SegmentCheck<'a>> {
        let world = plan.spec().world;
        let threads_per_rank = read_threads.max(1);
        let planned = plan.samples_read();
        read.try_reset(planned).map_err(|e| {
            Error::run(format!(
                "epoch {epoch} {}: the plan reads {planned} samples, and a bit for each ({} MiB) \
                 cannot be had: {e}",
                phase.as_str(),
                planned.div_ceil(8 << 20)
            ))
        })?;
        Ok(SegmentCheck {
            epoch,
            phase,
            read_threads,
            any_thread,
            threads_per_rank,
            names,
            read,
            threads: vec![Vec::new(); world as usize],
            highest_step: vec![0; world as usize],
            stream: vec![(0, 0); world as usize],
            counts: Counts::default(),
            plan,
        })
    }

    /// Checks one row of this segment found in `rank`'s trace; `order` follows training epochs.
    pub fn check(
        &mut self,
        rank: u64,
        row: &TraceRow,
        violations: &mut Violations,
        order: Option<&mut OrderTracker>,
    ) {
        if self.plan.interleave().is_some() {
            return self.check_pipelined(rank, row, violations, order);
        }
        if self.plan.dali().is_some() {
            return self.check_native_dali(rank, row, violations);
        }
        self.highest_step[rank as usize] = self.highest_step[rank as usize].max(row.step);
        let slot = (row.thread < self.threads_per_rank).then_some(row.thread as usize);
        // DALI's pieces of a batch are read by whichever worker is free: where a row lies in its
        // batch is not its thread's count; once placed, its planned position is where it was.
        let measured_position = if self.any_thread {
            None
        } else {
            self.measure_position(rank, row, slot)
        };
        let Some((sample, position)) = self.locate(rank, row, violations) else {
            return;
        };
        if !self.first_read(rank, row, position, violations) {
            return;
        }
        let problem = self.placement_problem(rank, row, slot, position);
        if let Some(order) = order {
            let placed = (self.any_thread && problem.is_none()).then_some(position);
            order.record(sample, rank, measured_position.or(placed));
        }
        if let Some(problem) = problem {
            violations.add(|| format!("{}: {problem}", describe_read(rank, row)));
        }
    }

    /// Marks the planned `position` read; a second read of it is a violation (false).
    fn first_read(
        &mut self,
        rank: u64,
        row: &TraceRow,
        position: u64,
        violations: &mut Violations,
    ) -> bool {
        if self.read.insert(position) {
            self.counts.distinct += 1;
            return true;
        }
        self.counts.repeated += 1;
        violations.add_repeat(
            || format!("{} read a second time", describe_read(rank, row)),
            RepeatToLocate {
                message: 0,
                epoch: self.epoch,
                phase: self.phase,
                file: row.file.clone(),
                sample: row.sample,
                rank,
                line: row.line,
            },
        );
        false
    }

    /// [`SegmentCheck::check`] for the TensorFlow pipeline: each record read once, by its file's
    /// worker, in its file's order, traced under the step the pipeline pulled it in for; past
    /// the steps' records, only what the pipeline's buffers let it read ahead.
    fn check_pipelined(
        &mut self,
        rank: u64,
        row: &TraceRow,
        violations: &mut Violations,
        order: Option<&mut OrderTracker>,
    ) {
        let Some(file) = self.names.index_of(&row.file) else {
            self.counts.unplanned += 1;
            let split = self.phase.as_str();
            violations.add(|| {
                format!(
                    "{}: {} is not a file of the {split} split",
                    row_context(rank, row),
                    row.file
                )
            });
            return;
        };
        let sample = SampleRef {
            file,
            sample: row.sample,
        };
        let about = || describe_read(rank, row);
        let (Some(global), Some((owner, position))) = (
            self.plan.position_of(sample),
            self.plan.interleaved_place(sample),
        ) else {
            self.counts.unplanned += 1;
            violations.add(|| format!("{}: no rank's shard holds it", about()));
            return;
        };
        let interleave = *self.plan.interleave().expect("checked by the caller");
        let (shard_file, record) = interleave.record_at(position);
        let pulled_for = self.plan.pulled_for(position) + 1;
        let worker = shard_file % interleave.workers();
        let problem = if owner != rank {
            Some(format!("in rank {owner}'s shard"))
        } else if row.step != pulled_for {
            Some(format!("pulled in for step {pulled_for}"))
        } else if row.thread != worker {
            Some(format!(
                "read by thread {}, but its file is worker {worker}'s",
                row.thread
            ))
        } else {
            None
        };
        if let Some(problem) = problem {
            self.counts.unplanned += 1;
            violations.add(|| format!("{}: {problem}", about()));
            return;
        }
        let steps = self.plan.steps();
        self.highest_step[rank as usize] =
            self.highest_step[rank as usize].max(row.step.min(steps));
        let threads = &mut self.threads[rank as usize];
        if threads.len() <= worker as usize {
            threads.resize(worker as usize + 1, ThreadState::default());
        }
        let thread = &mut threads[worker as usize];
        let previous = thread.last_planned.replace((shard_file, record));
        if let Some((last_file, last_record)) =
            previous.filter(|&last| last >= (shard_file, record))
        {
            violations.add(|| {
                format!(
                    "{}: read out of order: record {record} of the shard's file {shard_file} after record {last_record} of file {last_file} by the same worker",
                    about()
                )
            });
        }
        if global >= self.plan.samples_read() {
            if record < self.plan.readable_of_file(shard_file) {
                self.counts.read_ahead += 1;
            } else {
                self.counts.unplanned += 1;
                violations.add(|| {
                    format!(
                        "{}: read further ahead than the pipeline's buffers allow",
                        about()
                    )
                });
            }
            return;
        }
        if !self.first_read(rank, row, global, violations) {
            return;
        }
        if let Some(order) = order {
            order.record(sample, rank, Some(global));
        }
    }

    /// [`SegmentCheck::check`] for the native DALI loader: each rank's reader walks shard 0's
    /// stream ([`crate::plan::DaliShard`]) one position after another, pad slots unread, so the
    /// rank's rows are the stream's samples (whole files, or tfrecord records) in order, by
    /// thread 0, each traced under the step it is pulled in for; past the steps' positions, only
    /// as far as DALI's queues read ahead.
    fn check_native_dali(&mut self, rank: u64, row: &TraceRow, violations: &mut Violations) {
        let dali = self.plan.dali().expect("checked by the caller");
        let steps = self.plan.steps();
        let (mut position, mut pulled_for) = self.stream[rank as usize];
        // Pad slots are passed, not read: at most a batch of them ends each pass.
        while dali.samples() > 0 && dali.sample_at(position).is_none() {
            position += 1;
        }
        while pulled_for < steps && dali.needed_for(pulled_for) <= position {
            pulled_for += 1;
        }
        let about = || describe_read(rank, row);
        let expected = dali.sample_at(position);
        let file = self.names.index_of(&row.file);
        let problem = if row.rank != rank {
            Some(format!(
                "rank column is {} in rank {rank}'s trace",
                row.rank
            ))
        } else if file.is_none()
            || file != expected.map(|s| s.file)
            || Some(row.sample) != expected.map(|s| s.sample)
        {
            let (name, sample) = expected.map_or((String::new(), 0), |s| {
                (self.names.name_of(s.file).to_string(), s.sample)
            });
            Some(format!(
                "out of DALI's stream: position {position} of shard 0 is {name} sample {sample}"
            ))
        } else if row.thread != 0 {
            Some(format!(
                "read by thread {}, but DALI's reader is one thread (0)",
                row.thread
            ))
        } else if row.step != pulled_for + 1 {
            Some(format!("pulled in for step {}", pulled_for + 1))
        } else if position >= dali.readable(steps) {
            Some("read further ahead than DALI's queues allow".to_string())
        } else {
            None
        };
        if let Some(problem) = problem {
            // A row out of place does not move the stream on: the rows after it are judged
            // against the position it should have been.
            self.counts.unplanned += 1;
            violations.add(|| format!("{}: {problem}", about()));
            self.stream[rank as usize] = (position, pulled_for);
            return;
        }
        if pulled_for < steps {
            self.counts.distinct += 1;
            self.highest_step[rank as usize] = self.highest_step[rank as usize].max(row.step);
        } else {
            self.counts.read_ahead += 1;
        }
        self.stream[rank as usize] = (position + 1, pulled_for);
    }

    /// The position the row was read at, as the trace shows it: its rank, its step, and how many
    /// rows of that step its thread read before it.
    fn measure_position(&mut self, rank: u64, row: &TraceRow, slot: Option<usize>) -> Option<u64> {
        let (steps, batch) = (self.plan.steps(), self.plan.batch_size());
        let threads = &mut self.threads[rank as usize];
        let slot = slot?;
        if slot >= threads.len() {
            threads.resize(slot + 1, ThreadState::default());
        }
        let thread = &mut threads[slot];
        if thread.measured_step != row.step {
            thread.measured_step = row.step;
            thread.read_in_step = 0;
        }
        let index = thread.read_in_step;
        thread.read_in_step += 1;
        let step = row.step.checked_sub(1).filter(|&s| s < steps)?;
        (index < batch).then(|| (rank * steps + step) * batch + index)
    }

    /// The row's sample and its position in the plan, when the plan reads it; otherwise counts
    /// the row as unplanned.
    fn locate(
        &mut self,
        rank: u64,
        row: &TraceRow,
        violations: &mut Violations,
    ) -> Option<(SampleRef, u64)> {
        let Some(file) = self.names.index_of(&row.file) else {
            self.counts.unplanned += 1;
            violations.add(|| {
                format!(
                    "{}: {} is not a file of the {} split",
                    row_context(rank, row),
                    row.file,
                    self.phase.as_str()
                )
            });
            return None;
        };
        let sample = SampleRef {
            file,
            sample: row.sample,
        };
        let about = || describe_read(rank, row);
        let Some(position) = self.plan.position_of(sample) else {
            self.counts.unplanned += 1;
            let per_file = self.plan.spec().samples_per_file;
            violations
                .add(|| format!("{} is not in the file (it has {per_file} samples)", about()));
            return None;
        };
        let samples_read = self.plan.samples_read();
        if position >= samples_read {
            self.counts.unplanned += 1;
            self.counts.remainder_read += 1;
            violations.add(|| {
                format!(
                    "{} read, but it is in the remainder this epoch does not read (position {position}; the plan reads positions below {samples_read})",
                    about()
                )
            });
            return None;
        }
        Some((sample, position))
    }

    /// What is wrong with where a planned sample was read: rank, step, thread, or order within
    /// the thread. Moves the thread's order on when the row is at its planned rank and step, so
    /// that one displaced row is one violation, not one per row after it.
    fn placement_problem(
        &mut self,
        rank: u64,
        row: &TraceRow,
        slot: Option<usize>,
        position: u64,
    ) -> Option<String> {
        let (steps, batch) = (self.plan.steps(), self.plan.batch_size());
        let shard = steps * batch;
        let (planned_rank, planned_step, planned_index) =
            (position / shard, position % shard / batch, position % batch);
        let placed = planned_rank == rank && row.step.checked_sub(1) == Some(planned_step);
        let planned_thread = planned_step % self.threads_per_rank;
        let threads = &mut self.threads[rank as usize];
        if let Some(slot) = slot.filter(|&slot| slot >= threads.len()) {
            threads.resize(slot + 1, ThreadState::default());
        }
        let thread = slot.map(|slot| &mut threads[slot]);
        let previous = thread.as_ref().and_then(|t| t.last_planned);
        if let (true, Some(thread)) = (placed, thread) {
            thread.last_planned = Some((planned_step, planned_index));
        }
        if row.rank != rank {
            Some(format!(
                "rank column is {} in rank {rank}'s trace",
                row.rank
            ))
        } else if !placed {
            Some(format!(
                "planned for rank {planned_rank} step {}",
                planned_step + 1
            ))
        } else if slot.is_none() {
            let inline = if self.read_threads == 0 {
                ", read inline as thread 0"
            } else {
                ""
            };
            Some(format!(
                "thread {} does not exist (reader.read_threads = {}{inline})",
                row.thread, self.read_threads
            ))
        } else if !self.any_thread && row.thread != planned_thread {
            Some(format!(
                "read by thread {}, but step {} is thread {planned_thread}'s",
                row.thread, row.step
            ))
        } else {
            previous
                .filter(|&last| last >= (planned_step, planned_index))
                .map(|(last_step, last_index)| {
                    format!(
                        "read out of order: index {planned_index} of its batch after index {last_index} of step {} by the same thread",
                        last_step + 1
                    )
                })
        }
    }

    /// What the segment missed, and its summary; gives back the bitmap for reuse.
    /// `has_trace[rank]` says whether the rank's trace file exists.
    pub fn finish(
        self,
        has_trace: &[bool],
        violations: &mut Violations,
        order: Option<&mut OrderTracker>,
    ) -> (PhaseAudit, BitSet) {
        if self.plan.dali().is_some() {
            return self.finish_native_dali(has_trace, violations);
        }
        let SegmentCheck {
            epoch,
            phase,
            plan,
            mut names,
            read,
            highest_step,
            counts,
            ..
        } = self;
        let (steps, batch) = (plan.steps(), plan.batch_size());
        let missing = plan.samples_read() - counts.distinct;
        let mut listed = 0;
        for position in read.absent() {
            if !violations.wants_messages() {
                break;
            }
            let sample = plan.sample_at(position);
            let rank = position / (steps * batch);
            let step = position % (steps * batch) / batch + 1;
            let file = names.name_of(sample.file);
            violations.add(|| {
                format!(
                    "{}: epoch {epoch} {} step {step}: {file} sample {} never read (index {} of the batch)",
                    trace_label(rank),
                    phase.as_str(),
                    sample.sample,
                    position % batch
                )
            });
            listed += 1;
        }
        violations.add_unlisted(missing - listed);
        // The TensorFlow pipeline's last steps may pull no record: the shuffle buffer's fill
        // ran ahead of them to the shard's end.
        let traced_steps = match plan.interleave() {
            Some(_) if steps > 0 => {
                (plan.pulled_for(plan.needed_for(steps - 1).saturating_sub(1)) + 1).min(steps)
            }
            _ => steps,
        };
        for (rank, &highest) in highest_step.iter().enumerate() {
            if has_trace[rank] && highest != traced_steps {
                violations.add(|| {
                    format!(
                        "{}: epoch {epoch} {}: rank {rank} took {highest} steps, the plan has {traced_steps}",
                        trace_label(rank as u64),
                        phase.as_str()
                    )
                });
            }
        }
        let change = order
            .map(|order| order.finish_epoch(&plan, &read))
            .unwrap_or_default();
        let summary = PhaseAudit {
            epoch,
            phase: phase.as_str(),
            samples_planned: plan.samples_read(),
            samples_read: counts.distinct,
            repeated: counts.repeated,
            unplanned: counts.unplanned,
            missing,
            samples_not_read: plan.samples_not_read(),
            steps,
            order_changed_fraction: change.order_changed,
            mean_displacement_fraction: change.mean_displacement,
            rank_files_changed_fraction: change.rank_files_changed,
            remainder_read: counts.remainder_read,
            read_ahead: counts.read_ahead,
        };
        (summary, read)
    }

    /// [`SegmentCheck::finish`] for the native DALI loader: every rank whose trace exists read
    /// shard 0's stream up to the positions its steps need (pad slots aside), and took them all.
    fn finish_native_dali(
        self,
        has_trace: &[bool],
        violations: &mut Violations,
    ) -> (PhaseAudit, BitSet) {
        let dali = self.plan.dali().expect("checked by the caller");
        let steps = self.plan.steps();
        let needed = if steps > 0 {
            dali.needed_for(steps - 1)
        } else {
            0
        };
        let samples_below =
            |end: u64| (0..end).filter(|&p| dali.sample_at(p).is_some()).count() as u64;
        let planned = samples_below(needed);
        // The last step that pulls a read in (a fill larger than the shard reads it all at once).
        let traced_steps = (0..steps)
            .rev()
            .find(|&s| s == 0 || dali.needed_for(s) > dali.needed_for(s - 1))
            .map_or(0, |s| s + 1);
        let mut missing = 0;
        for (rank, &(position, _)) in self.stream.iter().enumerate() {
            if !has_trace[rank] {
                continue;
            }
            let unread = planned.saturating_sub(samples_below(position.min(needed)));
            if unread > 0 {
                missing += unread;
                violations.add(|| {
                    format!(
                        "{}: epoch {} {}: rank {rank} read {} of the {planned} samples of shard 0 its {steps} steps need",
                        trace_label(rank as u64),
                        self.epoch,
                        self.phase.as_str(),
                        planned - unread
                    )
                });
            }
            let highest = self.highest_step[rank];
            if highest != traced_steps {
                violations.add(|| {
                    format!(
                        "{}: epoch {} {}: rank {rank} took {highest} steps, the plan has {traced_steps}",
                        trace_label(rank as u64),
                        self.epoch,
                        self.phase.as_str()
                    )
                });
            }
        }
        let ranks = has_trace.iter().filter(|&&t| t).count() as u64;
        let summary = PhaseAudit {
            epoch: self.epoch,
            phase: self.phase.as_str(),
            samples_planned: planned * ranks,
            samples_read: self.counts.distinct,
            repeated: self.counts.repeated,
            unplanned: self.counts.unplanned,
            missing,
            samples_not_read: self.plan.samples_not_read(),
            steps,
            order_changed_fraction: None,
            mean_displacement_fraction: None,
            rank_files_changed_fraction: None,
            remainder_read: 0,
            read_ahead: self.counts.read_ahead,
        };
        (summary, self.read)
    }
}
