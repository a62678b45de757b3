"""kolo.keras.lr (and kolo.keras.ps without servers), under ``kolorun -np
2`` with TensorFlow's interpreter; rank 0 runs Keras 3, rank 1 tf_keras
(TF_USE_LEGACY_KERAS=1), so every check runs under both:

- schedule(): equals base_lr * kolo.lr.LRSchedule.factor(t) for every
  decay, with warm-up and steps_per_epoch, eagerly and in a tf.function,
  and after get_config/from_config; world_size defaults to the job's 2
  ranks (linear x2, sqrt x1.414);
- LRScheduleCallback: the learning rate model.fit trains each batch with;
- LARS(SGD(momentum)): three steps equal kolo.lr.LARS's formula (numpy),
  the 1-D variable unadapted; the LARS arguments survive from_config (as
  a DistributedOptimizer rebuilds it); bad arguments are errors;
- hvd.DistributedOptimizer(LARS(SGD(momentum))): LARS on the ranks'
  mean gradient;
- kolo.keras.ps.DistributedOptimizer in a job without servers: an error
  that says how to start one.
"""

import math
import os

import kolo

kolo.init()
rank = kolo.rank()
FLAVOR = "keras3" if rank == 0 else "tf_keras"
if FLAVOR == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.lr  # noqa: E402
from kolo.keras import lr as klr  # noqa: E402
from kolo.keras import ps  # noqa: E402

if FLAVOR == "tf_keras":
    import tf_keras as keras
else:
    import keras


def fail(msg):
    raise AssertionError("rank %d (%s): %s" % (rank, FLAVOR, msg))


def expect_error(kind, text, fn):
    try:
        fn()
    except kind as e:
        if text not in str(e):
            fail("error %r does not say %r" % (str(e), text))
        return
    fail("no %s saying %r" % (kind.__name__, text))


CASES = [
    dict(scaling="linear", warmup=3),
    dict(scaling="sqrt", warmup=2, decay="step", milestones=[4, 7], gamma=0.5),
    dict(scaling="linear", warmup=0, decay="step", step_size=3, gamma=0.1),
    dict(scaling="linear", warmup=2, decay="exponential", gamma=0.8),
    dict(scaling="sqrt", warmup=2, decay="cosine", total=9, min_factor=0.1),
    dict(scaling="linear", warmup=1.5, decay="cosine", total=4, steps_per_epoch=5),
    dict(scaling="none", warmup=0),
]


def test_schedules():
    steps = np.arange(0, 25)
    for case in CASES:
        sched = klr.schedule(0.1, **case)
        if not isinstance(sched, keras.optimizers.schedules.LearningRateSchedule):
            fail("schedule() is not a %s LearningRateSchedule" % FLAVOR)
        rule = kolo.lr.LRSchedule(world_size=2, **case)
        expected = np.array([0.1 * rule.factor(int(t)) for t in steps])
        eager = np.array([float(sched(int(t))) for t in steps])
        graph = tf.function(lambda t: sched(t))
        traced = np.array([float(graph(tf.constant(int(t), tf.int64))) for t in steps])
        for name, got in (("eager", eager), ("tf.function", traced)):
            if not np.allclose(got, expected, rtol=1e-5, atol=1e-8):
                fail("schedule %r (%s): %s, expected %s" % (case, name, got, expected))
        again = type(sched).from_config(sched.get_config())
        if not np.isclose(float(again(7)), expected[7], rtol=1e-6):
            fail("schedule %r does not survive get_config/from_config" % (case,))
    if not math.isclose(float(klr.schedule(1.0, warmup=0)(0)), 2.0, rel_tol=1e-6) or \
            not math.isclose(float(klr.schedule(1.0, scaling="sqrt")(0)), math.sqrt(2),
                             rel_tol=1e-6):
        fail("the scaled rate does not follow the job's 2 ranks")
    expect_error(ValueError, "cosine decay needs total > warmup",
                 lambda: klr.schedule(0.1, decay="cosine", warmup=2))
    expect_error(ValueError, "scaling rule must be one of",
                 lambda: klr.schedule(0.1, scaling="cubic"))


def test_callback_in_fit():
    steps_per_epoch, epochs, base = 4, 3, 0.05
    cb = klr.LRScheduleCallback(base, warmup=1, decay="step", milestones=[2],
                                gamma=0.5, steps_per_epoch=steps_per_epoch)
    seen = []

    class Record(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            seen.append(float(np.asarray(self.model.optimizer.learning_rate)))

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    model.compile(optimizer=keras.optimizers.SGD(base), loss="mse")
    x = np.ones((steps_per_epoch * 8, 3), np.float32)
    model.fit(x, x[:, :1], batch_size=8, epochs=epochs, verbose=0, callbacks=[cb, Record()])
    rule = kolo.lr.LRSchedule(world_size=2, warmup=1, decay="step", milestones=[2],
                              gamma=0.5, steps_per_epoch=steps_per_epoch)
    expected = [base * rule.factor(t) for t in range(steps_per_epoch * epochs)]
    if not np.allclose(seen, expected, rtol=1e-6):
        fail("LRScheduleCallback: the batches trained with %s, expected %s"
             % (seen, expected))

    fixed = keras.optimizers.SGD(klr.schedule(0.1))
    model.compile(optimizer=fixed, loss="mse")
    expect_error(TypeError, "use kolo.keras.lr.schedule instead",
                 lambda: model.fit(x, x[:, :1], batch_size=8, epochs=1, verbose=0,
                                   callbacks=[klr.LRScheduleCallback(0.1)]))


def lars_reference(w, grads, lr, momentum, eta, wd, eps, adapt):
    """kolo.lr.LARS's step (python/kolo/lr.py), in numpy float64."""
    w = w.astype(np.float64).copy()
    buf = None
    for g in grads:
        g = g.astype(np.float64)
        if adapt:
            wn, gn = np.linalg.norm(w), np.linalg.norm(g)
            trust = eta * wn / (gn + wd * wn + eps) if wn > 0 and gn > 0 else 1.0
            d = (g + wd * w) * lr * trust
        else:
            d = g * lr
        buf = d if buf is None else momentum * buf + d
        w -= buf
    return w


def test_lars():
    lr, momentum, eta, wd, eps = 0.1, 0.9, 0.02, 0.01, 1e-9
    rng = np.random.default_rng(5)
    w2 = rng.normal(size=(4, 3)).astype(np.float32)
    w1 = rng.normal(size=(3,)).astype(np.float32)
    grads = [(rng.normal(size=(4, 3)).astype(np.float32),
              rng.normal(size=(3,)).astype(np.float32)) for _ in range(3)]
    opt = klr.LARS(keras.optimizers.SGD(lr, momentum=momentum), eta=eta,
                   weight_decay=wd, eps=eps)
    # A wrapper that rebuilds the optimizer from its config keeps LARS.
    opt = type(opt).from_config(opt.get_config())
    if not isinstance(opt, keras.optimizers.SGD):
        fail("LARS(SGD) is not an SGD")
    a, b = tf.Variable(w2), tf.Variable(w1)
    step = tf.function(lambda ga, gb: opt.apply_gradients([(ga, a), (gb, b)]))
    for ga, gb in grads:
        step(tf.constant(ga), tf.constant(gb))
    want_a = lars_reference(w2, [g for g, _ in grads], lr, momentum, eta, wd, eps, True)
    want_b = lars_reference(w1, [g for _, g in grads], lr, momentum, eta, wd, eps, False)
    if not np.allclose(a.numpy(), want_a, rtol=1e-5, atol=1e-6) or \
            not np.allclose(b.numpy(), want_b, rtol=1e-5, atol=1e-6):
        fail("LARS: %s / %s, expected %s / %s" % (a.numpy(), b.numpy(), want_a, want_b))
    expect_error(ValueError, "eta=0",
                 lambda: klr.LARS(keras.optimizers.SGD(0.1), eta=0))
    expect_error(TypeError, "kolo.keras.lr.LARS wraps a Keras optimizer",
                 lambda: klr.LARS("sgd"))


def test_lars_through_distributed_optimizer():
    """hvd.DistributedOptimizer(LARS(SGD(momentum))) rebuilds the optimizer
    from its config: LARS's step on the ranks' mean gradient."""
    import kolo.keras as hvd
    lr, momentum, eta, wd = 0.1, 0.9, 0.02, 0.01
    opt = hvd.DistributedOptimizer(klr.LARS(keras.optimizers.SGD(lr, momentum=momentum),
                                            eta=eta, weight_decay=wd))
    rng = np.random.default_rng(11)
    w0 = rng.normal(size=(4, 3)).astype(np.float32)
    grads = [rng.normal(size=(4, 3)).astype(np.float32) for _ in range(2)]  # per rank
    a = tf.Variable(w0)
    step = tf.function(lambda g: opt.apply_gradients([(g, a)]))
    for _ in range(3):
        step(tf.constant(grads[rank]))
    mean = (grads[0].astype(np.float64) + grads[1]) / 2
    want = lars_reference(w0, [mean] * 3, lr, momentum, eta, wd, 1e-9, True)
    if not np.allclose(a.numpy(), want, rtol=1e-5, atol=1e-6):
        fail("LARS through hvd.DistributedOptimizer: %s, expected %s" % (a.numpy(), want))


def test_ps_without_servers():
    expect_error(ValueError, "kolo.keras.ps needs parameter servers: start the job "
                 "with kolorun --servers S",
                 lambda: ps.DistributedOptimizer(keras.optimizers.SGD(0.1)))
