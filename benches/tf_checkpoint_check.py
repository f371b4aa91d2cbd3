#!/usr/bin/env python3
"""Checks dlio-rs's TensorFlow checkpoints with TensorFlow itself.

For every shard (`{name}.pb-1.index` + `{name}.pb-1.data-00000-of-00001`) under the given
checkpoint folders (dlio-rs runs with `framework: tensorflow`):

1. `tf.train.load_checkpoint` opens it and reads every tensor (TensorFlow checks each tensor's
   CRC32C against the index as it reads);
2. the state dict is rebuilt from the checkpoint's own object graph (nested dicts, shared
   variables shared, zero-filled `tf.Variable`s of each tensor's dtype and shape), and
   `tf.train.Checkpoint(**state).restore(prefix)` restores it as DLIO's `load_state` does, with
   `assert_consumed()` (every saved value matched) and every value compared with step 1's;
3. the restored state is saved again by TensorFlow (`tf.train.Checkpoint(**state).save`) into
   a scratch folder, and the index, the data file and the `checkpoint` text are compared byte for
   byte with dlio-rs's.

Prints one line per shard and a summary; exits 1 if any shard fails. Needs TensorFlow (tested
with tensorflow-cpu 2.21):

    python3 benches/tf_checkpoint_check.py CHECKPOINT_FOLDER [...]
"""

import os
import sys
import tempfile

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import tensorflow as tf  # noqa: E402
from tensorflow.core.protobuf import trackable_object_graph_pb2  # noqa: E402

SUFFIX = ".pb-1.index"


def rebuild_state(reader):
    """The state dict whose save made this checkpoint, from its object graph."""
    graph = trackable_object_graph_pb2.TrackableObjectGraph()
    graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
    shapes = reader.get_variable_to_shape_map()
    dtypes = reader.get_variable_to_dtype_map()
    made = {}

    def build(node_id):
        if node_id in made:
            return made[node_id]
        node = graph.nodes[node_id]
        if node.attributes:
            key = node.attributes[0].checkpoint_key
            value = tf.Variable(tf.zeros(shapes[key], dtypes[key]), trainable=False)
        else:
            value = {c.local_name: build(c.node_id) for c in node.children}
        made[node_id] = value
        return value

    root = graph.nodes[0]
    return {c.local_name: build(c.node_id) for c in root.children if c.local_name != "save_counter"}


def variables(state, path=""):
    for name, value in state.items():
        if isinstance(value, dict):
            yield from variables(value, f"{path}{name}/")
        else:
            yield f"{path}{name}/.ATTRIBUTES/VARIABLE_VALUE", value


def check(prefix, scratch):
    folder, name = os.path.split(prefix)
    reader = tf.train.load_checkpoint(prefix)
    saved = {k: reader.get_tensor(k) for k in reader.get_variable_to_shape_map()}
    state = rebuild_state(reader)
    tf.train.Checkpoint(**state).restore(prefix).assert_consumed()
    for key, variable in variables(state):
        # Bytes, not values: random bytes make NaNs, which equal nothing.
        if key in saved and variable.numpy().tobytes() != saved[key].tobytes():
            return f"restored {key} differs from the stored tensor"
    again = os.path.join(scratch, name[: -len("-1")])
    tf.train.Checkpoint(**state).save(again)
    for suffix in (".index", ".data-00000-of-00001"):
        ours = open(prefix + suffix, "rb").read()
        theirs = open(again + "-1" + suffix, "rb").read()
        if ours != theirs:
            return f"{suffix}: {len(ours)} bytes here, TensorFlow writes {len(theirs)} bytes, not the same"
    ours = open(os.path.join(folder, "checkpoint")).read()
    theirs = open(os.path.join(scratch, "checkpoint")).read()
    # The folder's file names the last shard saved there, by whichever rank saved last.
    if theirs.replace(name, "") != ours.replace(ours.split('"')[1], ""):
        return f"checkpoint file differs: {ours!r} vs {theirs!r}"
    return None


def main(folders):
    shards = failures = 0
    for top in folders:
        for folder, _, names in sorted(os.walk(top)):
            for index in sorted(n for n in names if n.endswith(SUFFIX)):
                prefix = os.path.join(folder, index[: -len(".index")])
                with tempfile.TemporaryDirectory() as scratch:
                    problem = check(prefix, scratch)
                shards += 1
                size = os.path.getsize(prefix + ".data-00000-of-00001")
                if problem:
                    failures += 1
                    print(f"FAIL {prefix}: {problem}")
                else:
                    print(f"ok   {prefix} ({size} bytes of data): restored, TensorFlow's own save identical")
    print(f"{shards} shard(s), {failures} failure(s) (TensorFlow {tf.__version__})")
    return 1 if failures or not shards else 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
