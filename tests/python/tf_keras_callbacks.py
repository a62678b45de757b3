"""kolo.keras' callbacks and load_model on 2 ranks, under Keras 3 and
tf_keras (tf_keras_testing.run_twice).

Covers: BroadcastGlobalVariablesCallback (root's weights on every rank from
the start of training, local variables kept), MetricAverageCallback (logs
averaged in place, History sees the averages), LearningRateWarmupCallback
(Goyal et al.'s schedule batch by batch, steps per epoch from fit's
params), LearningRateScheduleCallback (staircase and per-batch, start and
end epochs, momentum correction on tf_keras' legacy SGD), load_model (the
saved optimizer state, wrapped and reducing; plain Keras loads the same
file; custom_optimizers).

Run: build/bin/kolorun -np 2 .venv/bin/python -m pytest tests/python/tf_keras_callbacks.py
(PYTHONPATH=build/python).
"""

import os
import sys
import tempfile

import numpy as np
import tensorflow as tf

from tf_keras_testing import LEGACY, both_flavours, main, same_on_every_rank

keras = tf.keras


class Recorder(keras.callbacks.Callback):
    """Records the learning rate (and momentum) each batch sees and the
    epoch-end logs."""

    def __init__(self):
        super().__init__()
        self.lrs, self.momenta, self.logs, self.weights_at_begin = [], [], [], None

    def on_train_begin(self, logs=None):
        self.weights_at_begin = self.model.get_weights()

    def on_batch_begin(self, batch, logs=None):
        opt = self.model.optimizer
        self.lrs.append(float(opt.learning_rate.numpy()))
        m = getattr(opt, "momentum", None)
        self.momenta.append(None if m is None else float(m.numpy() if hasattr(m, 'numpy') else m))

    def on_epoch_end(self, epoch, logs=None):
        self.logs.append(dict(logs or {}))


class Probe(keras.callbacks.Callback):
    def __init__(self, value):
        super().__init__()
        self.value = value

    def on_epoch_end(self, epoch, logs=None):
        logs["probe"] = self.value


def small_model(value=None):
    init = keras.initializers.Constant(value) if value is not None else "glorot_uniform"
    return keras.Sequential([keras.Input((3,)),
                             keras.layers.Dense(4, kernel_initializer=init, bias_initializer=init),
                             keras.layers.Dense(2, kernel_initializer=init, bias_initializer=init)])


def data(hvd, n=8):
    rng = np.random.default_rng(hvd.rank())
    return rng.normal(size=(n, 3)).astype("float32"), rng.normal(size=(n, 2)).astype("float32")


def check_broadcast_callback(hvd):
    root = hvd.size() - 1
    model = small_model(float(hvd.rank()))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")  # the weights stay
    local = list(model.layers[0].variables)
    rec = Recorder()
    cb = hvd.callbacks.BroadcastGlobalVariablesCallback(root, local_variables=local)
    x, y = data(hvd)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0, callbacks=[cb, rec])
    for i, w in enumerate(rec.weights_at_begin):  # already at the start of training
        want = hvd.rank() if i < 2 else root
        np.testing.assert_array_equal(w, np.full_like(w, want), err_msg="weight %d at begin" % i)
    for i, w in enumerate(model.get_weights()):
        want = hvd.rank() if i < 2 else root
        np.testing.assert_array_equal(w, np.full_like(w, want), err_msg="weight %d" % i)
    try:
        hvd.callbacks.BroadcastGlobalVariablesCallback(0, local_variables=["kernel"])
        raise AssertionError("a local variable that is not a variable was accepted")
    except ValueError as e:
        assert "local variables must be variables" in str(e)


def check_broadcast_unbuilt_model(hvd):
    # Horovod's tensorflow2_keras_mnist.py: a Sequential without an Input is
    # built by its first batch; the weights are broadcast at that batch's end.
    root = hvd.size() - 1
    init = keras.initializers.Constant(float(hvd.rank()))
    model = keras.Sequential([keras.layers.Dense(2, kernel_initializer=init, bias_initializer=init)])
    assert not model.built
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")  # the weights stay
    x, y = data(hvd)
    model.fit(x, y, batch_size=4, epochs=1, verbose=0,
              callbacks=[hvd.callbacks.BroadcastGlobalVariablesCallback(root)])
    for i, w in enumerate(model.get_weights()):
        np.testing.assert_array_equal(w, np.full_like(w, root), err_msg="weight %d" % i)


def check_metric_average(hvd):
    n = hvd.size()
    model = small_model()
    model.compile(optimizer=hvd.DistributedOptimizer(keras.optimizers.SGD(0.01)), loss="mse")
    x, y = data(hvd)
    rec = Recorder()
    history = model.fit(x, y, batch_size=4, epochs=2, verbose=0, callbacks=[
        hvd.callbacks.BroadcastGlobalVariablesCallback(0), Probe(float(hvd.rank() + 1)),
        hvd.callbacks.MetricAverageCallback(), rec])
    for logs in rec.logs:
        assert abs(logs["probe"] - (n + 1) / 2.0) < 1e-12, logs
    assert history.history["probe"] == [(n + 1) / 2.0] * 2, history.history
    same_on_every_rank(hvd, [history.history["loss"]], "averaged loss")


def check_warmup(hvd):
    n = hvd.size()
    model = small_model()
    model.compile(optimizer=keras.optimizers.SGD(0.123), loss="mse")
    rec = Recorder()
    x, y = data(hvd)
    model.fit(x, y, batch_size=2, epochs=3, verbose=0, callbacks=[
        hvd.callbacks.LearningRateWarmupCallback(initial_lr=0.4, warmup_epochs=2), rec])
    steps = 4
    want = []
    for e in range(3):
        for b in range(steps):
            if e < 2:
                t = e + float(b) / steps + 1.0 / steps
                want.append(0.4 / n * (t * (n - 1) / 2 + 1))
            else:
                want.append(want[-1])
    np.testing.assert_allclose(rec.lrs, want, rtol=1e-6)
    np.testing.assert_allclose(rec.logs[-1]["lr"], 0.4, rtol=1e-6)


def check_schedule_and_momentum_correction(hvd):
    steps = 4
    x, y = data(hvd)
    if LEGACY:
        opt = keras.optimizers.legacy.SGD(0.3, momentum=0.9)
    else:
        opt = keras.optimizers.SGD(0.3, momentum=0.9)
    model = small_model()
    model.compile(optimizer=opt, loss="mse")
    rec = Recorder()
    model.fit(x, y, batch_size=2, epochs=4, verbose=0, callbacks=[
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=1.0, multiplier=0.5, start_epoch=1,
                                                   end_epoch=3), rec])
    want = [0.3] * steps + [1.0] * steps + [0.5] * steps + [0.5] * steps
    np.testing.assert_allclose(rec.lrs, want, rtol=1e-6)
    if LEGACY:  # momentum in a variable: corrected for the batch where the rate changes
        assert abs(rec.momenta[steps] - 0.9 * 1.0 / 0.3) < 1e-5, rec.momenta
        assert abs(rec.momenta[2 * steps] - 0.9 * 0.5 / 1.0) < 1e-5, rec.momenta
        assert abs(rec.momenta[steps + 1] - 0.9) < 1e-6, rec.momenta
    else:  # a constant of the compiled step: left alone
        assert all(abs(m - 0.9) < 1e-7 for m in rec.momenta), rec.momenta

    model = small_model()
    model.compile(optimizer=keras.optimizers.SGD(0.3), loss="mse")
    rec = Recorder()
    model.fit(x, y, batch_size=2, epochs=2, verbose=0, callbacks=[
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=2.0, multiplier=lambda e: e + 1,
                                                   staircase=False), rec])
    want = [2.0 * (e + float(b) / steps + 1) for e in range(2) for b in range(steps)]
    np.testing.assert_allclose(rec.lrs, want, rtol=1e-6)
    try:
        hvd.callbacks.LearningRateScheduleCallback(initial_lr=None, multiplier=0.5)
        raise AssertionError("initial_lr=None accepted")
    except ValueError as e:
        assert "initial_lr" in str(e)


def variable_values(optimizer):
    variables = optimizer.variables() if callable(optimizer.variables) else optimizer.variables
    return [v.numpy() for v in variables]


class MySGD(keras.optimizers.SGD):
    pass


def check_load_model(hvd):
    x, y = data(hvd)
    suffix = ".h5" if LEGACY else ".keras"
    with tempfile.TemporaryDirectory() as d:
        for plain, custom in ((keras.optimizers.Adam(0.01), None), (MySGD(0.01, momentum=0.5), [MySGD])):
            model = small_model(0.5)
            model.compile(optimizer=hvd.DistributedOptimizer(plain), loss="mse")
            model.fit(x, y, batch_size=4, epochs=1, verbose=0)
            path = os.path.join(d, "model-%d%s" % (hvd.rank(), suffix))
            model.save(path)
            saved_vars = variable_values(model.optimizer)

            objects = {"MySGD": MySGD} if custom else None
            again = keras.models.load_model(path, custom_objects=objects)
            assert not hasattr(again.optimizer, "_kolo"), "plain Keras loaded a kolo optimizer"

            loaded = hvd.load_model(path, custom_optimizers=custom)
            opt = loaded.optimizer
            assert hasattr(opt, "_kolo") and isinstance(opt, type(plain)), type(opt).__mro__
            got = variable_values(opt)
            assert len(got) == len(saved_vars), (len(got), len(saved_vars))
            for a, b in zip(got, saved_vars):
                np.testing.assert_array_equal(a, b)
            # It reduces: rank-dependent data, the same weights after a step.
            loaded.train_on_batch(x, y)
            same_on_every_rank(hvd, loaded.get_weights(), "weights after a step of the loaded model")


CHECKS = [check_broadcast_callback, check_broadcast_unbuilt_model, check_metric_average, check_warmup,
          check_schedule_and_momentum_correction, check_load_model]

test_keras_3, test_tf_keras = both_flavours(CHECKS, "tf_keras_callbacks", __file__)

if __name__ == "__main__":
    sys.exit(main(CHECKS, "tf_keras_callbacks"))
