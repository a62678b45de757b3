#!/usr/bin/env python3
"""Fashion-MNIST with Keras on N ranks: a small CNN trained with model.fit
and kolo.keras (Horovod's Keras API; docs/tensorflow.md, "Example:
Fashion-MNIST with Keras"). Keras 3 by default; tf_keras (Keras 2) with
TF_USE_LEGACY_KERAS=1.

    build/bin/kolorun -np 2 env PYTHONPATH=build/python \\
        .venv/bin/python examples/keras_fashion_mnist.py --epochs 3

--mode allreduce (the default): Horovod's way. Every rank trains on its
shard of the training set (1/N of it, reshuffled every epoch) with
hvd.DistributedOptimizer, which averages the gradients before every step;
the callbacks broadcast rank 0's initial weights
(BroadcastGlobalVariablesCallback), average the epoch's metrics over the
ranks (MetricAverageCallback) and warm the learning rate up from --lr to
--lr x N over --warmup-epochs (LearningRateWarmupCallback; the linear
scaling rule of Goyal et al.).

--mode sync | downpour | easgd: MPI-Learn's way, on kolo's parameter
servers (kolo.keras.ps.DistributedOptimizer), which need servers among the
ranks; with 1 server and 3 workers:

    build/bin/kolorun --servers 1 -np 4 env PYTHONPATH=build/python \\
        .venv/bin/python examples/keras_fashion_mnist.py --mode downpour

sync averages the workers' gradients on the servers (one allreduce step,
--lr scaled linearly), downpour applies each worker's gradient as it
arrives, at most --staleness-bound versions stale (one worker's batch per
update: --lr not scaled), easgd steps each worker's own optimizer and
exchanges the elastic difference with the center every --easgd-period
steps (--lr scaled linearly). The scaling and warm-up are kolo.keras.lr's
(LRScheduleCallback). The servers start from worker 0's weights; before the
test, every worker loads the servers' parameters (easgd: the center).

Rank 0 (worker 0) prints each epoch's loss and accuracy (averaged over the
ranks) and, at the end, the accuracy on the full test set; --json writes
them. The data are the IDX files of Debian's dataset-fashion-mnist
package (/usr/share/datasets/fashion-mnist), read with gzip and NumPy.
"""

import argparse
import gzip
import json
import os
import struct
import sys
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.keras as hvd  # noqa: E402
from kolo.keras import lr as kolo_lr  # noqa: E402
from kolo.keras import ps  # noqa: E402

keras = tf.keras  # Keras 3, or tf_keras with TF_USE_LEGACY_KERAS=1

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"
MEAN, STD = 0.2860, 0.3530
MODES = ("allreduce", "sync", "downpour", "easgd")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description="Train a small Keras CNN on Fashion-MNIST "
                                            "with kolo.keras")
    p.add_argument("--epochs", type=int, default=3, help="passes over the training set")
    p.add_argument("--batch-size", type=int, default=64, help="images per rank per step")
    p.add_argument("--lr", type=float, default=0.001, help="the 1-rank learning rate (Adam)")
    p.add_argument("--warmup-epochs", type=float, default=1.0,
                   help="linear warm-up from --lr to the scaled rate over K epochs")
    p.add_argument("--mode", choices=MODES, default="allreduce",
                   help="allreduce, or parameter servers (kolorun --servers S): "
                        "sync, downpour, easgd")
    p.add_argument("--staleness-bound", type=int, default=4,
                   help="downpour: a push more than this many versions stale is refused "
                        "and the worker pulls")
    p.add_argument("--easgd-alpha", type=float, default=0.5, help="easgd: the elastic force")
    p.add_argument("--easgd-period", type=int, default=4,
                   help="easgd: steps between exchanges with the center")
    p.add_argument("--seed", type=int, default=42, help="initialisation and shuffling")
    p.add_argument("--threads", type=int, default=1, help="TensorFlow threads per rank")
    p.add_argument("--data", default=DEFAULT_DATA, help="directory of the IDX files")
    p.add_argument("--limit", type=int, default=0,
                   help="train on the first N training images only (0: all 60000)")
    p.add_argument("--json", default=None, help="write the run's results as JSON")
    p.add_argument("--verbose", type=int, default=0, help="model.fit's verbose on rank 0")
    a = p.parse_args(argv)
    if a.epochs < 1 or a.batch_size < 1 or a.threads < 1 or a.limit < 0:
        p.error("--epochs, --batch-size and --threads must be >= 1, --limit >= 0")
    return a


# ---------------------------------------------------------------- data


def read_idx(path, magic):
    """An IDX file (gzip or plain) as a uint8 array of its header's shape,
    after checking its magic number and size."""
    if not os.path.exists(path) and os.path.exists(path[:-3]):
        path = path[:-3]
    if not os.path.exists(path):
        raise FileNotFoundError("Fashion-MNIST file not found: %s (apt-get install "
                                "dataset-fashion-mnist, or pass --data DIR)" % path)
    with (gzip.open if path.endswith(".gz") else open)(path, "rb") as f:
        data = f.read()
    got = struct.unpack(">I", data[:4])[0] if len(data) >= 4 else None
    if got != magic:
        raise ValueError("%s: IDX magic number %r, expected 0x%x" % (path, got, magic))
    dims = magic & 0xFF
    shape = struct.unpack(">%dI" % dims, data[4:4 + 4 * dims])
    body = data[4 + 4 * dims:]
    if len(body) != int(np.prod(shape)):
        raise ValueError("%s: %d bytes of data, the header %s says %d"
                         % (path, len(body), list(shape), int(np.prod(shape))))
    return np.frombuffer(body, dtype=np.uint8).reshape(shape)


def load(directory, train):
    """(images float32 [n, 28, 28, 1] normalized, labels int64 [n])."""
    prefix = "train" if train else "t10k"
    x = read_idx(os.path.join(directory, prefix + "-images-idx3-ubyte.gz"), 0x803)
    y = read_idx(os.path.join(directory, prefix + "-labels-idx1-ubyte.gz"), 0x801)
    x = ((x.astype(np.float32) / 255.0 - MEAN) / STD)[..., None]
    return x, y.astype(np.int64)


def shard(x, y, rank, size, seed):
    """This rank's 1/size of a fixed permutation (the same on every rank):
    disjoint shards of equal length (the remainder left out)."""
    order = np.random.default_rng(seed).permutation(len(y))
    n = len(y) // size
    mine = order[rank * n:(rank + 1) * n]
    return x[mine], y[mine]


# ---------------------------------------------------------------- model


def build_model(seed):
    keras.utils.set_random_seed(seed)
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        keras.layers.Conv2D(32, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Conv2D(64, 3, activation="relu"),
        keras.layers.MaxPooling2D(),
        keras.layers.Flatten(),
        keras.layers.Dense(128, activation="relu"),
        keras.layers.Dense(10),
    ])


def scaling(mode):
    """The learning-rate scaling rule of each mode (the module doc)."""
    return "none" if mode == "downpour" else "linear"


def optimizer_and_callbacks(args, size, steps_per_epoch):
    """The wrapped optimizer and the callbacks of --mode."""
    if args.mode == "allreduce":
        scaled = args.lr * size
        opt = hvd.DistributedOptimizer(keras.optimizers.Adam(scaled))
        callbacks = [
            hvd.callbacks.BroadcastGlobalVariablesCallback(0),
            hvd.callbacks.MetricAverageCallback(),
        ]
        if args.warmup_epochs > 0 and size > 1:
            callbacks.append(hvd.callbacks.LearningRateWarmupCallback(
                initial_lr=scaled, warmup_epochs=args.warmup_epochs,
                steps_per_epoch=steps_per_epoch, verbose=0))
        return opt, callbacks
    opt = ps.DistributedOptimizer(keras.optimizers.Adam(args.lr), mode=args.mode,
                                  staleness_bound=args.staleness_bound,
                                  easgd_alpha=args.easgd_alpha,
                                  easgd_period=args.easgd_period)
    callbacks = [hvd.callbacks.MetricAverageCallback()]
    if size > 1:
        callbacks.append(kolo_lr.LRScheduleCallback(
            args.lr, scaling=scaling(args.mode), warmup=args.warmup_epochs,
            steps_per_epoch=steps_per_epoch))
    return opt, callbacks


def main(argv=None):
    args = parse_args(argv)
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.threads)
    hvd.init()  # on a parameter server: serves, then exits
    rank, size = hvd.rank(), hvd.size()
    x, y = load(args.data, train=True)
    if args.limit:
        x, y = x[:args.limit], y[:args.limit]
    x, y = shard(x, y, rank, size, args.seed)
    x_test, y_test = load(args.data, train=False)
    steps_per_epoch = len(y) // args.batch_size
    x, y = x[:steps_per_epoch * args.batch_size], y[:steps_per_epoch * args.batch_size]

    # Every rank builds the same model (the broadcast, or the servers'
    # seeding from worker 0, makes them equal anyway).
    model = build_model(args.seed)
    opt, callbacks = optimizer_and_callbacks(args, size, steps_per_epoch)
    model.compile(optimizer=opt, jit_compile=False, metrics=["accuracy"],
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    keras.utils.set_random_seed(args.seed + 1000 * rank)  # each rank's shuffling
    began = time.time()
    hist = model.fit(x, y, batch_size=args.batch_size, epochs=args.epochs,
                     callbacks=callbacks, verbose=args.verbose if rank == 0 else 0)
    seconds = time.time() - began
    if rank != 0:
        return 0
    if args.mode != "allreduce":
        # The servers' parameters (easgd: the center). MetricAverageCallback's
        # allreduce at the end of the last epoch waited for every worker's
        # last push.
        opt.pull()
    test_loss, test_acc = model.evaluate(x_test, y_test, batch_size=1000, verbose=0)
    for e in range(args.epochs):
        print("epoch %d: loss %.4f accuracy %.4f" % (e + 1, hist.history["loss"][e],
                                                     hist.history["accuracy"][e]))
    print("mode %s, %d rank(s), %d epochs of %d steps of %d images: test accuracy "
          "%.2f%% (loss %.4f), %.1f s" % (args.mode, size, args.epochs,
                                          steps_per_epoch, args.batch_size,
                                          100 * test_acc, test_loss, seconds),
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"mode": args.mode, "ranks": size, "epochs": args.epochs,
                       "batch_size": args.batch_size, "lr": args.lr,
                       "steps_per_epoch": steps_per_epoch,
                       "test_accuracy": float(test_acc), "test_loss": float(test_loss),
                       "seconds": seconds, "keras": keras.__name__,
                       "train_loss": [float(v) for v in hist.history["loss"]]},
                      f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
