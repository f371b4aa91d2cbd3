//! The epoch plan against its promises: every sample at most once per epoch in equal steps,
//! inverse look-ups, reader threads' lanes, the orders seeded and random shuffles give, and
//! DLIO's evaluation schedule.

use super::*;
use proptest::prelude::*;
use std::collections::HashSet;

fn spec(files: u64, spf: u64, batch: u64, world: u64, shuffle: Shuffle) -> PlanSpec {
    PlanSpec {
        files,
        samples_per_file: spf,
        batch,
        world,
        max_steps: 0,
        file_shuffle: shuffle,
        sample_shuffle: shuffle,
        seed: 123,
        run_entropy: 99,
        seed_change_epoch: true,
        file_sharded: false,
        lanes: 1,
        pipeline: None,
        thread_chunks: false,
        native_dali: None,
    }
}

fn all_reads(plan: &EpochPlan) -> Vec<SampleRef> {
    let world = plan.spec().world;
    (0..world)
        .flat_map(|r| (0..plan.steps()).flat_map(move |s| plan.batch(r, s).collect::<Vec<_>>()))
        .collect()
}

fn shuffles() -> impl Strategy<Value = (Shuffle, Shuffle)> {
    let one = prop_oneof![
        Just(Shuffle::Off),
        Just(Shuffle::Seed),
        Just(Shuffle::Random)
    ];
    (one.clone(), one)
}

proptest! {
    #[test]
    fn every_sample_at_most_once_and_equal_steps(
        files in 0u64..300, spf in 1u64..9, batch in 1u64..40, world in 1u64..9,
        (fs, ss) in shuffles(), epoch in 0u64..4, cap in 0u64..5, sharded: bool,
        lanes in 1u64..6, interleaved: bool, chunks: bool,
    ) {
        let mut s = spec(files, spf, batch, world, Shuffle::Off);
        s.file_shuffle = fs;
        s.sample_shuffle = ss;
        s.max_steps = cap;
        s.file_sharded = sharded && files >= world;
        s.lanes = lanes;
        s.thread_chunks = chunks;
        s.pipeline = interleaved.then_some(PipelineBuffers { shuffle: 3, ahead: 2 });
        let plan = EpochPlan::new(s.clone(), epoch);
        let full = if s.file_sharded {
            files / world * spf / batch
        } else {
            files * spf / (batch * world)
        };
        let expected_steps = full.min(if cap > 0 { cap } else { u64::MAX });
        prop_assert_eq!(plan.steps(), expected_steps);
        let reads = all_reads(&plan);
        prop_assert_eq!(reads.len() as u64, plan.samples_read());
        let unique: HashSet<_> = reads.iter().copied().collect();
        prop_assert_eq!(unique.len(), reads.len(), "a sample was planned twice");
        for r in &reads {
            prop_assert!(r.file < files && r.sample < spf);
        }
        prop_assert_eq!(plan.samples_read() + plan.samples_not_read(), files * spf);
        if cap == 0 && !s.file_sharded {
            prop_assert!(plan.samples_not_read() < batch * world);
        }
        if s.file_sharded {
            // Every file is read by one rank only.
            let mut owner = std::collections::HashMap::new();
            for rank in 0..world {
                for step in 0..plan.steps() {
                    for read in plan.batch(rank, step) {
                        prop_assert_eq!(*owner.entry(read.file).or_insert(rank), rank);
                    }
                }
            }
        }
    }
}

proptest! {
    #[test]
    fn position_of_inverts_sample_at(
        files in 0u64..200, spf in 1u64..7, batch in 1u64..12, world in 1u64..5,
        (fs, ss) in shuffles(), epoch in 0u64..4, sharded: bool, cap in 0u64..6,
        lanes in 1u64..7, interleaved: bool, chunks: bool,
    ) {
        let mut s = spec(files, spf, batch, world, Shuffle::Off);
        s.file_shuffle = fs;
        s.sample_shuffle = ss;
        s.file_sharded = sharded && files >= world;
        s.max_steps = cap;
        s.lanes = lanes;
        s.thread_chunks = chunks;
        s.pipeline = interleaved.then_some(PipelineBuffers { shuffle: 3, ahead: 2 });
        let plan = EpochPlan::new(s, epoch);
        for position in 0..files * spf {
            prop_assert_eq!(plan.position_of(plan.sample_at(position)), Some(position));
        }
        prop_assert_eq!(plan.position_of(SampleRef { file: files, sample: 0 }), None);
        prop_assert_eq!(plan.position_of(SampleRef { file: 0, sample: spf }), None);
    }
}

proptest! {
    /// What each reader thread of a rank reads, computed from the rule independently of the
    /// plan's arithmetic: first its own files (shard files j ≡ thread mod lanes) from their first
    /// record on, then, if its steps take more, records borrowed from other lanes' files; and
    /// no thread comes back to a file it has left.
    #[test]
    fn each_thread_streams_its_own_files_then_borrows(
        files in 1u64..120, spf in 1u64..9, batch in 1u64..20, world in 1u64..5,
        lanes in 1u64..7, cap in 0u64..12, file_shuffle: bool, epoch in 0u64..3,
    ) {
        let mut s = spec(files.max(world), spf, batch, world, Shuffle::Off);
        s.file_shuffle = if file_shuffle { Shuffle::Seed } else { Shuffle::Off };
        s.sample_shuffle = Shuffle::Seed;
        s.file_sharded = true;
        s.lanes = lanes;
        s.max_steps = cap;
        let plan = EpochPlan::new(s.clone(), epoch);
        let shard_files = s.files / world;
        let file_at = |slot: u64| plan.files_order.as_ref().map_or(slot, |p| p.apply(slot));
        let mut borrowed = 0;
        let mut expected_borrowed = 0;
        for rank in 0..world {
            for thread in 0..lanes {
                let reads: Vec<SampleRef> = (thread..plan.steps())
                    .step_by(lanes as usize)
                    .flat_map(|step| plan.batch(rank, step).collect::<Vec<_>>())
                    .collect();
                let own: Vec<SampleRef> = (thread..shard_files)
                    .step_by(lanes as usize)
                    .flat_map(|j| {
                        let file = file_at(rank * shard_files + j);
                        (0..spf).map(move |sample| SampleRef { file, sample })
                    })
                    .collect();
                let from_own = reads.len().min(own.len());
                prop_assert_eq!(&reads[..from_own], &own[..from_own]);
                let own_files: HashSet<u64> = own.iter().map(|r| r.file).collect();
                for read in &reads[from_own..] {
                    prop_assert!(!own_files.contains(&read.file), "borrowed its own record");
                }
                borrowed += reads.len() - from_own;
                expected_borrowed += reads.len().saturating_sub(own.len());
                // One run of consecutive records per file.
                let mut left = HashSet::new();
                for pair in reads.windows(2) {
                    if pair[0].file == pair[1].file {
                        prop_assert_eq!(pair[1].sample, pair[0].sample + 1);
                    } else {
                        left.insert(pair[0].file);
                        prop_assert!(!left.contains(&pair[1].file), "came back to a file");
                    }
                }
            }
        }
        prop_assert_eq!(borrowed, expected_borrowed);
        // Without borrowing, every file is read by one thread only.
        if expected_borrowed == 0 {
            let mut reader = std::collections::HashMap::new();
            for rank in 0..world {
                for step in 0..plan.steps() {
                    for read in plan.batch(rank, step) {
                        let thread = (rank, step % lanes);
                        prop_assert_eq!(*reader.entry(read.file).or_insert(thread), thread);
                    }
                }
            }
        }
    }
}

proptest! {
    /// In `tf.data`'s order, a rank's batches are its interleave order cut in batches, its
    /// shard is `shard(world, rank)` of the files in name order (a file shuffle is undone, as
    /// TensorFlow's `list_files` sorts), and the order goes on past the last step
    /// (what the pipeline may read ahead) over the rest of the shard, each record once.
    #[test]
    fn interleaved_batches_cut_the_interleave_order(
        files in 1u64..60, spf in 1u64..6, batch in 1u64..10, world in 1u64..4,
        lanes in 1u64..6, cap in 0u64..8, file_shuffle: bool, epoch in 0u64..3,
    ) {
        let mut s = spec(files.max(world), spf, batch, world, Shuffle::Off);
        s.file_shuffle = if file_shuffle { Shuffle::Seed } else { Shuffle::Off };
        s.sample_shuffle = Shuffle::Seed;
        s.file_sharded = true;
        s.pipeline = Some(PipelineBuffers { shuffle: 3, ahead: 2 });
        s.lanes = lanes;
        s.max_steps = cap;
        let plan = EpochPlan::new(s.clone(), epoch);
        let order = *plan.interleave().unwrap();
        prop_assert_eq!(order.lanes(), lanes);
        prop_assert!(plan.files_order.is_none(), "TensorFlow sorts the file names");
        prop_assert_eq!(order.files(), s.files / world);
        for rank in 0..world {
            let mut seen = HashSet::new();
            for position in 0..order.len() {
                let record = plan.interleaved_record(rank, position).unwrap();
                let (file, sample) = order.record_at(position);
                prop_assert_eq!(record, SampleRef { file: file * world + rank, sample });
                prop_assert!(seen.insert(record));
                let (step, at) = (position / batch, position % batch);
                if step < plan.steps() {
                    prop_assert_eq!(plan.batch(rank, step).nth(at as usize), Some(record));
                }
            }
            prop_assert_eq!(plan.interleaved_record(rank, order.len()), None);
        }
    }
}

proptest! {
    /// Under DLIO's TensorFlow generators, each thread's steps read one contiguous run of the
    /// rank's samples in order (its share), the shares lie thread after thread, and together
    /// they are the rank's contiguous range.
    #[test]
    fn each_generator_thread_reads_a_contiguous_share(
        files in 1u64..80, spf in 1u64..6, batch in 1u64..9, world in 1u64..4,
        lanes in 1u64..6, cap in 0u64..9,
    ) {
        let mut s = spec(files, spf, batch, world, Shuffle::Off);
        s.thread_chunks = true;
        s.lanes = lanes;
        s.max_steps = cap;
        let plan = EpochPlan::new(s, 0);
        let read = plan.steps() * batch;
        for rank in 0..world {
            let mut expected = rank * read;
            for thread in 0..lanes {
                for step in (thread..plan.steps()).step_by(lanes as usize) {
                    for sample in plan.batch(rank, step) {
                        prop_assert_eq!(sample.file * spf + sample.sample, expected);
                        expected += 1;
                    }
                }
            }
            prop_assert_eq!(expected, (rank + 1) * read);
        }
    }
}

/// Five files, four lanes, batches of two: lane 0 holds two files, its steps take six records
/// and leave two spare, which lane 1 borrows in its last batch.
#[test]
fn a_short_lane_borrows_the_spare_records_of_a_long_one() {
    let mut s = spec(5, 4, 2, 1, Shuffle::Off);
    s.file_sharded = true;
    s.lanes = 4;
    let plan = EpochPlan::new(s.clone(), 1);
    let batches: Vec<Vec<(u64, u64)>> = (0..plan.steps())
        .map(|step| plan.batch(0, step).map(|r| (r.file, r.sample)).collect())
        .collect();
    assert_eq!(
        batches,
        vec![
            vec![(0, 0), (0, 1)],
            vec![(1, 0), (1, 1)],
            vec![(2, 0), (2, 1)],
            vec![(3, 0), (3, 1)],
            vec![(0, 2), (0, 3)],
            vec![(1, 2), (1, 3)],
            vec![(2, 2), (2, 3)],
            vec![(3, 2), (3, 3)],
            vec![(4, 0), (4, 1)],
            vec![(4, 2), (4, 3)],
        ]
    );
    // One lane is the stream in file order.
    s.lanes = 1;
    let natural: Vec<SampleRef> = (0..20)
        .map(|g| SampleRef {
            file: g / 4,
            sample: g % 4,
        })
        .collect();
    assert_eq!(all_reads(&EpochPlan::new(s, 1)), natural);
}

#[test]
fn lanes_follow_the_loaders_read_threads() {
    use crate::config::value::Value;
    let plan_spec = |format: &str, threads: u64, phase: Phase| {
        let yaml = format!(
            "dataset:\n  format: {format}\n  num_files_train: 8\n  num_files_eval: 4\nreader:\n  read_threads: {threads}\n"
        );
        let config = Config::from_tree("t", Value::from_yaml(&yaml).unwrap()).unwrap();
        PlanSpec::for_phase(&config, phase, 2, 0)
    };
    for phase in [Phase::Train, Phase::Eval] {
        assert_eq!(plan_spec("tfrecord", 3, phase).lanes, 3);
        assert_eq!(plan_spec("tfrecord", 0, phase).lanes, 1);
        // DLIO's TensorFlow loader (the default) deals other formats to its generator threads
        // too; under PyTorch's, batches go to threads whole, with no lanes.
        assert_eq!(plan_spec("npz", 3, phase).lanes, 3);
        assert!(plan_spec("npz", 3, phase).thread_chunks);
        assert!(!plan_spec("tfrecord", 3, phase).thread_chunks);
    }
}

#[test]
fn seeded_plans_repeat_and_change_per_epoch() {
    let s = spec(64, 2, 4, 2, Shuffle::Seed);
    let e1 = all_reads(&EpochPlan::new(s.clone(), 1));
    assert_eq!(e1, all_reads(&EpochPlan::new(s.clone(), 1)));
    assert_ne!(e1, all_reads(&EpochPlan::new(s.clone(), 2)));
    let mut fixed = s.clone();
    fixed.seed_change_epoch = false;
    assert_eq!(
        all_reads(&EpochPlan::new(fixed.clone(), 1)),
        all_reads(&EpochPlan::new(fixed, 2))
    );
    let off = spec(64, 2, 4, 2, Shuffle::Off);
    let natural: Vec<SampleRef> = (0..128)
        .map(|g| SampleRef {
            file: g / 2,
            sample: g % 2,
        })
        .collect();
    assert_eq!(all_reads(&EpochPlan::new(off, 3)), natural);
}

#[test]
fn random_depends_on_run_entropy() {
    let a = spec(64, 1, 4, 1, Shuffle::Random);
    let mut b = a.clone();
    b.run_entropy = 100;
    assert_ne!(
        all_reads(&EpochPlan::new(a, 1)),
        all_reads(&EpochPlan::new(b, 1))
    );
}

#[test]
fn file_shuffle_alone_keeps_samples_of_a_file_together() {
    let mut s = spec(16, 4, 4, 1, Shuffle::Off);
    s.file_shuffle = Shuffle::Seed;
    let plan = EpochPlan::new(s, 1);
    for step in 0..plan.steps() {
        let files: HashSet<u64> = plan.batch(0, step).map(|r| r.file).collect();
        assert_eq!(files.len(), 1);
    }
}

fn due_epochs(after: u64, between: u64) -> Vec<u64> {
    let yaml = format!(
        "workflow:\n  evaluation: True\ndataset:\n  num_files_eval: 2\nevaluation:\n  eval_after_epoch: {after}\n  epochs_between_evals: {between}\n"
    );
    let config =
        Config::from_tree("t", crate::config::value::Value::from_yaml(&yaml).unwrap()).unwrap();
    (1..=8).filter(|&e| eval_due(&config, e)).collect()
}

#[test]
fn eval_schedule_follows_dlio() {
    assert_eq!(due_epochs(1, 1), vec![1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(due_epochs(2, 3), vec![2, 5, 8]);
    // DLIO's stateful rule: after 0 with step 2 evaluates after epochs 1, 2, 4, 6, 8.
    assert_eq!(due_epochs(0, 2), vec![1, 2, 4, 6, 8]);
    assert_eq!(due_epochs(9, 1), Vec::<u64>::new());
}

/// The closed form is DLIO's stateful loop, replayed here epoch by epoch.
#[test]
fn next_eval_is_dlio_replayed() {
    for after in 0..8 {
        for between in 1..8 {
            let mut next = after;
            for past in 0..60 {
                if past >= 1 && past >= next {
                    next += between;
                }
                assert_eq!(
                    super::next_eval(after, between, past),
                    next,
                    "after {after}, between {between}, past {past}"
                );
            }
        }
    }
    // Far epochs and huge settings answer at once, without overflow.
    assert_eq!(super::next_eval(1, 1, 999_999), 1_000_000);
    assert_eq!(super::next_eval(u64::MAX, u64::MAX, u64::MAX), u64::MAX);
    assert_eq!(super::next_eval(3, u64::MAX, u64::MAX), u64::MAX);
}
