"""kolo.keras.ps: the three modes train a tiny Keras model with model.fit,
and its weights are what the mode implies. Each mode is one job of 1
server and 2 workers (tf_keras_ps_<mode>.py, under ``kolorun --servers 1
-np 3`` with TensorFlow's interpreter; one ps.DistributedOptimizer per
job). Worker 0 runs Keras 3 and worker 1 tf_keras (TF_USE_LEGACY_KERAS=1),
against the same servers: every check runs under both.

The model has two branches (one Dense layer each):
- "reg": a linear regression with MSE on each worker's own data; its loss
  must fall (converging);
- "lin": a linear loss mean(t * (x . w + b)) on a fixed batch, whose
  gradient (mean(t x), mean(t)) is constant, the same on every step and on
  both workers (g). Its final weights follow from the mode alone:
  sync (kolo.keras.lr.LARS around SGD with momentum m): s updates with
      LARS's gradient of the mean gradient g (the kernel adapted, the
      bias not);
  downpour (SGD, momentum m, a bound no push reaches): 2 s updates of g,
      in any order (every push applied on its own);
  easgd (local SGD, momentum m): the exchanges conserve center + x_0 +
      x_1, so after s local steps on each worker that sum is
      3 w0 - 2 * (s local steps' displacement).
Both workers must also end with equal weights (sync, and after a pull in
downpour) and the server's counters must match the pushes. Bad arguments
(sync job): clear errors.
"""

import os

import kolo

kolo.init()  # the server rank serves here and exits
rank = kolo.rank()
FLAVOR = "keras3" if rank == 0 else "tf_keras"
if FLAVOR == "tf_keras":
    os.environ["TF_USE_LEGACY_KERAS"] = "1"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo.numpy as knp  # noqa: E402
from kolo.keras import lr as klr  # noqa: E402
from kolo.keras import ps  # noqa: E402

if FLAVOR == "tf_keras":
    import tf_keras as keras
else:
    import keras

LR, MOMENTUM, STEPS, BATCH = 0.05, 0.5, 12, 16
LARS_ETA, LARS_WD = 0.5, 0.01


def fail(msg):
    raise AssertionError("worker %d (%s): %s" % (rank, FLAVOR, msg))


def expect_error(kind, text, fn):
    try:
        fn()
    except kind as e:
        if text not in str(e):
            fail("error %r does not say %r" % (str(e), text))
        return
    fail("no %s saying %r" % (kind.__name__, text))


def bad_arguments():
    sgd = keras.optimizers.SGD(0.1)
    expect_error(ValueError, "unknown parameter-server mode 'hogwild'",
                 lambda: ps.DistributedOptimizer(sgd, mode="hogwild"))
    expect_error(ValueError, "staleness_bound=-1",
                 lambda: ps.DistributedOptimizer(sgd, mode="downpour", staleness_bound=-1))
    expect_error(ValueError, "group_size=2",
                 lambda: ps.DistributedOptimizer(sgd, group_size=2))
    expect_error(ValueError, "amsgrad=True",
                 lambda: ps.DistributedOptimizer(keras.optimizers.Adam(amsgrad=True)))
    expect_error(ValueError, "Adagrad is not supported",
                 lambda: ps.DistributedOptimizer(keras.optimizers.Adagrad(0.1)))
    expect_error(ValueError, "SGD(weight_decay=0.01, momentum=0.9)",
                 lambda: ps.DistributedOptimizer(keras.optimizers.SGD(
                     0.1, momentum=0.9, weight_decay=0.01)))
    expect_error(ValueError, "SGD(use_ema=True) is not supported",
                 lambda: ps.DistributedOptimizer(keras.optimizers.SGD(0.1, use_ema=True)))
    expect_error(TypeError, "wraps a Keras optimizer",
                 lambda: ps.DistributedOptimizer(object()))
    if FLAVOR == "tf_keras":
        expect_error(TypeError, "not the legacy ones",
                     lambda: ps.DistributedOptimizer(keras.optimizers.legacy.SGD(0.1)))
    expect_error(ValueError, "needs a started ps.DistributedOptimizer", ps.stats)


def model_and_data():
    keras.utils.set_random_seed(1000 + rank)  # different initial weights per worker
    x_reg = keras.Input((4,), name="x_reg")
    x_lin = keras.Input((3,), name="x_lin")
    reg = keras.layers.Dense(1, name="reg")(x_reg)
    lin = keras.layers.Dense(1, name="lin")(x_lin)
    model = keras.Model([x_reg, x_lin], [reg, lin])
    rng = np.random.default_rng(7 + rank)  # each worker's own regression data
    n = STEPS * BATCH
    xr = rng.normal(size=(n, 4)).astype(np.float32)
    yr = (xr @ np.array([[1.0], [-2.0], [0.5], [3.0]], np.float32) + 0.25).astype(np.float32)
    # The linear branch: one fixed batch repeated, the same on both workers.
    fixed = np.random.default_rng(3)
    xl1 = fixed.normal(size=(BATCH, 3)).astype(np.float32)
    tl1 = fixed.normal(size=(BATCH, 1)).astype(np.float32)
    xl, tl = np.tile(xl1, (STEPS, 1)), np.tile(tl1, (STEPS, 1))
    g = (np.concatenate([(tl1 * xl1).mean(axis=0), [tl1.mean()]])).astype(np.float64)
    return model, (xr, xl), (yr, tl), g


def linear_loss(t, y):
    return tf.reduce_mean(t * y, axis=-1)


def lin_weights(model):
    layer = model.get_layer("lin")
    k, b = layer.get_weights()
    return np.concatenate([k.reshape(-1), b.reshape(-1)]).astype(np.float64)


def momentum_displacement(g, updates):
    """SGD with momentum (PyTorch's form, Keras's is equal for a constant
    lr): the total change after `updates` steps of the constant gradient g."""
    buf, total = np.zeros_like(g), np.zeros_like(g)
    for t in range(updates):
        buf = g.copy() if t == 0 else MOMENTUM * buf + g
        total -= LR * buf
    return total


def regression_loss(model, x, y):
    pred = model.predict(x, batch_size=len(x[0]), verbose=0)[0]
    return float(np.mean((pred - y[0]) ** 2))


def lars_sync(w0, g, updates):
    """sync with kolo.keras.lr.LARS around SGD(momentum): the linear
    branch's kernel (w0[:3]) steps on LARS's gradient (kolo.lr.LARS's
    formula), its bias (1-D) on g; the servers' SGD with momentum."""
    w, buf = w0.copy(), None
    for t in range(updates):
        k, gk = w[:3], g[:3]
        wn, gn = np.linalg.norm(k), np.linalg.norm(gk)
        trust = LARS_ETA * wn / (gn + LARS_WD * wn + 1e-9)
        d = np.concatenate([trust * (gk + LARS_WD * k), g[3:]])
        buf = d if t == 0 else MOMENTUM * buf + d
        w = w - LR * buf
    return w


def not_lin_kernel(v):
    """LARS adapts the linear branch's kernel only."""
    name = getattr(v, "path", None) or v.name
    return not name.startswith("lin/kernel")


def all_weights(model):
    return np.concatenate([w.reshape(-1) for w in model.get_weights()]).astype(np.float32)


def run(mode):
    """Trains in mode and checks (the module's documentation)."""
    assert kolo.size() == 2, "expected 2 workers, got %d" % kolo.size()
    if mode == "sync":
        bad_arguments()
    model, x, y, g = model_and_data()
    kwargs = {}
    if mode == "downpour":
        kwargs = {"staleness_bound": 1000}
    if mode == "easgd":
        kwargs = {"easgd_alpha": 0.3, "easgd_period": 2}
    sgd = keras.optimizers.SGD(LR, momentum=MOMENTUM)
    if mode == "sync":  # the worker computes LARS's gradients, the servers SGD's step
        sgd = klr.LARS(sgd, eta=LARS_ETA, weight_decay=LARS_WD, exclude=not_lin_kernel)
    opt = ps.DistributedOptimizer(sgd, mode=mode, **kwargs)
    model.compile(optimizer=opt, loss=["mse", linear_loss])
    # The servers start at the first fit, from worker 0's weights; the
    # linear branch's starting point w0 is worker 0's initial one.
    w0_mine = lin_weights(model)
    w0 = knp.broadcast(w0_mine, root_rank=0, name="w0")
    loss_before = regression_loss(model, x, y)
    hist = model.fit(x, y, batch_size=BATCH, epochs=1, shuffle=False, verbose=0)
    if model.optimizer is not opt:
        fail("model.optimizer is not the wrapped optimizer")
    if int(opt.iterations.numpy()) != STEPS:
        fail("iterations %d, expected %d" % (int(opt.iterations.numpy()), STEPS))
    w = lin_weights(model)
    if mode == "sync":
        expected = lars_sync(w0, g, STEPS)
    elif mode == "downpour":
        opt.pull()  # the servers' final parameters, once both workers pushed
        knp.barrier()
        opt.pull()
        w = lin_weights(model)
        expected = w0 + momentum_displacement(g, 2 * STEPS)
        st = ps.stats()[0]
        if st["updates"] != 2 * STEPS or st["rejected"] != 0 or \
                st["pushes"] != [STEPS, STEPS]:
            fail("server stats %r, expected %d updates of 2 x %d pushes"
                 % (st, 2 * STEPS, STEPS))
    else:  # easgd: center + x_0 + x_1 conserved by the exchanges
        mine = w.copy()
        knp.barrier()  # both workers done exchanging
        opt.pull()  # the center into the model
        center = lin_weights(model)
        xs = knp.allgather(mine[None, :], name="easgd.x")
        w = center + xs.sum(axis=0)
        expected = 3 * w0 + 2 * momentum_displacement(g, STEPS)
        detail = " (center %s, workers %s, stats %s)" % (center, xs.tolist(), ps.stats())
    if not np.allclose(w, expected, rtol=1e-5, atol=1e-5):
        fail("%s: linear branch %s, expected %s (w0 %s)%s"
             % (mode, w, expected, w0, detail if mode == "easgd" else ""))
    if mode != "easgd":
        weights = knp.allgather(all_weights(model)[None, :], name="weights")
        if not np.array_equal(weights[0], weights[1]):
            fail("the workers' weights differ: %s vs %s" % (weights[0], weights[1]))
    reg_losses = hist.history.get("reg_loss") or hist.history.get("reg_mean_squared_error")
    loss_after = regression_loss(model, x, y)
    if not loss_after < 0.5 * loss_before:
        fail("the regression loss went from %g to %g (epoch losses %s)"
             % (loss_before, loss_after, reg_losses))
    return loss_before, loss_after
