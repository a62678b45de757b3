"""Elastic Keras training through a lost rank and an added host, run by
tf_keras_elastic_run.sh under kolorun with a host discovery script.

Every worker trains a small Keras model with kolo.keras' DistributedOptimizer
under ``@hvd.elastic.run`` with a ``KerasState`` and the three elastic
callbacks (the state is committed every 2 batches and at each epoch's end).
In the first world (3 workers) the worker named by --victim kills itself
with SIGKILL at step --kill-at; the survivors roll back to the last commit
and re-form a world of 2. In that world worker 0 rewrites the discovery
script's hosts file (--rewrite FILE TEXT) at step --add-at, kolorun starts a
worker on the new host, and the three finish the epochs together. Each
worker prints "worker W done: rank R of N, epoch E, params H" (H: a digest of
the model's weights).
"""

import argparse
import hashlib
import os
import signal
import time

import numpy as np
import tensorflow as tf

import kolo.keras as hvd

p = argparse.ArgumentParser()
p.add_argument("--victim", type=int, default=2)
p.add_argument("--kill-at", type=int, default=5)
p.add_argument("--add-at", type=int, default=8)
p.add_argument("--rewrite", nargs=2, metavar=("FILE", "TEXT"), required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--step-sleep", type=float, default=0.1)
args = p.parse_args()

WORKER = int(os.environ["KOLO_ELASTIC_WORKER"])
BATCH, SAMPLES = 8, 384
keras = tf.keras
tf.get_logger().setLevel("ERROR")

hvd.init()
rng = np.random.default_rng(1)
x_all = rng.normal(size=(SAMPLES, 8)).astype("float32")
y_all = (x_all.sum(1) > 0).astype("int64")
keras.utils.set_random_seed(WORKER)  # different initial weights: the sync must make them equal
model = keras.Sequential([keras.Input((8,)), keras.layers.Dense(16, activation="relu"),
                          keras.layers.Dense(2)])
opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.05, momentum=0.9))
model.compile(optimizer=opt, loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
opt.build(model.trainable_variables)  # the optimizer's variables exist before the first sync
state = hvd.elastic.KerasState(model, batch=0, epoch=0, step=0)
first_world = [True]
rewritten = [False]


def on_reset():
    first_world[0] = False
    print("worker %d reset: now rank %d of %d at epoch %d step %d"
          % (WORKER, hvd.rank(), hvd.size(), state.epoch, state.step), flush=True)


state.register_reset_callbacks([on_reset])


class Events(keras.callbacks.Callback):
    """Counts steps; kills the victim, rewrites the hosts; paces the steps."""

    def on_batch_end(self, batch, logs=None):
        state.step += 1
        if first_world[0] and WORKER == args.victim and state.step == args.kill_at:
            print("worker %d kills itself at step %d" % (WORKER, state.step), flush=True)
            os.kill(os.getpid(), signal.SIGKILL)
        if (WORKER == 0 and hvd.size() == 2 and not rewritten[0]
                and state.step >= args.add_at):
            with open(args.rewrite[0], "w") as f:
                f.write(args.rewrite[1].replace("\\n", "\n") + "\n")
            rewritten[0] = True
            print("worker 0 rewrote the hosts at step %d" % state.step, flush=True)
        time.sleep(args.step_sleep)


@hvd.elastic.run
def train(state):
    # This world's shard: rank r of n takes every n-th sample, the same
    # number of batches on every rank.
    n, r = hvd.size(), hvd.rank()
    per_rank = (SAMPLES // n) // BATCH * BATCH
    x, y = x_all[r::n][:per_rank], y_all[r::n][:per_rank]
    model.fit(x, y, batch_size=BATCH, epochs=args.epochs - state.epoch, shuffle=False, verbose=0,
              callbacks=[hvd.elastic.UpdateEpochStateCallback(state),
                         hvd.elastic.UpdateBatchStateCallback(state), Events(),
                         hvd.elastic.CommitStateCallback(state, batches_per_commit=2)])


train(state)
flat = np.concatenate([w.reshape(-1) for w in model.get_weights()])
digest = hashlib.sha256(flat.tobytes()).hexdigest()[:16]
accuracy = float((model.predict(x_all, verbose=0).argmax(1) == y_all).mean())
print("worker %d done: rank %d of %d, epoch %d, params %s, accuracy %.3f"
      % (WORKER, hvd.rank(), hvd.size(), state.epoch, digest, accuracy), flush=True)
