//! The checkpoint geometry against DLIO's own formulas: files and bytes per rank for every
//! parallelism and ZeRO stage, the reference values computed by DLIO's code, and the keys a bad
//! layout names.

use super::*;
use crate::config::overrides::Overrides;
use crate::config::Source;

// Reference values: computed by DLIO's own formulas (argonne-lcf/dlio_benchmark e1919d7,
// the same as mlperf_storage_v2.0 392621b in these parts:
// dlio_benchmark/checkpointing/base_checkpointing.py, get_num_parameters,
// get_layer_parameters, get_layer_state, get_optimization_groups, the allocation in
// BaseCheckpointing.__init__; utils/config.py validate). Units: bytes; fp16 = 2 B, fp32 = 4 B.

fn config(words: &[&str]) -> Config {
    Source {
        overrides: Overrides::parse(words).unwrap(),
        config_dir: None,
    }
    .resolve(false)
    .unwrap()
}

fn geometry(words: &[&str], world: u64) -> Geometry {
    let geometry = Geometry::new(&config(words), world).unwrap();
    assert_consistent(&geometry);
    geometry
}

/// Every rank's bytes are the sum of its files, and the total the sum of the ranks; each file's
/// state dict holds its bytes.
fn assert_consistent(geometry: &Geometry) {
    let mut total = 0;
    for rank in 0..geometry.world() {
        let files = geometry.files(rank);
        let states = geometry.states(rank);
        assert_eq!(states.len(), files.len(), "rank {rank}");
        for (file, state) in files.iter().zip(&states) {
            assert_eq!(
                state.payload_bytes(),
                file.bytes,
                "rank {rank}: {}",
                file.name
            );
        }
        assert_eq!(
            geometry.rank_bytes(rank),
            files.iter().map(|f| f.bytes).sum::<u64>(),
            "rank {rank}"
        );
        assert!(geometry.takes_part(rank) || files.is_empty(), "rank {rank}");
        total += geometry.rank_bytes(rank);
    }
    assert_eq!(geometry.total_bytes(), total);
}

fn files(geometry: &Geometry, rank: u64) -> Vec<(String, u64)> {
    geometry
        .files(rank)
        .into_iter()
        .map(|f| (f.name, f.bytes))
        .collect()
}

fn file_count(geometry: &Geometry) -> usize {
    (0..geometry.world()).map(|r| geometry.files(r).len()).sum()
}

fn owned(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|&(n, b)| (n.to_string(), b)).collect()
}

// llama3_8b: L=32, H=4096, V=128256, F=14336, 32 heads, 8 kv heads → head 128, dkv 1024.
// P = 2·V·H + L·(2H + H·(H+2·dkv) + H² + 3·F·H) + H
//   = 1,050,673,152 + 32·218,112,000 + 4096 = 8,030,261,248.
// ZeRO 3, world 8: DP 8, every tensor ÷ 8:
//   layer = 512 + 3,145,728 + 2,097,152 + 512 + 14,680,064 + 7,340,032 = 27,264,000 el
//         = 54,528,000 B; embedding = lm_head = 4096·128256/8 = 65,667,072 el; norm 512 el.
//   model file = 32·54,528,000 + 2·65,667,072·2 + 512·2 = 2,007,565,312 B.
//   n = P/8 = 1,003,782,656; optimizer = (3n + 15H)·4 = 12,045,637,632 B.
const L8B_MODEL_Z3: u64 = 2_007_565_312;
const L8B_OPTIM_DP8: u64 = 12_045_637_632;
// ZeRO 0-2 hold the unsharded model: 32·436,224,000 + 2·525,336,576 + 8192.
const L8B_MODEL_WHOLE: u64 = 16_060_522_496;

#[test]
fn llama3_8b_world_8() {
    let g = geometry(&["workload=llama3_8b"], 8);
    assert_eq!(
        (
            g.zero_stage(),
            g.tensor_parallelism(),
            g.pipeline_parallelism()
        ),
        (3, 1, 1)
    );
    assert_eq!((g.model_parallelism(), g.data_parallelism()), (1, 8));
    assert_eq!(g.num_parameters(), 8_030_261_248);
    assert_eq!(
        files(&g, 0),
        owned(&[
            ("zero_pp_rank_0_mp_rank_0_model_states.pt", L8B_MODEL_Z3),
            ("zero_pp_rank_0_mp_rank_0_optim_states.pt", L8B_OPTIM_DP8),
        ])
    );
    let kinds: Vec<ShardKind> = g.files(7).iter().map(|f| f.kind).collect();
    assert_eq!(kinds, [ShardKind::Model, ShardKind::Optimizer]);
    assert_eq!(
        files(&g, 7),
        owned(&[
            ("zero_pp_rank_7_mp_rank_0_model_states.pt", L8B_MODEL_Z3),
            ("zero_pp_rank_7_mp_rank_0_optim_states.pt", L8B_OPTIM_DP8),
        ])
    );
    // 8 · (2,007,565,312 + 12,045,637,632) = 8 · 14,053,202,944 (104.70 GiB).
    assert_eq!(g.rank_bytes(3), 14_053_202_944);
    assert_eq!(g.total_bytes(), 112_425_623_552);
    assert_eq!(g.dlio_reported_bytes(), g.total_bytes());
    assert!(g.can_be_read());
}

#[test]
fn llama3_8b_each_zero_stage() {
    let words = |z: &'static str| ["workload=llama3_8b", z];
    // ZeRO 0: only rank 0 (< MP = 1) takes part, with n = P = 8,030,261,248:
    // optimizer (3·8,030,261,248 + 61,440)·4 = 96,363,380,736.
    let g = geometry(&words("++workload.model.parallelism.zero_stage=0"), 8);
    assert_eq!(
        files(&g, 0),
        owned(&[
            ("zero_pp_rank_0_mp_rank_0_model_states.pt", L8B_MODEL_WHOLE),
            ("zero_pp_rank_0_mp_rank_0_optim_states.pt", 96_363_380_736),
        ])
    );
    assert!((1..8).all(|r| g.files(r).is_empty() && !g.takes_part(r)));
    assert_eq!(g.total_bytes(), 112_423_903_232);
    assert_eq!(g.dlio_reported_bytes(), 112_423_903_232);

    // ZeRO 1 and 2: dp rank 0 writes the whole model as model_0_model_states, every rank
    // its optimizer shard: 16,060,522,496 + 8·12,045,637,632 = 112,425,623,552.
    for stage in ["1", "2"] {
        let word = format!("++workload.model.parallelism.zero_stage={stage}");
        let g = geometry(&["workload=llama3_8b", &word], 8);
        assert_eq!(
            files(&g, 0),
            owned(&[
                ("model_0_model_states.pt", L8B_MODEL_WHOLE),
                ("zero_pp_rank_0_mp_rank_0_optim_states.pt", L8B_OPTIM_DP8),
            ])
        );
        assert_eq!(
            files(&g, 5),
            owned(&[("zero_pp_rank_5_mp_rank_0_optim_states.pt", L8B_OPTIM_DP8)])
        );
        assert_eq!(g.total_bytes(), 112_425_623_552);
        assert_eq!(file_count(&g), 9);
    }
    // DLIO's checkpoint_size: ZeRO 1 counts the model once; ZeRO 2 counts it on all 8
    // ranks: 8·16,060,522,496 + 8·12,045,637,632 = 224,849,281,024 (209.41 GiB).
    let g1 = geometry(&words("++workload.model.parallelism.zero_stage=1"), 8);
    assert_eq!(g1.dlio_reported_bytes(), 112_425_623_552);
    let g2 = geometry(&words("++workload.model.parallelism.zero_stage=2"), 8);
    assert_eq!(g2.dlio_reported_model_bytes(), 128_484_179_968);
    assert_eq!(g2.dlio_reported_optimizer_bytes(), 96_365_101_056);
    assert_eq!(g2.dlio_reported_bytes(), 224_849_281_024);

    let g3 = geometry(&words("++workload.model.parallelism.zero_stage=3"), 8);
    assert_eq!(g3.total_bytes(), 112_425_623_552);
    assert_eq!(file_count(&g3), 16);
}

#[test]
fn llama3_70b_world_64() {
    // TP 8, ZeRO 3, DP 8; H=8192, 128 heads, 8 kv → head 64, dkv 512.
    // P = 69,882,617,856; n = P/64 = 1,091,915,904;
    //   optimizer = (3n + 15·8192)·4 = 13,103,482,368.
    // Per rank (÷ TP 8 ÷ DP 8, norms ÷ 8 only): layer = 1024 + 1,179,648 + 1,048,576 + 1024
    //   + 7,340,032 + 3,670,016 = 13,240,320 el = 26,480,640 B; embedding 16,416,768 el;
    //   model = 80·26,480,640 + 2·16,416,768·2 + 1024·2 = 2,184,120,320.
    let g = geometry(&["workload=llama3_70b"], 64);
    assert_eq!((g.model_parallelism(), g.data_parallelism()), (8, 8));
    assert_eq!(g.num_parameters(), 69_882_617_856);
    // Rank 63: dp 63/8 = 7, mp 63%8 = 7.
    assert_eq!(
        files(&g, 63),
        owned(&[
            ("zero_pp_rank_7_mp_rank_7_model_states.pt", 2_184_120_320),
            ("zero_pp_rank_7_mp_rank_7_optim_states.pt", 13_103_482_368),
        ])
    );
    // 64 · 15,287,602,688 (911.21 GiB).
    assert_eq!(g.total_bytes(), 978_406_572_032);
    assert_eq!(g.dlio_reported_bytes(), 978_406_572_032);
    assert_eq!(file_count(&g), 128);
}

// llama3_405b: L=126, H=16384, F=53248, 128 heads, 8 kv → dkv 1024; TP 8, PP 32, ZeRO 1.
// layer ÷ TP 8 = 16384 + 37,748,736 + 33,554,432 + 16384 + 218,103,808 + 109,051,904
//   = 398,491,648 el = 796,983,296 B; embedding/lm_head 16384·128256/8 = 262,668,288 el
//   = 525,336,576 B; norm 16384 el = 32,768 B.
// 126 = 32·3 + 30: stages 0-29 get 4 layers, 30-31 get 3.
const L405B_LAYER: u64 = 796_983_296;
const L405B_EMBEDDING: u64 = 525_336_576;
// P = 405,853,388,800; world 512 → DP 2, n = P/512 = 792,682,400;
// optimizer = (3n + 15·16384)·4 = 9,513,171,840.
const L405B_OPTIM_DP2: u64 = 9_513_171_840;

#[test]
fn llama3_405b_world_512() {
    let g = geometry(&["workload=llama3_405b"], 512);
    assert_eq!((g.model_parallelism(), g.data_parallelism()), (256, 2));
    assert_eq!(g.num_parameters(), 405_853_388_800);
    // Rank 0: stage 0 owns the embedding and layers 1-4.
    let mut rank0 = vec![(
        "layer_0-model_0_model_states.pt".to_string(),
        L405B_EMBEDDING,
    )];
    for i in 1..=4 {
        rank0.push((format!("layer_{i}-model_0_model_states.pt"), L405B_LAYER));
    }
    rank0.push((
        "zero_pp_rank_0_mp_rank_0_optim_states.pt".into(),
        L405B_OPTIM_DP2,
    ));
    assert_eq!(files(&g, 0), rank0);
    assert_eq!(g.rank_bytes(0), 13_226_441_600);
    // Rank 240: stage 30 owns layers 30·4+1 = 121..123.
    assert_eq!(
        files(&g, 240),
        owned(&[
            ("layer_121-model_240_model_states.pt", L405B_LAYER),
            ("layer_122-model_240_model_states.pt", L405B_LAYER),
            ("layer_123-model_240_model_states.pt", L405B_LAYER),
            (
                "zero_pp_rank_0_mp_rank_240_optim_states.pt",
                L405B_OPTIM_DP2
            ),
        ])
    );
    // Rank 248: stage 31 owns 124..126, lm_head 127 and the final norm 128.
    assert_eq!(
        files(&g, 248),
        owned(&[
            ("layer_124-model_248_model_states.pt", L405B_LAYER),
            ("layer_125-model_248_model_states.pt", L405B_LAYER),
            ("layer_126-model_248_model_states.pt", L405B_LAYER),
            ("layer_127-model_248_model_states.pt", L405B_EMBEDDING),
            ("layer_128-model_248_model_states.pt", 32_768),
            (
                "zero_pp_rank_0_mp_rank_248_optim_states.pt",
                L405B_OPTIM_DP2
            ),
        ])
    );
    assert_eq!(g.rank_bytes(248), 12_429_491_072);
    // ZeRO 1: dp rank 1 (ranks 256-511) writes its optimizer shard only.
    assert_eq!(
        files(&g, 511),
        owned(&[(
            "zero_pp_rank_1_mp_rank_255_optim_states.pt",
            L405B_OPTIM_DP2
        )])
    );
    // Model per TP rank: 126·796,983,296 + 2·525,336,576 + 32,768 = 101,470,601,216;
    // total = 8·101,470,601,216 + 512·9,513,171,840 = 5,682,508,791,808 (5,292.25 GiB).
    assert_eq!(g.total_bytes(), 5_682_508_791_808);
    assert_eq!(g.dlio_reported_bytes(), 5_682_508_791_808);
    // 256 dp-0 ranks write 4 or 3 layer files (+2 at the ends): 8·(30·4 + 3 + 3 + 1 + 2)
    // = 1,032 layer files, plus 512 optimizer files.
    assert_eq!(file_count(&g), 1544);
    assert!(g.can_be_read());
}

#[test]
fn llama3_1t_world_1024() {
    // L=128, H=25872, F=98304, 192 heads (head 25872/192 floors to 134), 32 kv → dkv 4288;
    // TP 8, PP 64 (2 layers per stage), ZeRO 1, DP 2.
    // layer ÷ 8: 25872 + 25872·34448/8 + 25872²/8 + 25872 + 25872·196608/8 + 25872·98304/8
    //   = 1,148,872,032 el = 2,297,744,064 B; embedding 414,779,904 el = 829,559,808 B;
    //   norm 25,872 el = 51,744 B.
    // P = 1,183,035,102,480; n = P/1024 = 1,155,307,717 (floored);
    //   optimizer = (3n + 15·25872)·4 = 13,865,244,924.
    let layer = 2_297_744_064;
    let optim = 13_865_244_924;
    let g = geometry(&["workload=llama3_1t"], 1024);
    assert_eq!((g.model_parallelism(), g.data_parallelism()), (512, 2));
    assert_eq!(g.num_parameters(), 1_183_035_102_480);
    assert_eq!(
        files(&g, 0),
        owned(&[
            ("layer_0-model_0_model_states.pt", 829_559_808),
            ("layer_1-model_0_model_states.pt", layer),
            ("layer_2-model_0_model_states.pt", layer),
            ("zero_pp_rank_0_mp_rank_0_optim_states.pt", optim),
        ])
    );
    // Rank 504: stage 63 owns 127, 128, lm_head 129 and norm 130.
    assert_eq!(
        files(&g, 504),
        owned(&[
            ("layer_127-model_504_model_states.pt", layer),
            ("layer_128-model_504_model_states.pt", layer),
            ("layer_129-model_504_model_states.pt", 829_559_808),
            ("layer_130-model_504_model_states.pt", 51_744),
            ("zero_pp_rank_0_mp_rank_504_optim_states.pt", optim),
        ])
    );
    assert_eq!(g.rank_bytes(504), 19_290_344_604);
    assert_eq!(
        files(&g, 1023),
        owned(&[("zero_pp_rank_1_mp_rank_511_optim_states.pt", optim)])
    );
    // 8·(128·2,297,744,064 + 2·829,559,808 + 51,744) + 1024·13,865,244,924
    //   = 2,366,163,292,416 + 14,198,010,802,176 (15,426.59 GiB).
    assert_eq!(g.total_bytes(), 16_564_174_094_592);
    assert_eq!(g.dlio_reported_bytes(), 16_564_174_094_592);
    // 512 dp-0 ranks: 2 layers each, +1 on stage 0, +2 on stage 63; 1024 optimizer files.
    assert_eq!(file_count(&g), 512 * 2 + 8 + 16 + 1024);
}

#[test]
fn subset_mode_takes_the_data_parallelism_from_the_config() {
    let subset = |workload: &'static str, data: &'static str| {
        let data = format!("++workload.model.parallelism.data={data}");
        let words = [workload, "++workload.checkpoint.mode=subset", data.as_str()];
        geometry(&words, 8)
    };
    // 405b, 8 ranks of 2·256: all on stage 0, dp 0, with the optimizer of DP 2;
    // 8·13,226,441,600 = 105,811,532,800 (98.54 GiB).
    let g = subset("workload=llama3_405b", "2");
    assert_eq!((g.model_parallelism(), g.data_parallelism()), (256, 2));
    assert_eq!(g.files(7)[0].name, "layer_0-model_7_model_states.pt");
    assert_eq!(g.rank_bytes(7), 13_226_441_600);
    assert_eq!(g.total_bytes(), 105_811_532_800);
    assert_eq!(g.dlio_reported_bytes(), 105_811_532_800);
    // 1t, 8 ranks of 2·512: 8·(829,559,808 + 2·2,297,744,064 + 13,865,244,924).
    let g = subset("workload=llama3_1t", "2");
    assert_eq!(g.rank_bytes(0), 19_290_292_860);
    assert_eq!(g.total_bytes(), 154_322_342_880);
    // 70b, 8 ranks (one TP group) of 8·8, ZeRO 3 sharded ÷ 8 as in the full run:
    // 8·(2,184,120,320 + 13,103,482,368) = 122,300,821,504.
    let g = subset("workload=llama3_70b", "8");
    assert_eq!(
        files(&g, 7),
        owned(&[
            ("zero_pp_rank_0_mp_rank_7_model_states.pt", 2_184_120_320),
            ("zero_pp_rank_0_mp_rank_7_optim_states.pt", 13_103_482_368),
        ])
    );
    assert_eq!(g.total_bytes(), 122_300_821_504);
}

#[test]
fn zero_0_with_pipeline_is_written_but_cannot_be_read() {
    // 405b at ZeRO 0: ranks < MP = 256 write zero_pp_rank_0 files holding their stage's
    // layers; n = P/256 = 1,585,364,800 → optimizer (3n + 245,760)·4 = 19,025,360,640.
    let g = geometry(
        &[
            "workload=llama3_405b",
            "++workload.model.parallelism.zero_stage=0",
        ],
        512,
    );
    // Stage 0: 525,336,576 + 4·796,983,296.
    assert_eq!(
        files(&g, 0),
        owned(&[
            ("zero_pp_rank_0_mp_rank_0_model_states.pt", 3_713_269_760),
            ("zero_pp_rank_0_mp_rank_0_optim_states.pt", 19_025_360_640),
        ])
    );
    assert!(g.files(256).is_empty() && !g.takes_part(256));
    assert_eq!(g.total_bytes(), 5_682_257_133_568);
    assert!(!g.can_be_read());
    let message = g.check_readable().unwrap_err().to_string();
    assert!(
        message.contains("workload.model.parallelism.zero_stage = 0")
            && message.contains("workload.model.parallelism.pipeline = 32")
            && message.contains("workload.checkpoint.num_checkpoints_read"),
        "{message}"
    );
    // Without layers there is no model file to assert on: a blob model reads back.
    let g = geometry(
        &[
            "workload=default",
            "++workload.model.type=cnn",
            "++workload.model.parallelism.pipeline=2",
        ],
        4,
    );
    assert!(g.can_be_read());
    // Ranks 0 and 1 (< MP 2) write the default 10,240-byte blob.
    assert_eq!(files(&g, 1), owned(&[("model_states-1.pt", 10_240)]));
    assert_eq!(g.total_bytes(), 20_480);
    assert_eq!(g.dlio_reported_bytes(), 10_240);
}

#[test]
fn non_transformer_model_is_one_blob_per_taking_part_rank() {
    // unet3d-like: model_size_bytes as int8, no layers, no optimizer; ZeRO 0 → rank 0 only.
    let words = [
        "workload=default",
        "++workload.model.type=cnn",
        "++workload.model.model_size_bytes=499153191",
    ];
    let g = geometry(&words, 8);
    assert_eq!(g.num_parameters(), 0);
    assert_eq!(files(&g, 0), owned(&[("model_states-0.pt", 499_153_191)]));
    assert_eq!(g.files(0)[0].kind, ShardKind::Model);
    assert!(g.files(1).is_empty());
    assert_eq!(g.total_bytes(), 499_153_191);
    // ZeRO 1: all 8 ranks write it (8·499,153,191), DLIO reports it once.
    let mut words = words.to_vec();
    words.push("++workload.model.parallelism.zero_stage=1");
    let g = geometry(&words, 8);
    assert_eq!(files(&g, 7), owned(&[("model_states-7.pt", 499_153_191)]));
    assert_eq!(g.total_bytes(), 3_993_225_528);
    assert_eq!(g.dlio_reported_bytes(), 499_153_191);
    // A transformer without layers writes nothing.
    let g = geometry(
        &["workload=default", "++workload.model.type=transformer"],
        2,
    );
    assert_eq!((g.total_bytes(), g.dlio_reported_bytes()), (0, 0));
}

#[test]
fn legacy_predefined_lists_are_int8_and_not_reported() {
    // megatron_deepspeed_LLNL: 40 layers, TP 4, PP 8, ZeRO 1, no type (a 10,240-byte blob
    // per rank; DLIO ignores the workload's model_size key, so the default is set here).
    let g = geometry(
        &[
            "workload=megatron_deepspeed",
            "++workload.model.model_size_bytes=10240",
            "++workload.model.num_layers=40",
            "++workload.model.layer_parameters=[52583936,209715200]",
            "++workload.model.parallelism.tensor=4",
            "++workload.model.parallelism.pipeline=8",
            "++workload.model.parallelism.zero_stage=1",
        ],
        32,
    );
    // Each layer file: 52,583,936/4 + 209,715,200/4 = 65,574,784 B (int8). The legacy
    // range has no embedding: stage 0 owns layers 1-5 (40 ÷ 8).
    // Optimizer: 3·(1,009,254,400 + 865,075,200 + 793,600) = 5,625,369,600 B.
    let mut rank0 = vec![("model_states-0.pt".to_string(), 10_240)];
    for i in 1..=5 {
        rank0.push((format!("layer_{i}-model_0_model_states.pt"), 65_574_784));
    }
    rank0.push((
        "zero_pp_rank_0_mp_rank_0_optim_states.pt".into(),
        5_625_369_600,
    ));
    assert_eq!(files(&g, 0), rank0);
    assert_eq!(g.files(31)[1].name, "layer_36-model_31_model_states.pt");
    // 32·(10,240 + 5·65,574,784 + 5,625,369,600) = 32·5,953,253,760 (177.42 GiB).
    assert_eq!(g.total_bytes(), 190_504_120_320);
    // DLIO reports the blob only.
    assert_eq!(g.dlio_reported_bytes(), 10_240);

    // The shipped workload (44 layers, no parallelism, ZeRO 0) on one rank: the one model
    // file holds the shared dict once: 129,761,280 + 20,971,520 = 150,732,800.
    let g = geometry(
        &[
            "workload=megatron_deepspeed",
            "++workload.model.model_size_bytes=10240",
        ],
        1,
    );
    assert_eq!(
        files(&g, 0),
        owned(&[
            ("model_states-0.pt", 10_240),
            ("zero_pp_rank_0_mp_rank_0_model_states.pt", 150_732_800),
            ("zero_pp_rank_0_mp_rank_0_optim_states.pt", 5_625_369_600),
        ])
    );
    assert_eq!(g.total_bytes(), 5_776_112_640);
    assert_eq!(g.dlio_reported_bytes(), 10_240);
}

#[test]
fn a_layer_without_elements_is_written_empty_and_cannot_be_read() {
    // H = V = 1 with TP 2: the embedding and lm_head have 1·1/2 = 0 elements; a layer has
    // 1 + 1·3/2 + 1/2 + 1 + 2/2 + 1/2 = 4 el = 8 B (fp16), the norm 1 el = 2 B.
    // P = 2 + 2·(1+3+1+1+2+1) + 1 = 21; n = 21/(1·4) = 5; optimizer (15 + 15)·4 = 120.
    let g = geometry(
        &[
            "workload=default",
            "++workload.model.type=transformer",
            "++workload.model.num_layers=2",
            "++workload.model.transformer.hidden_size=1",
            "++workload.model.transformer.vocab_size=1",
            "++workload.model.transformer.ffn_hidden_size=1",
            "++workload.model.transformer.num_attention_heads=1",
            "++workload.model.transformer.num_kv_heads=1",
            "++workload.model.parallelism.tensor=2",
            "++workload.model.parallelism.pipeline=2",
            "++workload.model.parallelism.zero_stage=1",
        ],
        4,
    );
    assert_eq!(
        files(&g, 0),
        owned(&[
            ("layer_0-model_0_model_states.pt", 0),
            ("layer_1-model_0_model_states.pt", 8),
            ("zero_pp_rank_0_mp_rank_0_optim_states.pt", 120),
        ])
    );
    assert_eq!(
        files(&g, 3),
        owned(&[
            ("layer_2-model_3_model_states.pt", 8),
            ("layer_3-model_3_model_states.pt", 0),
            ("layer_4-model_3_model_states.pt", 2),
            ("zero_pp_rank_0_mp_rank_3_optim_states.pt", 120),
        ])
    );
    assert_eq!(g.total_bytes(), 516);
    let message = g.check_readable().unwrap_err().to_string();
    assert!(
        message.contains("layer 0") && message.contains("workload.model.parallelism.tensor"),
        "{message}"
    );
}

#[test]
fn tensorflow_files_end_in_pb() {
    let g = geometry(
        &["workload=llama3_8b", "++workload.framework=tensorflow"],
        8,
    );
    assert_eq!(
        g.files(2)[1].name,
        "zero_pp_rank_2_mp_rank_0_optim_states.pb"
    );
}

#[test]
fn folder_name_is_dlios() {
    assert_eq!(Geometry::folder_name(1, 10), "global_epoch1_step10");
}

#[test]
fn validation_errors_name_the_keys_in_dlios_order() {
    let cases: &[(&[&str], u64, &[&str])] = &[
        // num_layers < pipeline comes first, though ZeRO 3 with a pipeline is invalid too.
        (
            &[
                "workload=llama3_8b",
                "++workload.model.parallelism.pipeline=64",
            ],
            64,
            &[
                "workload.model.num_layers = 32",
                "workload.model.parallelism.pipeline = 64",
            ],
        ),
        (
            &[
                "workload=llama3_8b",
                "++workload.model.parallelism.pipeline=2",
            ],
            8,
            &[
                "workload.model.parallelism.zero_stage = 3",
                "workload.model.parallelism.pipeline = 2",
            ],
        ),
        (
            &["workload=llama3_8b", "++workload.model.parallelism.data=8"],
            8,
            &[
                "workload.model.parallelism.data = 8",
                "workload.checkpoint.mode = subset",
            ],
        ),
        (
            &["workload=llama3_8b", "++workload.checkpoint.mode=subset"],
            8,
            &[
                "workload.checkpoint.mode = subset",
                "workload.model.parallelism.data",
            ],
        ),
        // 2·8·32 = 512 < 513 ranks.
        (
            &[
                "workload=llama3_405b",
                "++workload.checkpoint.mode=subset",
                "++workload.model.parallelism.data=2",
            ],
            513,
            &[
                "workload.checkpoint.mode = subset with 513 ranks",
                "workload.model.parallelism.data × tensor × pipeline = 2 × 8 × 32 = 512",
            ],
        ),
        (
            &["workload=llama3_70b"],
            12,
            &[
                "12 ranks",
                "workload.model.parallelism.tensor × workload.model.parallelism.pipeline \
                 = 8 × 1 = 8",
            ],
        ),
        (
            &[
                "workload=llama3_8b",
                "++workload.checkpoint.num_checkpoints_read=11",
            ],
            8,
            &[
                "workload.checkpoint.num_checkpoints_read = 11",
                "workload.checkpoint.num_checkpoints_write = 10",
            ],
        ),
        (
            &[
                "workload=llama3_8b",
                "++workload.model.transformer.hidden_size=4611686018427387904",
            ],
            8,
            &["workload.model.transformer", "64 bits"],
        ),
    ];
    for (words, world, parts) in cases {
        let err = Geometry::new(&config(words), *world).unwrap_err();
        assert_eq!(err.exit_code(), 2, "{words:?}");
        let message = err.to_string();
        for part in *parts {
            assert!(message.contains(part), "{words:?}: {message}");
        }
    }
    // Subset mode with exactly enough ranks (2·8·32 = 512) is fine.
    let words = [
        "workload=llama3_405b",
        "++workload.checkpoint.mode=subset",
        "++workload.model.parallelism.data=2",
    ];
    assert!(Geometry::new(&config(&words), 512).is_ok());
}
