"""kolo.keras.elastic on 2 ranks, under Keras 3 and tf_keras
(tf_keras_testing.run_twice): KerasState's sync / commit / restore of the
model, the optimizer's variables and the attributes; the three callbacks
during model.fit; and elastic.run rolling a KerasState back to its last
commit after a failure raised by the program.

Run: build/bin/kolorun -np 2 .venv/bin/python -m pytest tests/python/tf_keras_elastic.py
(PYTHONPATH=build/python).
"""

import sys

import numpy as np
import tensorflow as tf

from tf_keras_testing import both_flavours, main, same_on_every_rank

import kolo

keras = tf.keras


def built_model(value, optimizer):
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(2)])
    model.set_weights([np.full((2, 2), value, "float32"), np.full((2,), value, "float32")])
    model.compile(optimizer=optimizer, loss="mse")
    return model


def optimizer_values(opt):
    variables = opt.variables() if callable(opt.variables) else opt.variables
    return [v.numpy().copy() for v in variables]


def one_step(model, value):
    x = np.full((4, 2), value, "float32")
    model.train_on_batch(x, np.zeros((4, 2), "float32"))


def check_state_sync_commit_restore(hvd):
    r = hvd.rank()
    model = built_model(1.0 + r, keras.optimizers.Adam(0.01))
    one_step(model, 1.0 + r)  # different weights and Adam moments on each rank
    state = hvd.elastic.KerasState(model, batch=20 + r, epoch=10 + r)
    state.sync()
    same_on_every_rank(hvd, model.get_weights(), "weights after sync")
    same_on_every_rank(hvd, optimizer_values(model.optimizer), "optimizer after sync")
    assert (state.batch, state.epoch) == (20, 10), (state.batch, state.epoch)

    synced_w, synced_o = model.get_weights(), optimizer_values(model.optimizer)
    one_step(model, 3.0)
    state.batch, state.epoch = 21, 11
    state.restore()  # back to the sync (which saved)
    for a, b in zip(model.get_weights(), synced_w):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(optimizer_values(model.optimizer), synced_o):
        np.testing.assert_array_equal(a, b)
    assert (state.batch, state.epoch) == (20, 10)

    one_step(model, 3.0)
    state.batch, state.epoch = 22, 12
    state.commit()
    committed = model.get_weights()
    one_step(model, 5.0)
    state.restore()
    for a, b in zip(model.get_weights(), committed):
        np.testing.assert_array_equal(a, b)
    assert (state.batch, state.epoch) == (22, 12)


COMMITS = []


def counting_state(hvd, *args, **kwargs):
    """A KerasState whose commits are counted in COMMITS."""
    class Counting(hvd.elastic.KerasState):
        def commit(self):
            COMMITS.append(1)
            super().commit()

    return Counting(*args, **kwargs)


class BatchSeen(keras.callbacks.Callback):
    def __init__(self, state):
        super().__init__()
        self.state, self.seen = state, []

    def on_batch_end(self, batch, logs=None):
        self.seen.append(self.state.batch)


def check_callbacks_in_fit(hvd):
    model = built_model(0.5, hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)))
    state = counting_state(hvd, model, batch=0, epoch=5)
    del COMMITS[:]
    seen = BatchSeen(state)
    x = np.ones((8, 2), "float32")
    model.fit(x, np.zeros((8, 2), "float32"), batch_size=2, epochs=2, verbose=0, callbacks=[
        hvd.elastic.UpdateEpochStateCallback(state), hvd.elastic.UpdateBatchStateCallback(state),
        seen, hvd.elastic.CommitStateCallback(state, batches_per_commit=3)])
    assert state.epoch == 7, state.epoch  # 5 + the 2 epochs of this fit
    assert state.batch == 0, state.batch  # reset at each epoch's end
    assert seen.seen == [0, 1, 2, 3, 0, 1, 2, 3], seen.seen
    assert len(COMMITS) == 2 + 2, COMMITS  # batches 3 and 6, and the 2 epoch ends
    try:
        hvd.elastic.CommitStateCallback(state, batches_per_commit=0)
        raise AssertionError("batches_per_commit=0 accepted")
    except ValueError as e:
        assert "batches_per_commit" in str(e)


def check_run_rolls_back_after_a_failure(hvd):
    model = built_model(0.5, hvd.DistributedOptimizer(keras.optimizers.SGD(0.1)))
    state = hvd.elastic.KerasState(model, batch=0, epoch=0)
    calls, committed = [], []
    x = np.ones((4, 2), "float32")

    @hvd.elastic.run
    def train(state):
        calls.append(hvd.size())
        model.fit(x, np.zeros((4, 2), "float32"), batch_size=2, epochs=1, verbose=0,
                  callbacks=[hvd.elastic.UpdateEpochStateCallback(state),
                             hvd.elastic.CommitStateCallback(state)])
        if len(calls) == 1:
            committed.append(model.get_weights())
            one_step(model, 9.0)
            state.epoch = 99
            raise kolo.KoloError("simulated failure")
        return model.get_weights()

    final = train(state)
    assert calls == [hvd.size(), hvd.size()], calls
    assert state.epoch == 2, state.epoch  # 1 after the rollback, then one more epoch
    same_on_every_rank(hvd, final, "weights after the retry")
    # The retry started from the commit: one more epoch from it gives the
    # same weights as one epoch from the commit without the failure.
    ref = built_model(0.5, keras.optimizers.SGD(0.1))
    ref.set_weights(committed[0])
    ref.fit(x, np.zeros((4, 2), "float32"), batch_size=2, epochs=1, verbose=0)
    for a, b in zip(final, ref.get_weights()):
        np.testing.assert_allclose(a, b, rtol=1e-6)


CHECKS = [check_state_sync_commit_restore, check_callbacks_in_fit,
          check_run_rolls_back_after_a_failure]

test_keras_3, test_tf_keras = both_flavours(CHECKS, "tf_keras_elastic", __file__)

if __name__ == "__main__":
    sys.exit(main(CHECKS, "tf_keras_elastic"))
