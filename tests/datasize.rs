//! `dlio-rs datasize` against mlpstorage's `training datasize` (calculate_training_data_size in
//! mlpstorage/rules.py, mlcommons/storage caa90c9): the same files and disk bytes for each
//! training workload on several accelerator, host and memory counts. Every expected value is
//! derived below by hand from the rule; the same ten rows were also computed by mlpstorage's own
//! function (imported from its source) and agree.
//!
//! The rule: memory = 5 × GiB × 1024³ × hosts; file = samples_per_file × record_length_bytes;
//! by_memory = ⌊memory / file⌋; by_steps = ⌊500 × accelerators × batch / samples_per_file⌋;
//! files = max(by_memory, by_steps); disk = ⌊files × file⌋ (floats where the record length has a
//! fraction, as Python computes it).

use serde_json::Value;

use crate::common::*;

/// (workload, max accelerators, GiB per host, hosts, files, disk bytes), with the derivation.
const TABLE: &[(&str, u64, u64, u64, u64, u64)] = &[
    // unet3d: file 146,600,628 B (1 sample), batch 7.
    // memory 5 × 256 × 2 GiB = 2,748,779,069,440 B → 18,750.08 → 18,750 files;
    // steps 500 × 8 × 7 = 28,000 files (larger); disk 28,000 × 146,600,628.
    ("unet3d_h100", 8, 256, 2, 28_000, 4_104_817_584_000),
    // memory 5 × 64 GiB = 343,597,383,680 B → 2,343 files; steps 500 × 1 × 7 = 3,500 (larger).
    ("unet3d_a100", 1, 64, 1, 3_500, 513_102_198_000),
    // memory 5 × 512 × 8 GiB → 150,000 files; steps 500 × 64 × 7 = 224,000 (larger).
    ("unet3d_h100", 64, 512, 8, 224_000, 32_838_540_672_000),
    // memory 5 × 7 × 3 GiB = 112,742,891,520 B → 769 files; steps 500 × 3 × 7 = 10,500.
    ("unet3d_a100", 3, 7, 3, 10_500, 1_539_306_594_000),
    // resnet50: file 1,251 × 114,660.07 = 143,439,747.57 B, batch 400.
    // memory 2,748,779,069,440 B → 19,163.30 → 19,163 (larger); steps 500 × 8 × 400 / 1,251 =
    // 1,278; disk ⌊19,163 × 143,439,747.57⌋.
    ("resnet50_h100", 8, 256, 2, 19_163, 2_748_735_882_683),
    // memory 5 × 1,024 × 16 GiB = 87,960,930,222,080 B → 613,225.99 → 613,225 (with the record
    // length floored to 114,660 it would be 613,226: the fraction matters); steps 20,463.
    ("resnet50_a100", 128, 1024, 16, 613_225, 87_960_839_203_613),
    // memory 5 × 16 GiB = 85,899,345,920 B → 598.85 → 598; steps 500 × 400 / 1,251 = 159.
    ("resnet50_h100", 1, 16, 1, 598, 85_776_969_046),
    // cosmoflow: file 2,828,486 B (1 sample), batch 1.
    // memory 2,748,779,069,440 B → 971,819.9 → 971,819; steps 500 × 8 = 4,000.
    ("cosmoflow_h100", 8, 256, 2, 971_819, 2_748_776_436_034),
    // memory 5 × 128 × 4 GiB: the same 2,560 GiB → 971,819; steps 16,000.
    ("cosmoflow_a100", 32, 128, 4, 971_819, 2_748_776_436_034),
    // memory 5 × 2,048 × 10 GiB = 109,951,162,777,600 B → 38,872,797; steps 500,000.
    (
        "cosmoflow_h100",
        1000,
        2048,
        10,
        38_872_797,
        109_951_162_095_342,
    ),
];

fn datasize_json(workload_words: &[&str], accelerators: u64, gib: u64, hosts: u64) -> Value {
    let mut args: Vec<String> = strings(&["datasize", "--json"]);
    args.extend(strings(workload_words));
    args.extend([
        format!("--max-accelerators={accelerators}"),
        format!("--client-host-memory-in-gb={gib}"),
        format!("--num-client-hosts={hosts}"),
    ]);
    let ran = dlio_rs(std::env::temp_dir().as_path(), &args).ok();
    serde_json::from_str(&ran.stdout).unwrap_or_else(|e| panic!("{e}\n{}", ran.context()))
}

#[test]
fn datasize_equals_mlpstorage_for_each_workload() {
    for &(workload, accelerators, gib, hosts, files, disk) in TABLE {
        let row = format!("{workload} {accelerators} × {gib} GiB × {hosts}");
        let size = datasize_json(&[&format!("workload={workload}")], accelerators, gib, hosts);
        assert_eq!(int(&size, "/num_files_train"), files, "{row}: {size}");
        assert_eq!(int(&size, "/num_subfolders_train"), 0, "{row}");
        assert_eq!(int(&size, "/disk_bytes"), disk, "{row}: {size}");
        // mlpstorage's own naming of the workload gives the same answer.
        let (model, accelerator) = workload.split_once('_').unwrap();
        let named = datasize_json(
            &[
                &format!("--model={model}"),
                &format!("--accelerator-type={accelerator}"),
            ],
            accelerators,
            gib,
            hosts,
        );
        assert_eq!(named, size, "{row}");
    }
}

#[test]
fn datasize_prints_the_generate_command_and_warns_past_10000_files() {
    let cwd = std::env::temp_dir();
    let ran = dlio_rs(
        &cwd,
        &[
            "datasize",
            "workload=unet3d_h100",
            "++workload.dataset.data_folder=/data/my set",
            "--max-accelerators=8",
            "--client-host-memory-in-gb=256",
            "--num-client-hosts=2",
        ],
    )
    .ok();
    for needle in [
        "training files:      28000",
        "500 steps per epoch",
        "3822.91 GiB",
        "num_subfolders_train=2 keeps about 10,000",
        "dlio-rs run workload=unet3d_h100 '++workload.dataset.data_folder=/data/my set' \
         ++workload.workflow.generate_data=True ++workload.workflow.train=False \
         ++workload.dataset.num_files_train=28000",
    ] {
        assert!(ran.stdout.contains(needle), "{needle}\n{}", ran.context());
    }
    // Bad input: exit 2, naming what is wrong.
    dlio_rs(
        &cwd,
        &[
            "datasize",
            "workload=unet3d_h100",
            "--client-host-memory-in-gb=1",
        ],
    )
    .fails(2)
    .says(&["--max-accelerators"]);
    dlio_rs(
        &cwd,
        &[
            "datasize",
            "workload=unet3d_h100",
            "--max-accelerators=0",
            "--client-host-memory-in-gb=1",
        ],
    )
    .fails(2)
    .says(&["--max-accelerators", "0"]);
    dlio_rs(
        &cwd,
        &[
            "datasize",
            "workload=unet3d_h100",
            "--model=unet3d",
            "--accelerator-type=h100",
            "--max-accelerators=1",
            "--client-host-memory-in-gb=1",
        ],
    )
    .fails(2)
    .says(&["not both"]);
    dlio_rs(
        &cwd,
        &[
            "datasize",
            "--model=unet3d",
            "--accelerator-type=z900",
            "--max-accelerators=1",
            "--client-host-memory-in-gb=1",
        ],
    )
    .fails(2)
    .says(&["unet3d_z900"]);
}
