//! The native DALI loader (`reader.data_loader: native_dali`): DLIO's `NativeDaliDataLoader`, a
//! DALI pipeline per rank around one of DALI's own readers (from DLIO's `Dali*Reader.pipeline()`:
//! `fn.readers.numpy` over npy, `fn.readers.file` then `fn.decoders.image` over jpeg/png,
//! `fn.readers.tfrecord` over tfrecord), then `fn.python_function(preprocess)`, read by a
//! `DALIGenericIterator`; replayed for what storage sees of it. Measured on DALI 2.4 under DLIO
//! 2.0.0 with strace (docs/formats.md, "The native DALI loader"):
//!
//! - one thread reads, whatever `read_threads` (DALI's reader has one prefetch thread): one
//!   sample at a time, in stream order ([`crate::plan::DaliShard`]: shard 0 on every rank, pass
//!   after pass), traced as thread 0;
//! - the numpy reader maps each file whole and copies the sample out of the mapping, its pages
//!   read as it is copied (here [`Storage::map_range`] of the whole file, every byte read): one
//!   request per file, on the reader thread;
//! - the file and tfrecord readers map the sample (a whole file; a record, found through DLIO's
//!   index files, which the pipeline reads when it is built) and ask the kernel to read it ahead
//!   (`madvise(MADV_WILLNEED)`, which starts the reads and does not wait; DALI's advice on a
//!   record that does not start a page fails, and its pages come with the first touch), then
//!   hand the mapping on: the pipeline's operators touch the bytes on its `read_threads` threads
//!   (the image decoded, the record parsed and its feature copied), the batch's samples in
//!   parallel, so the reads finish there;
//! - once the trainer has taken `k` batches, exactly `batch × (k + prefetch_queue_depth + 2) +
//!   fill` stream positions are taken (pad slots count, and are not read): the reader's queue,
//!   the pipeline's two outputs, and the shuffle buffer's fill (or the 1 sample the reader keeps
//!   read ahead); it goes on past the epoch's last batch, into the shard's next pass;
//! - `preprocess` sleeps once per sample, the batch's samples one after another (DALI runs the
//!   Python function serially), after the batch's operators, on the pipeline's stage: at most 2
//!   batches ahead of the trainer.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Scope;

use super::crew::{Board, Crew, Sheet};
use super::{BatchSource, LoadedBatch, ReaderState};
use crate::error::{Error, Result};
use crate::format::{corrupt, read_every_byte, DaliOperator, ReadBuffer, SampleRead, SampleReader};
use crate::plan::dali_shard::PIPELINE_BATCHES;
use crate::plan::DaliShard;
use crate::storage::{IoBuffer, Mapped, Storage};

/// Where the pipeline is.
struct Progress {
    /// Stream positions the reader has taken (read, or passed as pad slots).
    taken_positions: u64,
    /// Samples the reader mapped and handed on to the operators, by stream position, until
    /// their batch is through the stage.
    handed_on: HashMap<u64, Handed>,
    /// The batch in the stage (its operators, then its preprocessing).
    staging: u64,
    /// Samples of that batch an operator thread has taken up, and finished.
    claimed: u64,
    operated: u64,
    /// Batches through the stage.
    staged: u64,
    /// Batches the trainer took.
    taken: u64,
    /// Samples read and bytes for each step's batch: a read counts for the first batch that
    /// cannot be handed on without it (the last entry: reads past the epoch's batches).
    pulled: Vec<LoadedBatch>,
}

/// The records of the shard's TFRecord files, by file key: `(offset, length)` each, as DLIO's
/// index files list them.
type Records = HashMap<String, Vec<(u64, u64)>>;

/// A sample handed on to the operators: where its bytes are.
#[derive(Clone)]
enum Handed {
    /// In a mapping (its file's, shared by the file's records), at the range.
    Mapped(Arc<Mapped>, Range<usize>),
    /// Read into memory by the reader (`dont_use_mmap`).
    Read(Arc<Vec<u8>>),
}

impl Handed {
    fn bytes(&self) -> &[u8] {
        match self {
            Handed::Mapped(mapped, range) => &mapped.as_slice()[range.clone()],
            Handed::Read(bytes) => bytes,
        }
    }
}

/// The pipeline's shape, fixed for the epoch.
struct Shape {
    steps: u64,
    /// What the operators do with each sample; `None`: nothing (the numpy reader copies its
    /// samples out itself).
    operator: Option<DaliOperator>,
    /// The pipeline's stage runs at all: it has operators, or preprocessing to sleep for.
    staged: bool,
    /// The reader maps files (DLIO's `dont_use_mmap` False), or reads them.
    maps: bool,
}

/// The running pipeline of one rank's epoch.
pub(super) struct NativeDaliPipeline<'scope, 'env> {
    crew: Crew<'scope, 'env, Shape, Progress>,
    dali: &'env DaliShard,
    staged: bool,
}

impl<'scope, 'env> NativeDaliPipeline<'scope, 'env> {
    /// Starts the reader thread, and the pipeline's stage when it has work: the operators'
    /// threads (`read_threads`, DALI's `num_threads`), or one thread sleeping the preprocessing.
    pub(super) fn start(
        scope: &'scope Scope<'scope, 'env>,
        source: &'env BatchSource<'env>,
        buffers: &mut dyn Iterator<Item = ReadBuffer>,
    ) -> Result<NativeDaliPipeline<'scope, 'env>> {
        let plan = source.plan;
        let dali = plan.dali().expect("the plan of a native_dali loader");
        if dali.samples() == 0 && plan.steps() > 0 {
            return Err(Error::usage(format!(
                "data_loader native_dali: DALI's shard 0 of {} file(s) over {} rank(s) is empty \
                 (every rank reads shard 0, samples / ranks of them): use at least as many \
                 files as ranks",
                plan.spec().files,
                plan.spec().world
            )));
        }
        let operator = source.format.dali_operator();
        let preprocess = !source.preprocess_time.is_zero();
        let stage_threads = match operator {
            Some(_) => plan.spec().native_dali.map_or(1, |n| n.threads.max(1)),
            None => u64::from(preprocess),
        };
        let shape = Shape {
            steps: plan.steps(),
            operator,
            staged: stage_threads > 0,
            maps: plan.spec().native_dali.is_none_or(|n| n.maps),
        };
        let progress = Progress {
            taken_positions: 0,
            handed_on: HashMap::new(),
            staging: 0,
            claimed: 0,
            operated: 0,
            staged: 0,
            taken: 0,
            pulled: vec![LoadedBatch::default(); plan.steps() as usize + 1],
        };
        let staged = shape.staged;
        let board = Board::new(shape, progress);
        Crew::start(scope, source, board, 1 + stage_threads, buffers, work)
            .map(|crew| NativeDaliPipeline { crew, dali, staged })
    }

    /// Batch `step`, once its samples are read (and through the stage, when there is one).
    pub(super) fn next_batch(&mut self, step: u64) -> Result<LoadedBatch> {
        let (dali, staged) = (self.dali, self.staged);
        let board = self.crew.board();
        let ready = |s: &Sheet<Progress>| match staged {
            true => s.own.staged > step,
            false => s.own.taken_positions >= dali.needed_for(step),
        };
        let mut sheet = board.wait_for_trainer(self.crew.len(), ready)?;
        if !ready(&sheet) {
            return Err(Error::run(format!(
                "the reader threads stopped before step {} was read",
                step + 1
            )));
        }
        sheet.own.taken = step + 1;
        let loaded = sheet.own.pulled[step as usize];
        board.changed(&sheet);
        Ok(loaded)
    }

    /// Stops the threads and hands back their states.
    pub(super) fn finish(self) -> Vec<Result<(ReaderState<'env>, Result<()>)>> {
        self.crew.finish()
    }
}

/// Worker 0 reads the stream; the others are the pipeline's stage.
fn work(
    board: &Board<Shape, Progress>,
    source: &BatchSource,
    worker: u64,
    state: &mut ReaderState,
) -> Result<()> {
    let dali = source
        .plan
        .dali()
        .expect("the plan of a native_dali loader");
    if worker > 0 {
        return stage(board, source, dali, state);
    }
    state.defers_preprocess = true;
    let handoff = Arc::new(Mutex::new(None));
    let records = match board.fixed.operator {
        Some(DaliOperator::Record) => Some(read_indexes(source, dali, &mut state.buffer.bytes)?),
        _ => None,
    };
    let handoff_to = Arc::clone(&handoff);
    state.reader = match (board.fixed.operator, board.fixed.maps) {
        (None, true) => Box::new(WholeFileMap),
        (None, false) => Box::new(NumpyRead),
        (Some(_), true) => {
            // The mappings, not the thread's file, decide when pages are evicted: the file the
            // reader moves off may still be in the operators' hands.
            state.tells_storage = false;
            Box::new(AdvisedMap {
                handoff: handoff_to,
                records,
                file: None,
            })
        }
        (Some(_), false) => Box::new(CopiedRead {
            handoff: handoff_to,
            records,
        }),
    };
    let steps = board.fixed.steps;
    let mut pulled_for = 0;
    loop {
        let sheet = board.wait(board.lock(), |s| {
            s.stopped() || s.own.taken_positions < dali.readable(s.own.taken)
        });
        if sheet.stopped() {
            return Ok(());
        }
        let position = sheet.own.taken_positions;
        drop(sheet);
        // The first batch that cannot be handed on without this position.
        while pulled_for < steps && dali.needed_for(pulled_for) <= position {
            pulled_for += 1;
        }
        let mut loaded = LoadedBatch::default();
        if let Some(sample) = dali.sample_at(position) {
            let read = source.read_samples(pulled_for, std::iter::once(sample), state);
            if let Some(meter) = state.meter {
                meter.reads_pause();
            }
            loaded = read?;
        }
        let handed = handoff
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        let mut sheet = board.lock();
        if let Some(handed) = handed {
            sheet.own.handed_on.insert(position, handed);
        }
        let pulled = &mut sheet.own.pulled[pulled_for as usize];
        pulled.samples += loaded.samples;
        pulled.bytes += loaded.bytes;
        sheet.own.taken_positions += 1;
        board.changed(&sheet);
    }
}

/// The pipeline's stage, batch after batch, at most its outputs ahead of the trainer: the
/// operators on the batch's samples, one per thread at a time, then `preprocess` slept for each
/// sample one after another by the thread that finished the batch's operators.
fn stage(
    board: &Board<Shape, Progress>,
    source: &BatchSource,
    dali: &DaliShard,
    state: &mut ReaderState,
) -> Result<()> {
    let batch = source.plan.batch_size();
    let steps = board.fixed.steps;
    let mut scratch = Vec::new();
    loop {
        let mut sheet = board.wait(board.lock(), |s| {
            let step = s.own.staging;
            s.stopped()
                || step >= steps
                || (s.own.claimed < batch
                    && s.own.taken_positions >= dali.needed_for(step)
                    && step < s.own.taken + PIPELINE_BATCHES)
        });
        let step = sheet.own.staging;
        if sheet.stopped() || step >= steps {
            return Ok(());
        }
        let slot = step * batch + sheet.own.claimed;
        sheet.own.claimed += 1;
        // A pad slot holds the stream position of the sample it copies.
        let handed = sheet.own.handed_on.get(&dali.emitted(slot)).cloned();
        drop(sheet);
        if let (Some(operator), Some(handed)) = (board.fixed.operator, handed) {
            crate::interrupt::check()?;
            operator.run(handed.bytes(), &mut scratch).map_err(|why| {
                let (key, sample) = sample_of(source, dali, slot);
                match operator {
                    DaliOperator::Record => {
                        corrupt(source.storage, &key, format!("record {sample}: {why}"))
                    }
                    DaliOperator::Image { .. } => corrupt(source.storage, &key, why),
                }
            })?;
        }
        let mut sheet = board.lock();
        sheet.own.operated += 1;
        if sheet.own.operated < batch {
            board.changed(&sheet);
            continue;
        }
        drop(sheet);
        for _ in 0..batch {
            crate::interrupt::check()?;
            state
                .sleeper
                .sleep(source.preprocess_time.draw(&mut state.rng));
        }
        let mut sheet = board.lock();
        let done: Vec<Handed> = (step * batch..(step + 1) * batch)
            .filter_map(|slot| sheet.own.handed_on.remove(&dali.emitted(slot)))
            .collect();
        sheet.own.staged = step + 1;
        sheet.own.staging = step + 1;
        sheet.own.claimed = 0;
        sheet.own.operated = 0;
        board.changed(&sheet);
        drop(sheet);
        // The batch is through: where this was a mapping's last holder (its file's records
        // all through, the reader past it), the mapping goes, its pages evicted.
        for handed in done {
            let Handed::Mapped(mapped, _) = handed else {
                continue;
            };
            if let Some(mapped) = Arc::into_inner(mapped) {
                mapped.finish().map_err(|e| {
                    Error::run(format!(
                        "cannot release the mapping of a sample of step {}: {e}",
                        step + 1
                    ))
                })?;
            }
        }
    }
}

/// The file and sample emitted slot `slot` holds, for messages.
fn sample_of(source: &BatchSource, dali: &DaliShard, slot: u64) -> (String, u64) {
    let mut key = String::new();
    let sample = dali.sample_at(dali.emitted(slot)).unwrap_or_default();
    source
        .dataset
        .write_file_key(&mut key, source.split, sample.file);
    (key, sample.sample)
}

/// The records of the shard's files, from DLIO's index files: the pipeline reads the index of
/// every file of the split when it is built (`fn.readers.tfrecord`'s `index_path`, all files on
/// every rank), and keeps those of the files shard 0 reads.
fn read_indexes(
    source: &BatchSource,
    dali: &DaliShard,
    buf: &mut IoBuffer,
) -> Result<Arc<Records>> {
    let per_file = source.plan.spec().samples_per_file.max(1);
    let mut records = HashMap::new();
    let mut key = String::new();
    for file in 0..source.plan.spec().files {
        crate::interrupt::check()?;
        source.dataset.write_file_key(&mut key, source.split, file);
        let index = crate::format::tfrecord_index_key(&key);
        let read = source.storage.read_all(&index, buf).map_err(|e| {
            Error::on_object(
                "cannot read the DALI index file (DLIO's generator writes it beside each \
                 tfrecord file; generate the dataset again)",
                source.storage.describe(&index),
                e,
            )
        })?;
        let text = &buf.as_slice()[read.start..read.start + read.len];
        let listed = crate::format::parse_tfrecord_index(text)
            .map_err(|why| corrupt(source.storage, &index, why))?;
        if listed.len() as u64 != per_file {
            return Err(corrupt(
                source.storage,
                &index,
                format!(
                    "it lists {} records, the dataset has {per_file} per file",
                    listed.len()
                ),
            ));
        }
        if file < dali.files_touched() {
            records.insert(key.clone(), listed);
        }
    }
    Ok(Arc::new(records))
}

/// DALI's file and tfrecord readers: the sample's file mapped whole (once for all its records),
/// the kernel asked to read the sample ahead, and the sample handed on to the operators.
struct AdvisedMap {
    handoff: Arc<Mutex<Option<Handed>>>,
    /// The records of each file of the shard (the tfrecord reader); `None`: a file is a sample.
    records: Option<Arc<Records>>,
    /// The file the reader is in, and its mapping.
    file: Option<(String, Arc<Mapped>)>,
}

impl SampleReader for AdvisedMap {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        _buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        if self.file.as_ref().is_none_or(|(k, _)| k != key) {
            let mapped = storage
                .map_whole(key)
                .map_err(|e| Error::on_object("cannot map data file", storage.describe(key), e))?;
            self.file = Some((key.to_string(), Arc::new(mapped)));
        }
        let (_, mapped) = self.file.as_ref().expect("mapped above");
        let size = mapped.as_slice().len() as u64;
        let (offset, len) = sample_range(self.records.as_deref(), storage, key, sample, size)?;
        let range = offset as usize..(offset + len) as usize;
        mapped.will_need(range.start, range.len()).map_err(|e| {
            Error::on_object(
                "cannot advise the kernel to read ahead",
                storage.describe(key),
                e,
            )
        })?;
        *self.handoff.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Handed::Mapped(Arc::clone(mapped), range));
        Ok(SampleRead { offset, bytes: len })
    }

    fn put_down(&mut self) {
        self.file = None;
    }
}

/// Where sample `sample` of the file at `key` (of `size` bytes) lies: the record its index lists
/// (the tfrecord reader), or the whole file.
fn sample_range(
    records: Option<&Records>,
    storage: &dyn Storage,
    key: &str,
    sample: u64,
    size: u64,
) -> Result<(u64, u64)> {
    let Some(records) = records else {
        return Ok((0, size));
    };
    let (offset, len) = records
        .get(key)
        .and_then(|r| r.get(sample as usize))
        .copied()
        .ok_or_else(|| corrupt(storage, key, format!("its index lists no record {sample}")))?;
    if offset.checked_add(len).is_none_or(|end| end > size) {
        return Err(corrupt(
            storage,
            key,
            format!(
                "its index puts record {sample} at {len} bytes from offset {offset}, past the \
                 file's {size} bytes"
            ),
        ));
    }
    Ok((offset, len))
}

/// DALI's file and tfrecord readers with `dont_use_mmap`: the sample read with one request (the
/// whole file; the record the index points at, the file's records one after another), on the
/// reader thread, and its bytes handed on to the operators.
struct CopiedRead {
    handoff: Arc<Mutex<Option<Handed>>>,
    records: Option<Arc<Records>>,
}

impl SampleReader for CopiedRead {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let (offset, fetched, bytes) = match &self.records {
            None => {
                let fetched = crate::format::read_whole(storage, key, buf)?;
                (0, fetched, buf.bytes.as_slice().to_vec())
            }
            Some(records) => {
                let size = storage.size(key).map_err(|e| {
                    Error::on_object(
                        "cannot read the size of data file",
                        storage.describe(key),
                        e,
                    )
                })?;
                let (offset, len) = sample_range(Some(records), storage, key, sample, size)?;
                let read =
                    crate::format::read_exact_range(storage, key, offset, len as usize, buf)?;
                let bytes = buf.bytes.as_slice()[read.start..read.start + read.len].to_vec();
                (offset, read.fetched, bytes)
            }
        };
        *self.handoff.lock().unwrap_or_else(PoisonError::into_inner) =
            Some(Handed::Read(Arc::new(bytes)));
        Ok(SampleRead {
            offset,
            bytes: fetched,
        })
    }
}

/// DALI's numpy reader with `dont_use_mmap`, as measured: the header's first 4 KiB read, read
/// again from the file's start once it is parsed, then the data from 4 KiB on, each through
/// the C library's buffer (three requests per file, the second served by the page cache).
struct NumpyRead;

/// The block DALI's numpy reader reads its header in.
const NUMPY_HEADER_READ: u64 = 4096;

impl SampleReader for NumpyRead {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        _sample: u64,
        buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let size = storage.size(key).map_err(|e| {
            Error::on_object(
                "cannot read the size of data file",
                storage.describe(key),
                e,
            )
        })?;
        let head = size.min(NUMPY_HEADER_READ) as usize;
        let mut fetched = 0;
        for _ in 0..2 {
            fetched += crate::format::read_exact_range(storage, key, 0, head, buf)?.fetched;
        }
        if size > NUMPY_HEADER_READ {
            let rest = (size - NUMPY_HEADER_READ) as usize;
            fetched += crate::format::read_exact_range(storage, key, NUMPY_HEADER_READ, rest, buf)?
                .fetched;
        }
        Ok(SampleRead {
            offset: 0,
            bytes: fetched,
        })
    }
}

/// DALI's numpy reader with its default `dont_use_mmap = False`: each file mapped whole and every
/// byte of it read (the header is parsed from the mapping: no request of its own).
struct WholeFileMap;

impl SampleReader for WholeFileMap {
    fn read_sample(
        &mut self,
        storage: &dyn Storage,
        key: &str,
        _sample: u64,
        _buf: &mut ReadBuffer,
    ) -> Result<SampleRead> {
        let mapped = storage
            .map_whole(key)
            .map_err(|e| Error::on_object("cannot map data file", storage.describe(key), e))?;
        let size = mapped.as_slice().len() as u64;
        read_every_byte(mapped.as_slice());
        mapped.finish().map_err(|e| {
            Error::on_object("cannot release the mapping of", storage.describe(key), e)
        })?;
        Ok(SampleRead {
            offset: 0,
            bytes: size,
        })
    }
}
