"""One run of bench/tf_scaling.sh: Keras training throughput, or one
allreduce size, on one of three systems.

    tf_scaling.py train --system kolo|mwms|single --model cnn|resnet50 --json PREFIX [...]
    tf_scaling.py allreduce --system kolo|mwms --mib 64 --json PREFIX [...]

Systems:
  kolo    one rank of a kolorun job: `import kolo.keras as hvd`, hvd.init(),
          hvd.DistributedOptimizer, BroadcastGlobalVariablesCallback(0); the
          dataset sharded by rank (train); `kolo.tensorflow.allreduce` inside a
          tf.function (allreduce).
  mwms    tf.distribute.MultiWorkerMirroredStrategy, TensorFlow's own
          collective ops over gRPC: with --nproc N and no TF_CONFIG in the
          environment the script starts N workers of itself on 127.0.0.1 (free
          ports picked) and waits for them. The model is built and compiled in
          the strategy's scope and fit on the global batch (N x per-rank),
          which the strategy splits by worker (train); the replica context's
          all_reduce, the collective MWMS aggregates gradients with (allreduce).
  single  one process, no distribution: the shell starts two at once for the
          machine's ceiling, lined up with --together (their clocks start
          when both have warmed up, and each trains on past its timed steps
          until the other has timed its own).

Keras: Keras 3, or tf_keras when TF_USE_LEGACY_KERAS=1 (MWMS's model.fit
works with tf_keras only: Keras 3 fails on its PerReplica inputs,
keras-team/keras#20585). Every process computes with --threads intra-op
threads (default 1: two ranks on two cores) and TensorFlow's default
inter-op pool (--inter-op; one thread there slows MWMS's collectives, which
run in it, by about half).

Training: one model.fit epoch of --warmup + --steps steps at --batch-size
per rank; the clock runs from the end of the last warm-up step to the end of
the last step. Models: cnn (Horovod's TensorFlow 2 MNIST CNN on Debian's
Fashion-MNIST IDX files, --data) and resnet50 (keras.applications, weights
None, 1000 classes, synthetic --image-size images, fixed per process).

Each process writes PREFIX.rank<R>.json: system, model, keras, rank, size,
batch_size, steps, seconds, images_per_second (this process's: batch x steps
/ seconds), threads, inter_op and, for training, step_ms (the timed steps'
median, 10th and 90th percentile, each step timed from the end of the one
before: the spread that a synchronous job pays as waits and independent
runs do not) and cpu_seconds (CPU time of the timed steps per thread name,
from /proc/self/task: TensorFlow's tf_Compute pool, kolo's kolo-runtime
thread, python); for allreduce, mib, iters, ms_per_call. Throughput of a job
is the bench's business: size x batch x steps / the slowest rank's seconds.
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("train", "allreduce"))
    p.add_argument("--system", choices=("kolo", "mwms", "single"), required=True)
    p.add_argument("--json", required=True, help="output prefix: PREFIX.rank<R>.json")
    p.add_argument("--nproc", type=int, default=2, help="mwms: workers to start")
    p.add_argument("--threads", type=int, default=1, help="TF intra-op threads (0: TF's default)")
    p.add_argument("--inter-op", type=int, default=0, help="TF inter-op threads (0: TF's default)")
    p.add_argument("--model", choices=("cnn", "resnet50"), default="cnn")
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--image-size", type=int, default=64, help="resnet50's synthetic images")
    p.add_argument("--warmup", type=int, default=5, help="steps before the clock starts")
    p.add_argument("--steps", type=int, default=50, help="timed steps")
    p.add_argument("--together", default=None, metavar="DIR",
                   help="single: start the clock when --together-count processes sharing DIR "
                   "have warmed up, and train on until all have timed their steps")
    p.add_argument("--together-count", type=int, default=2)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--mib", type=float, default=64.0, help="allreduce: float32 MiB")
    p.add_argument("--iters", type=int, default=20, help="allreduce: timed calls")
    args = p.parse_args(argv)
    if args.what == "allreduce" and args.system == "single":
        p.error("allreduce runs on kolo or mwms")
    return args


def free_ports(n):
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def launch_mwms(args):
    """Start --nproc workers of this script with TF_CONFIG; 0 when all succeed."""
    workers = ["127.0.0.1:%d" % port for port in free_ports(args.nproc)]
    procs = []
    for index in range(args.nproc):
        config = {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}
        env = dict(os.environ, TF_CONFIG=json.dumps(config))
        procs.append(subprocess.Popen([sys.executable] + sys.argv, env=env))
    codes = [p.wait() for p in procs]
    bad = [(i, c) for i, c in enumerate(codes) if c]
    for index, code in bad:
        print("tf_scaling.py: mwms worker %d exited with %d" % (index, code), file=sys.stderr)
    return 1 if bad else 0


class Together:
    """Independent processes lining up (the ceiling's two 1-rank runs):
    arrive(stage) leaves a file in the directory and, with wait, waits until
    `count` processes have left theirs; all(stage) says whether they have.
    A no-op without a directory."""

    def __init__(self, directory, count, timeout=600):
        self.directory, self.count, self.timeout = directory, count, timeout

    def _files(self, stage):
        return [f for f in os.listdir(self.directory) if f.startswith(stage + ".")]

    def arrive(self, stage, wait=True):
        if not self.directory:
            return
        os.makedirs(self.directory, exist_ok=True)
        open(os.path.join(self.directory, "%s.%d" % (stage, os.getpid())), "w").close()
        deadline = time.monotonic() + self.timeout
        while wait and len(self._files(stage)) < self.count:
            if time.monotonic() > deadline:
                raise TimeoutError("tf_scaling.py: %d of %d processes reached '%s' in %s after %d s"
                                   % (len(self._files(stage)), self.count, stage,
                                      self.directory, self.timeout))
            time.sleep(0.005)

    def all(self, stage):
        return not self.directory or len(self._files(stage)) >= self.count


class System:
    """The distribution system of this process: rank, size, the optimizer
    wrapper, callbacks, and the scope models are built in."""

    def __init__(self, args, tf):
        self.name = args.system
        self.strategy = None
        self.hvd = None
        if self.name == "mwms":
            # Created first: MWMS must exist before any other TensorFlow op runs.
            self.strategy = tf.distribute.MultiWorkerMirroredStrategy()
            self.rank = json.loads(os.environ["TF_CONFIG"])["task"]["index"]
            self.size = self.strategy.num_replicas_in_sync
        elif self.name == "kolo":
            import kolo.tensorflow as hvd
            hvd.init()
            self.hvd = hvd
            self.rank, self.size = hvd.rank(), hvd.size()
        else:
            self.rank, self.size = 0, 1

    def scope(self):
        import contextlib
        return self.strategy.scope() if self.strategy else contextlib.nullcontext()

    def optimizer(self, opt):
        if not self.hvd:
            return opt
        import kolo.keras as hvd
        return hvd.DistributedOptimizer(opt)

    def callbacks(self):
        if not self.hvd:
            return []
        import kolo.keras as hvd
        return [hvd.callbacks.BroadcastGlobalVariablesCallback(0)]

    def global_batch(self, batch):
        """What the dataset is batched with: MWMS splits the global batch."""
        return batch * self.size if self.strategy else batch


def import_keras():
    if os.environ.get("TF_USE_LEGACY_KERAS") == "1":
        import tf_keras as keras
        return keras, "2"
    import keras
    return keras, "3"


def cnn_model(keras):
    """Horovod's TensorFlow 2 MNIST CNN (examples/tensorflow2_keras_mnist.py)."""
    layers = keras.layers
    return keras.Sequential([
        keras.Input((28, 28, 1)),
        layers.Conv2D(32, [3, 3], activation="relu"),
        layers.Conv2D(64, [3, 3], activation="relu"),
        layers.MaxPooling2D(pool_size=(2, 2)),
        layers.Dropout(0.25),
        layers.Flatten(),
        layers.Dense(128, activation="relu"),
        layers.Dropout(0.5),
        layers.Dense(10, activation="softmax"),
    ])


def dataset(args, tf, system):
    """The training input: this rank's shard for kolo, the global batch with
    MWMS's own sharding for mwms, everything for single."""
    batch = system.global_batch(args.batch_size)
    options = tf.data.Options()
    if args.model == "cnn":
        sys.path.insert(0, os.path.join(HERE, "..", "scripts", "local_mnist"))
        import numpy as np
        import idx_mnist
        arrays = idx_mnist.load_arrays(args.data)
        order = np.random.default_rng(42).permutation(len(arrays["x_train"]))
        x = (arrays["x_train"][order].astype(np.float32) / 255.0)[..., None]
        y = arrays["y_train"][order].astype(np.int64)
        ds = tf.data.Dataset.from_tensor_slices((x, y))
        if system.hvd:
            ds = ds.shard(system.size, system.rank)
        policy = tf.data.experimental.AutoShardPolicy.DATA
    else:
        shape = [batch, args.image_size, args.image_size, 3]
        x = tf.random.stateless_uniform(shape, seed=[1, system.rank])
        y = tf.random.stateless_uniform([batch], seed=[2, system.rank], maxval=1000, dtype=tf.int64)
        ds = tf.data.Dataset.from_tensors((x, y)).unbatch()
        # One synthetic batch repeated: every worker reads all of it and
        # MWMS hands each its own per-rank part of the global batch.
        policy = tf.data.experimental.AutoShardPolicy.OFF
    options.experimental_distribute.auto_shard_policy = policy
    ds = ds.repeat().batch(batch, drop_remainder=True).prefetch(2)
    return ds.with_options(options)


def thread_cpu():
    """{thread id: (name, CPU seconds)} of this process (Linux /proc)."""
    out, tick = {}, os.sysconf("SC_CLK_TCK")
    for tid in os.listdir("/proc/self/task"):
        try:
            with open("/proc/self/task/%s/stat" % tid) as f:
                stat = f.read()
        except OSError:  # the thread ended
            continue
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2:].split()
        out[tid] = (name, (int(fields[11]) + int(fields[12])) / tick)  # utime + stime
    return out


def cpu_by_name(before, after):
    """CPU seconds per thread name between two thread_cpu() readings."""
    out = {}
    for tid, (name, seconds) in after.items():
        out[name] = out.get(name, 0.0) + seconds - before.get(tid, (name, 0.0))[1]
    return {name: round(s, 3) for name, s in sorted(out.items()) if s > 0}


def step_summary(ends):
    """Median, 10th and 90th percentile (ms) of the steps between ends."""
    steps = sorted(1e3 * (b - a) for a, b in zip(ends, ends[1:]))
    if not steps:
        return {}
    pick = lambda q: round(steps[min(len(steps) - 1, int(q * len(steps)))], 2)  # noqa: E731
    return {"median": round(statistics.median(steps), 2), "p10": pick(0.1), "p90": pick(0.9)}


def train(args, tf, system):
    keras, flavor = import_keras()
    with system.scope():
        if args.model == "cnn":
            model = cnn_model(keras)
            opt = keras.optimizers.Adam(0.001 * system.size)
        else:
            model = keras.applications.ResNet50(
                weights=None, input_shape=(args.image_size, args.image_size, 3), classes=1000)
            opt = keras.optimizers.SGD(0.01 * system.size)
        model.compile(optimizer=system.optimizer(opt),
                      loss=keras.losses.SparseCategoricalCrossentropy())
    marks = {}
    together = Together(args.together, args.together_count)
    last = args.warmup + args.steps - 1

    ends, cpu = [], {}

    class Clock(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            if batch == args.warmup - 1:
                together.arrive("start")
                cpu["start"] = thread_cpu()
                marks["start"] = time.perf_counter()
                ends.append(marks["start"])
            elif args.warmup <= batch < last:
                ends.append(time.perf_counter())
            elif batch == last:
                marks["end"] = time.perf_counter()
                ends.append(marks["end"])
                cpu["end"] = thread_cpu()
                together.arrive("end", wait=False)
            if batch >= last and together.all("end"):
                self.model.stop_training = True

    # The epoch is longer than the run: a process that has timed its steps
    # trains on until every process of its group has (--together), so that
    # none of them runs its timed steps next to an idle neighbour.
    tail = 20 * args.steps if args.together else 0
    history = model.fit(dataset(args, tf, system), steps_per_epoch=last + 1 + tail,
                        epochs=1, verbose=0, shuffle=False,
                        callbacks=system.callbacks() + [Clock()])
    seconds = marks["end"] - marks["start"]
    return {"keras": flavor, "model": args.model, "steps": args.steps,
            "image_size": args.image_size if args.model == "resnet50" else 28,
            "seconds": seconds,
            "images_per_second": args.batch_size * args.steps / seconds,
            "step_ms": step_summary(ends),
            "cpu_seconds": cpu_by_name(cpu["start"], cpu["end"]),
            "loss": float(history.history["loss"][-1])}


def allreduce(args, tf, system):
    """--iters sum allreduces of a --mib float32 tensor, each a tf.function
    call; the result of the last is checked (every rank contributes rank+1)."""
    n = int(args.mib * 2 ** 20) // 4
    if system.hvd:
        hvd = system.hvd
        reduce = tf.function(lambda t: hvd.allreduce(t, op=hvd.Sum))
    else:
        strategy = system.strategy

        def replica_sum(t):
            # The identity places the input on the replica's device, which
            # all_reduce takes as the destination.
            return tf.distribute.get_replica_context().all_reduce(
                tf.distribute.ReduceOp.SUM, tf.identity(t))

        reduce = tf.function(lambda t: strategy.run(replica_sum, args=(t,)))
    x = tf.fill([n], float(system.rank + 1))
    small = tf.ones([1])
    for _ in range(3):  # warm-up: tracing, connections, buffers
        reduce(x)
    float(reduce(small)[0])  # line the ranks up
    start = time.perf_counter()
    for _ in range(args.iters):
        y = reduce(x)
    got = float(y[-1])
    seconds = time.perf_counter() - start
    want = system.size * (system.size + 1) / 2
    if got != want:
        raise RuntimeError("allreduce of %g MiB on rank %d: element %g, expected %g"
                           % (args.mib, system.rank, got, want))
    return {"mib": args.mib, "iters": args.iters, "seconds": seconds,
            "ms_per_call": 1000 * seconds / args.iters,
            "busbw_gbs": args.mib * 2 ** 20 * 2 * (system.size - 1) / system.size
            / (seconds / args.iters) / 1e9}


def main(argv=None):
    args = parse_args(argv)
    if args.system == "mwms" and "TF_CONFIG" not in os.environ:
        return launch_mwms(args)
    import tensorflow as tf
    tf.config.threading.set_intra_op_parallelism_threads(args.threads)
    tf.config.threading.set_inter_op_parallelism_threads(args.inter_op)
    system = System(args, tf)
    result = train(args, tf, system) if args.what == "train" else allreduce(args, tf, system)
    result.update(system=args.system, what=args.what, rank=system.rank, size=system.size,
                  batch_size=args.batch_size, tensorflow=tf.__version__,
                  threads=args.threads, inter_op=args.inter_op)
    with open("%s.rank%d.json" % (args.json, system.rank), "w") as f:
        json.dump(result, f, indent=1)
    if system.rank == 0:
        print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
