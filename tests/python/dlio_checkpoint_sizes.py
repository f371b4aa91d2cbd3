#!/usr/bin/env python3
"""
DLIO's checkpoint geometry, as an independent oracle for tests/checkpoint.rs: which files each
rank writes per checkpoint and how many payload bytes each holds.

Mirrors argonne-lcf/dlio_benchmark @ main (e1919d7b, 2026-06-17), identical in the parts used
here to branch mlperf_storage_v2.0 (392621b, the branch pinned by mlcommons/storage):

  dlio_benchmark/checkpointing/base_checkpointing.py
    get_datatype_size()            L33-43
    BaseCheckpointing.__init__     L47-184   (geometry L57-67, who allocates L93-162)
    get_num_parameters()           L284-302
    get_layer_parameters()         L304-329
    get_layer_state()              L330-338
    get_optimization_groups()      L340-358
    get_layer_index()              L360-382
    save_checkpoint()              L385-418  (file names / which rank writes)
  dlio_benchmark/utils/config.py   defaults L105-136, validate() L311-331

It was validated against DLIO's own base_checkpointing.py and pytorch_checkpointing.py (run with
real torch for small models): the same file names and payload bytes on every rank. Trimmed from
that research script to what the tests need: DLIO's legacy predefined `layer_parameters` /
`optimization_groups` are left out.

Sizes are payload bytes (elements x bytes per element); torch.save's container overhead is not
counted (dlio-rs writes payload bytes only).

Usage: one JSON object of DLIO configuration values, as the first argument or on stdin:

  {"world": 4, "model_type": "transformer", "num_layers": 2, "vocab_size": 1000,
   "hidden_size": 256, "ffn_hidden_size": 512, "num_attention_heads": 32, "num_kv_heads": 8,
   "tensor": 1, "pipeline": 1, "data": -1, "zero_stage": 3, "checkpoint_mode": "default",
   "model_size": 10240, "model_datatype": "fp16", "optimizer_datatype": "fp32", "ext": "pt"}

Every key is optional (DLIO's defaults, config.py L105-136). Prints one JSON object:

  {"ranks": [[[file name, payload bytes], ...] for each rank 0..world-1], "total": bytes}

File names are relative to the checkpoint's `global_epoch{E}_step{S}` folder. A configuration
DLIO rejects prints {"error": message} and exits 1.
"""
import json
import sys

# base_checkpointing.py L33-43 (pytorch_checkpointing.get_torch_datatype accepts the same six
# names)
def get_datatype_size(datatype):
    if datatype == "int8" or datatype == "uint8":
        return 1
    elif datatype == "fp16" or datatype == "bf16":
        return 2
    elif datatype == "fp32":
        return 4
    elif datatype == "fp64":
        return 8
    else:
        raise Exception(f"Unsupported datatype {datatype}")


class Args:
    """The configuration values used; defaults from dlio_benchmark/utils/config.py L105-136."""

    def __init__(self, values):
        known = {
            "world": 1,                    # comm_size
            "model_type": None,            # model.type
            "model_size": 10240,           # model.model_size_bytes
            "model_datatype": "fp16",      # model.model_datatype
            "optimizer_datatype": "fp32",  # model.optimizer_datatype
            "vocab_size": 32000,           # model.transformer.vocab_size
            "hidden_size": 2048,           # model.transformer.hidden_size
            "num_attention_heads": 32,     # model.transformer.num_attention_heads
            "num_kv_heads": 8,             # model.transformer.num_kv_heads
            "ffn_hidden_size": 8192,       # model.transformer.ffn_hidden_size
            "zero_stage": 0,               # model.parallelism.zero_stage
            "num_layers": -1,              # model.num_layers
            "tensor": 1,                   # model.parallelism.tensor
            "pipeline": 1,                 # model.parallelism.pipeline
            "data": -1,                    # model.parallelism.data
            "checkpoint_mode": "default",  # checkpoint.mode (default|subset)
            "ext": "pt",                   # "pt" pytorch, "pb" tensorflow
        }
        unknown = set(values) - set(known)
        if unknown:
            raise SystemExit(f"unknown keys: {sorted(unknown)}")
        for key, default in known.items():
            setattr(self, key, values.get(key, default))


def validate(a):
    """config.py ConfigArguments.validate() L311-331 (the checkpoint checks, in its order)."""
    if a.num_layers > 0 and a.num_layers < a.pipeline:
        raise Exception(f"Expected model.num_layers {a.num_layers} should be larger than "
                        f"model.parallelism.pipeline {a.pipeline}.")
    if a.pipeline > 1 and a.zero_stage == 3:
        raise Exception(f"ZeRO stage {a.zero_stage} is not compatible with pipeline parallelism.")
    if a.data > 0 and a.checkpoint_mode == "default":
        raise Exception("workload.parallelism.data should not be set in default Checkpoint Mode; "
                        "it will be determined internally.")
    if a.checkpoint_mode == "subset":
        if a.data <= 0:
            raise Exception("To perform subset Checkpointing, please set a target data parallelism: "
                            "workload.parallelism.data.")
        elif a.data * a.tensor * a.pipeline < a.world:
            raise Exception(f"Comm size: {a.world} is larger than 3D parallelism size: "
                            f"{a.data * a.tensor * a.pipeline}")
    if a.checkpoint_mode == "default":
        if a.world % (a.pipeline * a.tensor) != 0:
            raise Exception(f"Number of processes {a.world} is not a multiple of model parallelism "
                            f"size: {a.pipeline * a.tensor}")


class Rank:
    """One rank's view, mirroring BaseCheckpointing.__init__ (no tensors are allocated: each
    tensor is (elements, datatype))."""

    def __init__(self, a, my_rank):
        self.a = a
        self.my_rank = my_rank
        # L57-67
        self.model_parallelism = a.pipeline * a.tensor
        if a.data < 0:
            self.data_parallelism = a.world // self.model_parallelism
        else:
            self.data_parallelism = a.data
        self.pp_rank = (my_rank // a.tensor) % a.pipeline
        self.tp_rank = my_rank % a.tensor
        self.dp_rank = my_rank // self.model_parallelism
        self.mp_rank = my_rank % self.model_parallelism
        self.rank_to_checkpoint = my_rank
        self.layer_state = None         # layer index (str) -> tensor index (str) -> tensor
        self.optimization_state = None  # tensor index (str) -> tensor
        self.model_state = None         # {"a": tensor}
        # L93-97
        if a.zero_stage == 0:
            if my_rank < self.model_parallelism:
                self.rank_to_checkpoint = my_rank
            else:
                self.rank_to_checkpoint = 0
        if self.rank_to_checkpoint == my_rank:
            start_layer, end_layer = self.get_layer_index()
            if a.num_layers > 0:
                should_allocate = not (a.zero_stage == 1 and self.dp_rank != 0)  # L124-125
                if should_allocate:
                    self.layer_state = {}
                    for li in range(start_layer, end_layer + 1):
                        self.layer_state[str(li)] = self.get_layer_state(li)
            groups = self.get_optimization_groups()
            if len(groups) > 0:
                self.optimization_state = {}
                for index, state in enumerate(groups):
                    if state > 0:
                        self.optimization_state[str(index)] = (state, a.optimizer_datatype)
            if a.model_size > 0 and a.model_type != "transformer":  # L159-160
                self.model_state = {"a": (a.model_size, "int8")}

    # L284-302
    def get_num_parameters(self):
        a = self.a
        if a.num_layers <= 0:
            return 0
        head_size = a.hidden_size // a.num_attention_heads
        dim_kv = head_size * a.num_kv_heads
        embedding = a.vocab_size * a.hidden_size
        input_norm = a.hidden_size
        qkv = a.hidden_size * (a.hidden_size + 2 * dim_kv)
        dense = a.hidden_size * a.hidden_size
        layer_norm = a.hidden_size
        mlp_h_to_4h = a.ffn_hidden_size * 2 * a.hidden_size
        mlp_4h_to_h = a.ffn_hidden_size * a.hidden_size
        weight = a.hidden_size
        lm_head = embedding
        return embedding + (input_norm + qkv + dense + layer_norm + mlp_h_to_4h + mlp_4h_to_h) \
            * a.num_layers + weight + lm_head

    # L304-329
    def get_layer_parameters(self, layer_index):
        a = self.a
        head_size = a.hidden_size // a.num_attention_heads
        dim_kv = head_size * a.num_kv_heads
        if a.num_layers <= 0:
            return []
        sf = 1 if a.zero_stage < 3 else self.data_parallelism
        tp = a.tensor
        H = a.hidden_size
        if layer_index == 0 or layer_index == a.num_layers + 1:
            return [H * a.vocab_size // tp // sf]                      # embedding or lm_head
        elif layer_index == a.num_layers + 2:
            return [H // sf]                                           # final norm ("weight")
        else:
            return [H // sf,                                           # input_norm
                    H * (H + 2 * dim_kv) // tp // sf,                  # qkv
                    H * H // tp // sf,                                 # dense (o)
                    H // sf,                                           # post-attention norm
                    H * 2 * a.ffn_hidden_size // tp // sf,             # h_to_4h (gated, x2)
                    H * a.ffn_hidden_size // tp // sf]                 # 4h_to_h

    # L330-338
    def get_layer_state(self, layer_index):
        st = {}
        for index, state in enumerate(self.get_layer_parameters(layer_index)):
            if state > 0:
                st[str(index)] = (state, self.a.model_datatype)
        return st

    # L340-358
    def get_optimization_groups(self):
        a = self.a
        if a.num_layers <= 0:
            return []
        if a.zero_stage > 0:
            n = self.get_num_parameters() // (self.data_parallelism * self.model_parallelism)
        else:
            n = self.get_num_parameters() // self.model_parallelism
        if n > 0:
            H5 = a.hidden_size * 5
            return [n, H5, n, H5, n, H5]
        return []

    # L360-382
    def get_layer_index(self):
        a = self.a
        pr = self.pp_rank
        per = a.num_layers // a.pipeline
        rem = a.num_layers % a.pipeline
        if pr < rem:
            start = pr * (per + 1) + 1
            end = start + per
        else:
            start = rem * (per + 1) + (pr - rem) * per + 1
            end = start + per - 1
        if pr == a.pipeline - 1:
            end = a.num_layers + 2
        if pr == 0:
            start = 0
        return start, end

    @staticmethod
    def state_bytes(state):
        if isinstance(state, tuple):
            return state[0] * get_datatype_size(state[1])
        return sum(Rank.state_bytes(v) for v in state.values())

    def files(self):
        """save_checkpoint L385-418: [(name, payload bytes)] in the order the rank writes them."""
        a = self.a
        out = []
        if self.rank_to_checkpoint != self.my_rank:
            return out

        def add(suffix, state):
            out.append([f"{suffix}.{a.ext}", self.state_bytes(state)])

        start, end = self.get_layer_index()
        if self.model_state:
            add(f"model_states-{self.my_rank}", self.model_state)
        if self.layer_state:
            if 0 < a.zero_stage < 3:
                if self.dp_rank == 0 and a.num_layers > 0:
                    if a.pipeline > 1:
                        for li in range(start, end + 1):
                            add(f"layer_{li}-model_{self.mp_rank}_model_states",
                                self.layer_state[str(li)])
                    else:
                        add(f"model_{self.mp_rank}_model_states", self.layer_state)
            else:
                add(f"zero_pp_rank_{self.dp_rank}_mp_rank_{self.mp_rank}_model_states",
                    self.layer_state)
        if self.optimization_state:
            add(f"zero_pp_rank_{self.dp_rank}_mp_rank_{self.mp_rank}_optim_states",
                self.optimization_state)
        return out


def geometry(values):
    a = Args(values)
    validate(a)
    # An unknown datatype raises when a tensor of it is sized, as in DLIO when it is allocated.
    ranks = [Rank(a, r).files() for r in range(a.world)]
    return {"ranks": ranks, "total": sum(b for files in ranks for _, b in files)}


def main():
    text = sys.argv[1] if len(sys.argv) > 1 else sys.stdin.read()
    try:
        result = geometry(json.loads(text))
    except Exception as e:  # DLIO's validate() or datatype errors
        print(json.dumps({"error": str(e)}))
        sys.exit(1)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
