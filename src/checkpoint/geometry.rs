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
//! DLIO's `{suffix}.{ext}`; its TensorFlow checkpointing (`.pb`) saves each such shard as
//! `tf.train.Checkpoint` does, under names of its own ([`super::tf_bundle`]), from the shard's
//! state dict ([`Geometry::states`]).

use super::tf_bundle::{StateDict, Value, Variable};
use crate::config::{CheckpointMode, Config, Datatype, Framework};
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

/// The tensors of DLIO's state dicts, each `(its key, its elements)`: what a format that stores
/// every tensor apart (TensorFlow's) needs beyond the byte counts.
#[derive(Debug, Clone, Default)]
struct Shapes {
    model_dtype: Option<Datatype>,
    embedding: Vec<(usize, u64)>,
    layer: Vec<(usize, u64)>,
    final_norm: Vec<(usize, u64)>,
    /// Legacy `layer_parameters`: the one int8 dict every owned layer shares.
    predefined: Vec<(usize, u64)>,
    /// The optimizer's tensors: of `optimizer_datatype`, or the legacy int8 groups (then each
    /// `{"a", "b"}` of its size, and `combined`).
    optimizer: Vec<(usize, u64)>,
    optimizer_dtype: Option<Datatype>,
    legacy_groups: bool,
}

/// `(index, elements)` of the non-empty entries, as DLIO keys its dicts (`str(index)`).
fn kept(elements: &[u64]) -> Vec<(usize, u64)> {
    elements
        .iter()
        .copied()
        .enumerate()
        .filter(|&(_, e)| e > 0)
        .collect()
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
    shapes: Shapes,
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

        let mut shapes = Shapes::default();
        let layers = if !model.layer_parameters.is_empty() {
            // DLIO keeps each listed size above 0 as an int8 tensor of size ÷ TP, which may have
            // no elements but is still a key of the dict.
            let kept: Vec<u64> = model
                .layer_parameters
                .iter()
                .filter(|&&p| p > 0)
                .map(|&p| p / tensor)
                .collect();
            shapes.predefined = model
                .layer_parameters
                .iter()
                .enumerate()
                .filter(|&(_, &p)| p > 0)
                .map(|(i, &p)| (i, p / tensor))
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
            shapes.model_dtype = Some(model.model_datatype);
            shapes.embedding = kept(&[split(embedding)]);
            shapes.layer = kept(&[norm, split(qkv), split(dense), norm, split(up), split(down)]);
            shapes.final_norm = kept(&[norm]);
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
            shapes.optimizer = kept(&model.optimization_groups);
            shapes.legacy_groups = true;
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
                shapes.optimizer = kept(&[n, 5 * h, n, 5 * h, n, 5 * h]);
                shapes.optimizer_dtype = Some(model.optimizer_datatype);
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
            shapes,
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

    /// Whether the shards are TensorFlow's (`framework: tensorflow`): each saved as a bundle of
    /// its state dict ([`Geometry::states`]) rather than as one file.
    pub fn tensorflow(&self) -> bool {
        self.extension == "pb"
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

    /// The state dict of each of `rank`'s files, in [`Geometry::files`]' order, as DLIO builds
    /// it: `{"a": model_states}`; a layer's `{"0": input_norm, "1": qkv, …}` (its non-empty
    /// tensors, keyed by their place); several layers as `{"{layer}": layer dict}`; the
    /// optimizer's `{"0": …, "5": …}`, or the legacy groups' `{"{i}": {"a", "b"}, "combined"}`.
    /// Legacy layers all hold the same variables (one dict), which a bundle saves once.
    ///
    /// # Panics
    /// If `rank` is not below the world size.
    pub fn states(&self, rank: u64) -> Vec<StateDict> {
        let pos = self.position(rank);
        let mut states = Vec::new();
        if !self.takes_part(rank) {
            return states;
        }
        let mut ids = 0u64;
        let mut variable = |dtype: Datatype, elements: u64| {
            ids += 1;
            Value::Variable(Variable {
                id: ids,
                dtype,
                elements,
            })
        };
        let shapes = &self.shapes;
        let dict = |entries: &[(usize, u64)],
                    dtype: Datatype,
                    variable: &mut dyn FnMut(Datatype, u64) -> Value| {
            StateDict(
                entries
                    .iter()
                    .map(|&(i, e)| (i.to_string(), variable(dtype, e)))
                    .collect(),
            )
        };
        if let Some(bytes) = self.model_states {
            states.push(StateDict(vec![(
                "a".to_string(),
                variable(Datatype::Int8, bytes),
            )]));
        }
        // The legacy dict is made once: every layer shares its variables.
        let shared = dict(&shapes.predefined, Datatype::Int8, &mut variable);
        let layer = |index: u64, variable: &mut dyn FnMut(Datatype, u64) -> Value| match self.layers
        {
            Layers::Predefined { .. } => shared.clone(),
            Layers::Transformer { num_layers, .. } => {
                let dtype = shapes.model_dtype.unwrap_or(Datatype::Int8);
                let entries = if index == 0 || index == num_layers + 1 {
                    &shapes.embedding
                } else if index == num_layers + 2 {
                    &shapes.final_norm
                } else {
                    &shapes.layer
                };
                dict(entries, dtype, variable)
            }
            Layers::Absent => StateDict::default(),
        };
        match self.model_files(pos) {
            ModelFiles::None => {}
            ModelFiles::PerLayer { first, last } => {
                for index in first..=last {
                    states.push(layer(index, &mut variable));
                }
            }
            ModelFiles::Whole { first, last, .. } => states.push(StateDict(
                (first..=last)
                    .map(|index| (index.to_string(), Value::Dict(layer(index, &mut variable))))
                    .collect(),
            )),
        }
        if self.optimizer.is_some() {
            states.push(if shapes.legacy_groups {
                let mut entries: Vec<(String, Value)> = shapes
                    .optimizer
                    .iter()
                    .map(|&(i, e)| {
                        let pair = StateDict(vec![
                            ("a".to_string(), variable(Datatype::Int8, e)),
                            ("b".to_string(), variable(Datatype::Int8, e)),
                        ]);
                        (i.to_string(), Value::Dict(pair))
                    })
                    .collect();
                let combined = shapes.optimizer.iter().map(|&(_, e)| e).sum();
                entries.push(("combined".to_string(), variable(Datatype::Int8, combined)));
                StateDict(entries)
            } else {
                let dtype = shapes.optimizer_dtype.unwrap_or(Datatype::Int8);
                dict(&shapes.optimizer, dtype, &mut variable)
            });
        }
        states
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
mod tests;
