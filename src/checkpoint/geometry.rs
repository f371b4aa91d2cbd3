//! DLIO's checkpoint geometry: for a model, its parallelism and a world of ranks, which files each
//! rank writes per checkpoint and how many payload bytes each holds, exactly as DLIO's PyTorch
//! checkpointing computes them (`dlio_benchmark/checkpointing/base_checkpointing.py`).
//!
//! The model, as DLIO sees it:
//! - Ranks: tensor parallelism (TP) varies fastest, then pipeline (PP), then data (DP). The model
//!   parallelism MP = TP × PP; DP = world ÷ MP, or `model.parallelism.data` in subset mode.
//! - A transformer has layers 0 (embedding), 1..=L (transformer layers), L+1 (lm_head) and L+2
//!   (final norm). Pipeline stages split layers 1..=L, the first stages taking one more when L is
//!   not a multiple of PP; stage 0 also owns the embedding and the last stage lm_head and norm.
//! - Tensors are 1-D, of `model_datatype`, split over TP (except the norms) and, under ZeRO 3,
//!   over DP; every division floors, and tensors of no elements are left out.
//! - The optimizer state is six tensors of `optimizer_datatype`: [n, 5H, n, 5H, n, 5H], with
//!   n = parameters ÷ MP (ZeRO 0) or ÷ (DP × MP) (ZeRO 1-3).
//! - Under ZeRO 0 only ranks < MP take part. Under ZeRO 1 and 2 data-parallel rank 0 writes the
//!   model, layer by layer when PP > 1; under ZeRO 0 and 3 each taking part rank writes its own
//!   model file. Every taking part rank with an optimizer state writes it.
//! - A model that is not a transformer (`model.type` other than `transformer`) adds an int8
//!   `model_states-{rank}` blob of `model.model_size_bytes` on every taking part rank.
//! - DLIO's legacy `model.layer_parameters` / `model.optimization_groups` (megatron_deepspeed)
//!   replace the transformer's layer and optimizer tensors with int8 ones of the listed sizes.
//!
//! Sizes are payload bytes (elements × bytes per element); `torch.save` adds about 1.5 KiB per
//! file plus about 0.3 KiB per tensor of its own, which is not counted here. File names are
//! DLIO's `{suffix}.{ext}`; its TensorFlow checkpointing (`.pb`) lets `tf.train.Checkpoint` add
//! suffixes of its own, which are not modelled.

use crate::config::{CheckpointMode, Config, Framework};
use crate::error::{Error, Result};

/// What a checkpoint file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardKind {
    /// Model state: layer tensors, or a non-transformer's `model_states` blob.
    Model,
    /// Optimizer state.
    Optimizer,
}

/// One file a rank writes per checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardFile {
    /// The file's name inside the checkpoint's folder ([`Geometry::folder_name`]), with DLIO's
    /// extension (`.pt` for PyTorch, `.pb` for TensorFlow).
    pub name: String,
    /// Payload bytes: the elements of its tensors times their sizes. DLIO writes a file even when
    /// all its tensors are empty (0 bytes).
    pub bytes: u64,
    pub kind: ShardKind,
}

/// A state dict's keys (its tensors: empty ones are left out, except the legacy lists', which
/// keep a key for a size that divides to 0 elements) and their payload bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Tensors {
    entries: u64,
    bytes: u64,
}

impl Tensors {
    /// Tensors of these element counts and element size, leaving out the empty ones as DLIO's
    /// `get_layer_state` does; None if the bytes overflow.
    fn of(elements: &[u64], element_bytes: u64) -> Option<Tensors> {
        let total = elements.iter().try_fold(0u64, |a, &e| a.checked_add(e))?;
        Some(Tensors {
            entries: elements.iter().filter(|&&e| e > 0).count() as u64,
            bytes: total.checked_mul(element_bytes)?,
        })
    }
}

/// The layer state one rank holds per layer (after its tensor and ZeRO-3 sharding).
#[derive(Debug, Clone, Copy)]
enum Layers {
    /// No layer state: neither transformer layers nor a predefined list.
    Absent,
    /// DLIO's transformer: layer 0 and L+1 are `embedding`-sized, 1..=L `layer`, L+2 the norm.
    Transformer {
        num_layers: u64,
        embedding: Tensors,
        layer: Tensors,
        final_norm: Tensors,
    },
    /// Legacy `model.layer_parameters`: every owned layer is the same int8 dict, which
    /// `torch.save` stores once when several layers share a file.
    Predefined { num_layers: u64, shared: Tensors },
}

/// The optimizer state of every taking part rank (the same on all of them).
#[derive(Debug, Clone, Copy)]
struct Optimizer {
    bytes: u64,
    /// Whether DLIO counts it in its reported `checkpoint_size` (not the legacy groups).
    reported: bool,
}

/// Where a rank sits in DLIO's rank arithmetic.
#[derive(Debug, Clone, Copy)]
struct Position {
    stage: u64,
    data_rank: u64,
    model_rank: u64,
}

/// How a rank writes its layer state.
enum ModelFiles {
    None,
    /// ZeRO 1/2 with PP > 1, data-parallel rank 0: `layer_{i}-model_{mp}_model_states` per layer.
    PerLayer {
        first: u64,
        last: u64,
    },
    /// All owned layers in one dict, under one of two names.
    Whole {
        first: u64,
        last: u64,
        name: WholeName,
    },
}

enum WholeName {
    /// ZeRO 1/2 with PP == 1: `model_{mp}_model_states`.
    ModelRank,
    /// ZeRO 0/3: `zero_pp_rank_{dp}_mp_rank_{mp}_model_states`.
    ZeroRank,
}

/// DLIO's checkpoint layout for one configuration and world: cheap to clone (plain numbers); each
/// rank's file list is computed when asked for.
#[derive(Debug, Clone)]
pub struct Geometry {
    world: u64,
    tensor: u64,
    pipeline: u64,
    data: u64,
    zero_stage: u64,
    extension: &'static str,
    num_parameters: u64,
    /// Bytes of a non-transformer's `model_states-{rank}` blob, when it has one.
    model_states: Option<u64>,
    layers: Layers,
    optimizer: Option<Optimizer>,
    total_bytes: u64,
    reported_model_bytes: u64,
    reported_optimizer_bytes: u64,
}

impl Geometry {
    /// The geometry of `config`'s checkpoint in a world of `world` ranks, after DLIO's checks of
    /// the parallelism (config.py `validate()`, in its order).
    ///
    /// # Panics
    /// If `world` is 0.
    pub fn new(config: &Config, world: u64) -> Result<Geometry> {
        assert!(world >= 1, "a world has at least one rank");
        validate(config, world)?;
        let model = &config.model;
        let par = &model.parallelism;
        let (tensor, pipeline, zero_stage) = (par.tensor, par.pipeline, par.zero_stage);
        let model_parallelism = tensor.checked_mul(pipeline).ok_or_else(|| {
            overflow("workload.model.parallelism.tensor × workload.model.parallelism.pipeline")
        })?;
        let data = par.data.unwrap_or(world / model_parallelism);
        let num_layers = model.num_layers;
        let shape = &model.transformer;
        let h = shape.hidden_size;
        let model_keys = "workload.model.transformer and workload.model.num_layers";

        // get_num_parameters: embedding, per layer (input norm, qkv, o, post-attention norm,
        // gated h→4h, 4h→h), final norm, untied lm_head; 0 without layers.
        let mut products = None;
        let mut num_parameters = 0;
        if num_layers > 0 {
            let p = (|| {
                // Floor division: llama3_1t's 25872 / 192 heads is 134.
                let dim_kv = (h / shape.num_attention_heads).checked_mul(shape.num_kv_heads)?;
                let embedding = h.checked_mul(shape.vocab_size)?;
                let qkv = h.checked_mul(dim_kv.checked_mul(2)?.checked_add(h)?)?;
                let dense = h.checked_mul(h)?;
                let up = h.checked_mul(shape.ffn_hidden_size.checked_mul(2)?)?;
                let down = h.checked_mul(shape.ffn_hidden_size)?;
                let per_layer = [h, qkv, dense, h, up, down]
                    .iter()
                    .try_fold(0u64, |a, &b| a.checked_add(b))?;
                let params = num_layers
                    .checked_mul(per_layer)?
                    .checked_add(embedding.checked_mul(2)?)?
                    .checked_add(h)?;
                Some(([embedding, qkv, dense, up, down], params))
            })()
            .ok_or_else(|| overflow(model_keys))?;
            products = Some(p.0);
            num_parameters = p.1;
        }

        let layers = if !model.layer_parameters.is_empty() {
            // DLIO keeps each listed size above 0 as an int8 tensor of size ÷ TP, which may have
            // no elements but is still a key of the dict.
            let kept: Vec<u64> = model
                .layer_parameters
                .iter()
                .filter(|&&p| p > 0)
                .map(|&p| p / tensor)
                .collect();
            let bytes = kept
                .iter()
                .try_fold(0u64, |a, &e| a.checked_add(e))
                .ok_or_else(|| overflow("workload.model.layer_parameters"))?;
            Layers::Predefined {
                num_layers,
                shared: Tensors {
                    entries: kept.len() as u64,
                    bytes,
                },
            }
        } else if let Some([embedding, qkv, dense, up, down]) = products {
            // ZeRO 3 shards every tensor over the data-parallel ranks too.
            let sharding = if zero_stage < 3 { 1 } else { data };
            let split = |elements: u64| elements / tensor / sharding;
            let norm = h / sharding;
            let dtype = model.model_datatype.bytes();
            let tensors =
                |elements: &[u64]| Tensors::of(elements, dtype).ok_or_else(|| overflow(model_keys));
            Layers::Transformer {
                num_layers,
                embedding: tensors(&[split(embedding)])?,
                layer: tensors(&[norm, split(qkv), split(dense), norm, split(up), split(down)])?,
                final_norm: tensors(&[norm])?,
            }
        } else {
            Layers::Absent
        };

        let optimizer = if !model.optimization_groups.is_empty() {
            // Legacy: per group int8 tensors "a" and "b", then one "combined" of their sum.
            let sum = model
                .optimization_groups
                .iter()
                .try_fold(0u64, |a, &g| a.checked_add(g));
            let bytes = sum
                .and_then(|s| s.checked_mul(3))
                .ok_or_else(|| overflow("workload.model.optimization_groups"))?;
            Some(Optimizer {
                bytes,
                reported: false,
            })
        } else {
            // n = parameters ÷ MP (ZeRO 0, one copy) or ÷ (DP × MP), floored; no state if n = 0.
            let sharers = if zero_stage > 0 {
                u128::from(data) * u128::from(model_parallelism)
            } else {
                u128::from(model_parallelism)
            };
            let n = (u128::from(num_parameters) / sharers) as u64;
            if n > 0 {
                let bytes = n
                    .checked_mul(3)
                    .and_then(|e| e.checked_add(h.checked_mul(15)?))
                    .and_then(|e| e.checked_mul(model.optimizer_datatype.bytes()))
                    .ok_or_else(|| overflow(model_keys))?;
                Some(Optimizer {
                    bytes,
                    reported: true,
                })
            } else {
                None
            }
        };

        let model_states = (model.model_size_bytes > 0 && !model.is_transformer())
            .then_some(model.model_size_bytes);
        let mut geometry = Geometry {
            world,
            tensor,
            pipeline,
            data,
            zero_stage,
            extension: match config.framework {
                Framework::Pytorch => "pt",
                Framework::Tensorflow => "pb",
            },
            num_parameters,
            model_states,
            layers,
            optimizer,
            total_bytes: 0,
            reported_model_bytes: 0,
            reported_optimizer_bytes: 0,
        };
        geometry.sum_ranks()?;
        Ok(geometry)
    }

    /// Fills in the totals over all ranks, first checking that no rank's byte count can overflow,
    /// so that the per-rank arithmetic needs no checks.
    fn sum_ranks(&mut self) -> Result<()> {
        let too_big = || {
            overflow(&format!(
                "workload.model (its sizes and parallelism, over {} ranks)",
                self.world
            ))
        };
        // Every rank holds at most the whole (sharded) model, or the shared legacy dict once per
        // layer, besides its optimizer state and blob.
        let model_bound = match self.layers {
            Layers::Absent => Some(0),
            Layers::Transformer {
                num_layers,
                embedding,
                layer,
                final_norm,
            } => num_layers
                .checked_mul(layer.bytes)
                .and_then(|b| b.checked_add(embedding.bytes.checked_mul(2)?))
                .and_then(|b| b.checked_add(final_norm.bytes)),
            Layers::Predefined { num_layers, shared } => {
                shared.bytes.checked_mul(num_layers.max(1))
            }
        };
        model_bound
            .and_then(|b| b.checked_add(self.model_states.unwrap_or(0)))
            .and_then(|b| b.checked_add(self.optimizer.map_or(0, |o| o.bytes)))
            .ok_or_else(too_big)?;

        let mut total = 0u64;
        let mut allocated_model = 0u64;
        for rank in 0..self.world {
            total = total
                .checked_add(self.rank_bytes(rank))
                .ok_or_else(too_big)?;
            allocated_model = allocated_model
                .checked_add(self.allocated_model_bytes(rank))
                .ok_or_else(too_big)?;
        }
        self.total_bytes = total;
        // A non-transformer's blob replaces the model part, counted once however many ranks
        // write it.
        self.reported_model_bytes = self.model_states.unwrap_or(allocated_model);
        self.reported_optimizer_bytes = match self.optimizer {
            Some(o) if o.reported => o
                .bytes
                .checked_mul(self.taking_part())
                .ok_or_else(too_big)?,
            _ => 0,
        };
        self.reported_model_bytes
            .checked_add(self.reported_optimizer_bytes)
            .ok_or_else(too_big)?;
        Ok(())
    }

    /// The checkpoint's folder, inside the checkpoint folder: `global_epoch{E}_step{S}`.
    pub fn folder_name(epoch: u64, step: u64) -> String {
        format!("global_epoch{epoch}_step{step}")
    }

    pub fn world(&self) -> u64 {
        self.world
    }

    pub fn tensor_parallelism(&self) -> u64 {
        self.tensor
    }

    pub fn pipeline_parallelism(&self) -> u64 {
        self.pipeline
    }

    /// TP × PP: the ranks of one model replica, numbered by `mp_rank` in the file names.
    pub fn model_parallelism(&self) -> u64 {
        self.tensor * self.pipeline
    }

    /// world ÷ (TP × PP), or `model.parallelism.data` in subset mode.
    pub fn data_parallelism(&self) -> u64 {
        self.data
    }

    pub fn zero_stage(&self) -> u64 {
        self.zero_stage
    }

    /// The parameter count DLIO logs ("Total number of parameters in the model"); 0 without
    /// transformer layers.
    pub fn num_parameters(&self) -> u64 {
        self.num_parameters
    }

    /// Whether `rank` writes (and reads) anything: under ZeRO 0 only ranks < TP × PP do.
    pub fn takes_part(&self, rank: u64) -> bool {
        self.zero_stage != 0 || rank < self.model_parallelism()
    }

    /// The files `rank` writes per checkpoint, in DLIO's order (the `model_states` blob, the
    /// layer files by increasing layer, the optimizer state); it reads the same files back.
    /// Empty when the rank takes no part.
    ///
    /// # Panics
    /// If `rank` is not below the world size.
    pub fn files(&self, rank: u64) -> Vec<ShardFile> {
        let pos = self.position(rank);
        let mut files = Vec::new();
        if !self.takes_part(rank) {
            return files;
        }
        let ext = self.extension;
        let (dp, mp) = (pos.data_rank, pos.model_rank);
        if let Some(bytes) = self.model_states {
            files.push(ShardFile {
                name: format!("model_states-{rank}.{ext}"),
                bytes,
                kind: ShardKind::Model,
            });
        }
        let model_files = self.model_files(pos);
        match model_files {
            ModelFiles::None => {}
            ModelFiles::PerLayer { first, last } => {
                for index in first..=last {
                    files.push(ShardFile {
                        name: format!("layer_{index}-model_{mp}_model_states.{ext}"),
                        bytes: self.layer_tensors(index).bytes,
                        kind: ShardKind::Model,
                    });
                }
            }
            ModelFiles::Whole { ref name, .. } => files.push(ShardFile {
                name: match name {
                    WholeName::ModelRank => format!("model_{mp}_model_states.{ext}"),
                    WholeName::ZeroRank => {
                        format!("zero_pp_rank_{dp}_mp_rank_{mp}_model_states.{ext}")
                    }
                },
                bytes: self.model_file_bytes(&model_files),
                kind: ShardKind::Model,
            }),
        }
        if let Some(optimizer) = self.optimizer {
            files.push(ShardFile {
                name: format!("zero_pp_rank_{dp}_mp_rank_{mp}_optim_states.{ext}"),
                bytes: optimizer.bytes,
                kind: ShardKind::Optimizer,
            });
        }
        files
    }

    /// The payload bytes `rank` writes per checkpoint: the sum over [`Geometry::files`].
    ///
    /// # Panics
    /// If `rank` is not below the world size.
    pub fn rank_bytes(&self, rank: u64) -> u64 {
        let pos = self.position(rank);
        if !self.takes_part(rank) {
            return 0;
        }
        self.model_states.unwrap_or(0)
            + self.model_file_bytes(&self.model_files(pos))
            + self.optimizer.map_or(0, |o| o.bytes)
    }

    /// The payload bytes all ranks write per checkpoint.
    pub fn total_bytes(&self) -> u64 {
        self.total_bytes
    }

    /// DLIO's reported `checkpoint_size` in bytes (summary.json `checkpoint_size_GB` × 2^30, and
    /// the numerator of its checkpoint throughputs): what the ranks *allocate*, which differs
    /// from [`Geometry::total_bytes`], the bytes written, in three ways:
    /// - ZeRO 2 counts the model layers on every data-parallel rank, though only rank 0 of each
    ///   writes them (llama3_8b at ZeRO 2: 209.41 GiB reported for 104.70 GiB written);
    /// - the legacy `layer_parameters` / `optimization_groups` tensors are not counted;
    /// - a non-transformer's `model_states` blob is counted once, however many ranks write it
    ///   (and replaces the layers' bytes if the model has layers too).
    pub fn dlio_reported_bytes(&self) -> u64 {
        self.reported_model_bytes + self.reported_optimizer_bytes
    }

    /// The model part of [`Geometry::dlio_reported_bytes`] (DLIO's "Model size" line).
    pub fn dlio_reported_model_bytes(&self) -> u64 {
        self.reported_model_bytes
    }

    /// The optimizer part of [`Geometry::dlio_reported_bytes`] (DLIO's "Optimizer state size").
    pub fn dlio_reported_optimizer_bytes(&self) -> u64 {
        self.reported_optimizer_bytes
    }

    /// Whether DLIO could read this checkpoint back; see [`Geometry::check_readable`].
    pub fn can_be_read(&self) -> bool {
        self.check_readable().is_ok()
    }

    /// An error naming the configuration keys when DLIO can write this checkpoint but not read
    /// it back: its `load_checkpoint` asserts `pipeline == 1` for ZeRO 0 and 3 model files, and
    /// `load_state` asserts that a file's dict is not empty, which a per-layer file of a layer
    /// with no elements is.
    pub fn check_readable(&self) -> Result<()> {
        let has_layers = self.layer_range(0).is_some();
        let per_layer = (1..3).contains(&self.zero_stage) && self.pipeline > 1;
        if has_layers && !(1..3).contains(&self.zero_stage) && self.pipeline > 1 {
            return Err(Error::usage(format!(
                "workload.model.parallelism.zero_stage = {} with workload.model.parallelism.pipeline \
                 = {}: DLIO writes this checkpoint but cannot read it back (its load asserts \
                 pipeline 1 for ZeRO stages 0 and 3); set workload.checkpoint.num_checkpoints_read \
                 = 0, or use zero_stage 1 or 2, or pipeline 1",
                self.zero_stage, self.pipeline
            )));
        }
        if !has_layers || !per_layer {
            return Ok(());
        }
        // Middle stages hold only transformer layers, which stage 0 holds too; the last stage's
        // data-parallel rank 0 (TP × (PP-1)) may be outside a subset world.
        let mut stages = vec![0];
        if self.tensor * (self.pipeline - 1) < self.world {
            stages.push(self.pipeline - 1);
        }
        for stage in stages {
            let Some((first, last)) = self.layer_range(stage) else {
                continue;
            };
            if let Some(index) = (first..=last).find(|&i| self.layer_tensors(i).entries == 0) {
                return Err(Error::usage(format!(
                    "layer {index} has no elements on a rank (workload.model.transformer sizes \
                     or workload.model.layer_parameters divided by workload.model.parallelism.tensor \
                     = {}): DLIO writes its file layer_{index}-model_*_model_states as an empty dict \
                     and cannot read it back; set workload.checkpoint.num_checkpoints_read = 0, or \
                     make the model larger",
                    self.tensor
                )));
            }
        }
        Ok(())
    }

    /// The number of ranks that take part.
    fn taking_part(&self) -> u64 {
        if self.zero_stage == 0 {
            self.world.min(self.model_parallelism())
        } else {
            self.world
        }
    }

    fn position(&self, rank: u64) -> Position {
        assert!(
            rank < self.world,
            "rank {rank} outside a world of {}",
            self.world
        );
        let model_parallelism = self.model_parallelism();
        Position {
            stage: (rank / self.tensor) % self.pipeline,
            data_rank: rank / model_parallelism,
            model_rank: rank % model_parallelism,
        }
    }

    /// DLIO's `get_layer_index`: the layers pipeline stage `stage` owns, first..=last, or None
    /// when it owns none (no layer state, or legacy lists without `num_layers`).
    fn layer_range(&self, stage: u64) -> Option<(u64, u64)> {
        let (num_layers, with_ends) = match self.layers {
            Layers::Absent => return None,
            Layers::Transformer { num_layers, .. } => (num_layers, true),
            // The legacy lists own transformer layers only.
            Layers::Predefined { num_layers, .. } => (num_layers, false),
        };
        // DLIO's -1 (and 0) give every stage an empty range; validate() ensured
        // num_layers >= pipeline otherwise, so each stage has at least one layer.
        if num_layers == 0 {
            return None;
        }
        let per_stage = num_layers / self.pipeline;
        let extra = num_layers % self.pipeline;
        let (mut first, mut last) = if stage < extra {
            let first = stage * (per_stage + 1) + 1;
            (first, first + per_stage)
        } else {
            let first = extra * (per_stage + 1) + (stage - extra) * per_stage + 1;
            (first, first + per_stage - 1)
        };
        if with_ends {
            if stage == self.pipeline - 1 {
                last = num_layers + 2;
            }
            if stage == 0 {
                first = 0;
            }
        }
        Some((first, last))
    }

    /// One layer's tensors on a rank that holds it.
    fn layer_tensors(&self, index: u64) -> Tensors {
        match self.layers {
            Layers::Absent => Tensors {
                entries: 0,
                bytes: 0,
            },
            Layers::Transformer {
                num_layers,
                embedding,
                layer,
                final_norm,
            } => {
                if index == 0 || index == num_layers + 1 {
                    embedding
                } else if index == num_layers + 2 {
                    final_norm
                } else {
                    layer
                }
            }
            Layers::Predefined { shared, .. } => shared,
        }
    }

    /// The payload of layers first..=last in one dict (each dict once).
    fn layers_bytes(&self, first: u64, last: u64) -> u64 {
        match self.layers {
            Layers::Absent => 0,
            // The shared legacy dict is stored once.
            Layers::Predefined { shared, .. } => shared.bytes,
            Layers::Transformer {
                num_layers,
                embedding,
                layer,
                final_norm,
            } => {
                let mut bytes = 0;
                if first == 0 {
                    bytes += embedding.bytes;
                }
                let (low, high) = (first.max(1), last.min(num_layers));
                if low <= high {
                    bytes += (high - low + 1) * layer.bytes;
                }
                if (first..=last).contains(&(num_layers + 1)) {
                    bytes += embedding.bytes;
                }
                if last >= num_layers + 2 {
                    bytes += final_norm.bytes;
                }
                bytes
            }
        }
    }

    /// DLIO's `save_checkpoint`: which layer files a taking part rank writes. A rank writes its
    /// layer state when it has one (ZeRO 1 allocates it on data-parallel rank 0 only) and it
    /// owns at least one layer.
    fn model_files(&self, pos: Position) -> ModelFiles {
        let Some((first, last)) = self.layer_range(pos.stage) else {
            return ModelFiles::None;
        };
        let allocated = match self.layers {
            Layers::Transformer { .. } => !(self.zero_stage == 1 && pos.data_rank != 0),
            Layers::Predefined { .. } | Layers::Absent => true,
        };
        if !allocated {
            ModelFiles::None
        } else if !(1..3).contains(&self.zero_stage) {
            ModelFiles::Whole {
                first,
                last,
                name: WholeName::ZeroRank,
            }
        } else if pos.data_rank != 0 {
            // ZeRO 2 allocates the layers on every data-parallel rank but only rank 0 writes.
            ModelFiles::None
        } else if self.pipeline > 1 {
            ModelFiles::PerLayer { first, last }
        } else {
            ModelFiles::Whole {
                first,
                last,
                name: WholeName::ModelRank,
            }
        }
    }

    fn model_file_bytes(&self, files: &ModelFiles) -> u64 {
        match *files {
            ModelFiles::None => 0,
            ModelFiles::PerLayer { first, last } => match self.layers {
                // Each layer file holds the whole shared dict.
                Layers::Predefined { shared, .. } => (last - first + 1) * shared.bytes,
                _ => self.layers_bytes(first, last),
            },
            ModelFiles::Whole { first, last, .. } => self.layers_bytes(first, last),
        }
    }

    /// The transformer layer bytes `rank` allocates, which DLIO's `checkpoint_size` sums (the
    /// legacy lists are not counted).
    fn allocated_model_bytes(&self, rank: u64) -> u64 {
        let pos = self.position(rank);
        let allocates = matches!(self.layers, Layers::Transformer { .. })
            && self.takes_part(rank)
            && !(self.zero_stage == 1 && pos.data_rank != 0);
        match self.layer_range(pos.stage) {
            Some((first, last)) if allocates => self.layers_bytes(first, last),
            _ => 0,
        }
    }
}

fn overflow(keys: &str) -> Error {
    Error::usage(format!(
        "{keys}: this checkpoint's byte counts do not fit in 64 bits; make the model smaller"
    ))
}

/// DLIO's `validate()` checks of the model's parallelism and the checkpoint counts, in its order.
fn validate(config: &Config, world: u64) -> Result<()> {
    let model = &config.model;
    let par = &model.parallelism;
    let (tensor, pipeline) = (par.tensor, par.pipeline);
    if model.num_layers > 0 && model.num_layers < pipeline {
        return Err(Error::usage(format!(
            "workload.model.num_layers = {} is less than workload.model.parallelism.pipeline = \
             {pipeline}: every pipeline stage needs at least one layer (num_layers >= pipeline)",
            model.num_layers
        )));
    }
    if pipeline > 1 && par.zero_stage == 3 {
        return Err(Error::usage(format!(
            "workload.model.parallelism.zero_stage = 3 is not compatible with \
             workload.model.parallelism.pipeline = {pipeline}: ZeRO stage 3 needs pipeline 1; \
             with pipeline parallelism use zero_stage 0, 1 or 2"
        )));
    }
    let subset = config.checkpoint.mode == CheckpointMode::Subset;
    if let (Some(data), false) = (par.data, subset) {
        return Err(Error::usage(format!(
            "workload.model.parallelism.data = {data} is valid only with workload.checkpoint.mode \
             = subset (here default): in default mode the data parallelism is the world size \
             ÷ (tensor × pipeline)"
        )));
    }
    // Products in 128 bits: each factor fits in 64.
    let model_parallelism = u128::from(tensor) * u128::from(pipeline);
    if subset {
        let Some(data) = par.data else {
            return Err(Error::usage(
                "workload.checkpoint.mode = subset needs workload.model.parallelism.data (not \
                 set): the target data parallelism, at least 1",
            ));
        };
        let full = u128::from(data) * model_parallelism;
        if full < u128::from(world) {
            return Err(Error::usage(format!(
                "workload.checkpoint.mode = subset with {world} ranks: \
                 workload.model.parallelism.data × tensor × pipeline = {data} × {tensor} × \
                 {pipeline} = {full} must be at least the number of ranks"
            )));
        }
    } else if u128::from(world) % model_parallelism != 0 {
        return Err(Error::usage(format!(
            "{world} ranks are not a multiple of workload.model.parallelism.tensor × \
             workload.model.parallelism.pipeline = {tensor} × {pipeline} = {model_parallelism}: \
             in workload.checkpoint.mode = default the ranks form whole model replicas, so run a \
             multiple of {model_parallelism} ranks (or use workload.checkpoint.mode = subset with \
             workload.model.parallelism.data)"
        )));
    }
    let checkpoint = &config.checkpoint;
    if checkpoint.num_write > 0 && checkpoint.num_read > checkpoint.num_write {
        return Err(Error::usage(format!(
            "workload.checkpoint.num_checkpoints_read = {} is more than \
             workload.checkpoint.num_checkpoints_write = {}: a run reads back only checkpoints it \
             wrote",
            checkpoint.num_read, checkpoint.num_write
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
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

    /// Every rank's bytes are the sum of its files, and the total the sum of the ranks.
    fn assert_consistent(geometry: &Geometry) {
        let mut total = 0;
        for rank in 0..geometry.world() {
            let files = geometry.files(rank);
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
}
