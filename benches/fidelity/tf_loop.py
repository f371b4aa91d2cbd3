"""The real tf.data loop of the fidelity benchmark: DLIO's TensorFlow TFRecord pipeline as
dlio_benchmark/reader/tf_reader.py builds it, `list_files(shuffle=False)` → `shard` →
`TFRecordDataset(buffer_size=transfer_size, num_parallel_reads=read_threads)` →
`shuffle(shuffle_size, seed)` → `batch(drop_remainder=True)` → `map(parse,
num_parallel_calls=computation_threads)` → `repeat` → `take(steps)` → `prefetch(prefetch_size)`,
built before the clock starts and iterated with `time.sleep(compute)` per step as the
accelerator (common.train: DLIO's accounting).

usage: tf_loop.py OUT.json FOLDER BATCH READ_THREADS PREFETCH_SIZE COMPUTE_SECONDS
       SAMPLES_PER_FILE SHUFFLE_SIZE SEED COMPUTATION_THREADS
"""

import glob
import math
import os
import sys

import tensorflow as tf

from common import report, train


def main():
    out, folder, batch, threads, prefetch, compute = sys.argv[1:7]
    per_file, shuffle_size, seed, computation_threads = (int(a) for a in sys.argv[7:11])
    batch, threads, prefetch, compute = int(batch), int(threads), int(prefetch), float(compute)
    files = sorted(glob.glob(os.path.join(folder, "train", "*.tfrecord")))
    # DLIO hands the map a fixed image of the record's size; parsing is the work it does.
    image = tf.zeros([1], dtype=tf.uint8)

    def parse(serialized):
        features = {
            "image": tf.io.FixedLenFeature([], tf.string),
            "size": tf.io.FixedLenFeature([], tf.int64),
        }
        tf.io.parse_example(serialized=serialized, features=features)
        return image

    # Built before the clock starts, as DLIO's TFDataLoader.read() builds it before the epoch.
    names = tf.data.Dataset.list_files(files, shuffle=False).shard(num_shards=1, index=0)
    # DLIO's transfer_size is None by default: TensorFlow's own buffer.
    dataset = tf.data.TFRecordDataset(filenames=names, buffer_size=None, num_parallel_reads=threads)
    if shuffle_size > 0:
        dataset = dataset.shuffle(buffer_size=shuffle_size, seed=seed)
    dataset = dataset.batch(batch, drop_remainder=True)
    dataset = dataset.map(
        lambda x: tf.py_function(func=parse, inp=[x], Tout=[tf.uint8]),
        num_parallel_calls=computation_threads,
    )
    steps = math.floor(len(files) / batch * per_file)
    dataset = dataset.repeat().take(steps).prefetch(buffer_size=prefetch)
    report(train(dataset, steps, compute, batch), out)


if __name__ == "__main__":
    main()
