"""kolo.keras.DistributedOptimizer on 2 ranks, under Keras 3 and tf_keras
(tf_keras_testing.run_twice): each rank has its own data, and the updates
must be the plain optimizer's updates with the gradients averaged (or
summed) over the ranks, computed here independently (allgather + NumPy).

Covers: model.fit / train_on_batch, backward_passes_per_step with and
without average_aggregated_gradients (custom loop eagerly and in
tf.function, and model.fit), op=Sum, gradients reduced exactly once when a
program calls _compute_gradients then apply_gradients, register_local_var
and PartialDistributedOptimizer, groups, sparse gradients with and without
sparse_as_dense, gradient_predivide_factor, Compression.fp16, the config
round trip, and the errors for bad arguments.

Run: build/bin/kolorun -np 2 .venv/bin/python -m pytest tests/python/tf_keras_optimizer.py
(PYTHONPATH=build/python).
"""

import sys

import numpy as np
import tensorflow as tf

from tf_keras_testing import both_flavours, main, same_on_every_rank

keras = tf.keras


def mean_over_ranks(hvd, value):
    """The average of ``value`` over the ranks, through allgather."""
    value = np.asarray(value, dtype=np.float64)
    gathered = hvd.allgather(tf.constant(value[None])).numpy()
    return gathered.mean(axis=0)


def rank_coefficients(hvd):
    r = hvd.rank()
    return tf.constant([r + 1.0, 2.0 * (r + 1), -3.0 * r])


def check_train_on_batch_applies_the_averaged_gradient(hvd):
    rng = np.random.default_rng(hvd.rank())
    x = rng.normal(size=(8, 4)).astype("float32")
    y = rng.normal(size=(8, 3)).astype("float32")

    def build():
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)])
        m.set_weights([np.linspace(-1, 1, 12).reshape(4, 3).astype("float32"),
                       np.array([0.1, 0.2, 0.3], "float32")])
        return m

    ref = build()
    with tf.GradientTape() as tape:
        loss = keras.losses.MeanSquaredError()(y, ref(x))
    grads = [mean_over_ranks(hvd, g) for g in tape.gradient(loss, ref.trainable_variables)]
    expected = [w - 0.1 * g for w, g in zip(ref.get_weights(), grads)]

    model = build()
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.1))
    model.compile(optimizer=opt, loss=keras.losses.MeanSquaredError())
    model.train_on_batch(x, y)
    for got, want in zip(model.get_weights(), expected):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    model.fit(x, y, batch_size=4, epochs=2, verbose=0)
    same_on_every_rank(hvd, model.get_weights(), "weights after fit")


def linear_step(opt, v, c, in_function):
    def loss():
        return tf.reduce_sum(v * c)

    def step():
        opt.apply_gradients(opt._compute_gradients(loss, [v]))

    (tf.function(step) if in_function else step)()


def check_backward_passes_per_step(hvd):
    mean_c = mean_over_ranks(hvd, rank_coefficients(hvd))
    for average, in_function in ((False, False), (True, True)):
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), backward_passes_per_step=3,
                                       average_aggregated_gradients=average)
        v = tf.Variable([0.0, 0.0, 0.0])
        c = rank_coefficients(hvd)

        def step():
            opt.apply_gradients(opt._compute_gradients(lambda: tf.reduce_sum(v * c), [v]))

        step = tf.function(step) if in_function else step
        for k in range(1, 7):
            step()
            per_update = mean_c if average else 3 * mean_c
            np.testing.assert_allclose(v.numpy(), -(k // 3) * per_update, rtol=1e-6,
                                       err_msg="pass %d average=%s" % (k, average))
            assert int(opt.iterations.numpy()) == k, (k, opt.iterations.numpy())
            assert int(opt._agg_helper.counter.numpy()) == k % 3


def check_backward_passes_in_fit(hvd):
    n = hvd.size()
    x = np.full((8, 4), hvd.rank() + 1.0, "float32")
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, use_bias=False)])
    model.set_weights([np.zeros((4, 1), "float32")])
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(0.5), backward_passes_per_step=2)
    # d(mean(pred))/d(kernel) = the rows' mean = rank + 1: constant.
    model.compile(optimizer=opt, loss=lambda y, p: tf.reduce_mean(p))
    model.fit(x, np.zeros((8, 1), "float32"), batch_size=2, epochs=1, verbose=0, shuffle=False)
    assert int(opt.iterations.numpy()) == 4
    assert int(opt._agg_helper.counter.numpy()) == 0
    mean_g = (n + 1) / 2.0
    np.testing.assert_allclose(model.get_weights()[0], np.full((4, 1), -0.5 * 2 * 2 * mean_g),
                               rtol=1e-6)


def check_sum_and_reduced_once(hvd):
    c = rank_coefficients(hvd)
    total = mean_over_ranks(hvd, c) * hvd.size()
    for in_function in (False, True):
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Sum)
        v = tf.Variable([0.0, 0.0, 0.0])
        linear_step(opt, v, c, in_function)  # _compute_gradients reduces, apply_gradients must not
        np.testing.assert_allclose(v.numpy(), -total, rtol=1e-6)
        # Local gradients handed to apply_gradients are reduced there.
        w = tf.Variable([0.0, 0.0, 0.0])
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * c)
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), op=hvd.Sum)
        opt.apply_gradients(zip(tape.gradient(loss, [w]), [w]))
        np.testing.assert_allclose(w.numpy(), -total, rtol=1e-6)


def check_local_variables(hvd):
    n = hvd.size()
    c = rank_coefficients(hvd)
    mean_c = mean_over_ranks(hvd, c)
    opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0))
    shared, local = tf.Variable([0.0, 0.0, 0.0]), tf.Variable([0.0, 0.0, 0.0])
    opt.register_local_var(local)
    opt.apply_gradients(opt._compute_gradients(
        lambda: tf.reduce_sum(shared * c) + tf.reduce_sum(local * c), [shared, local]))
    np.testing.assert_allclose(shared.numpy(), -mean_c, rtol=1e-6)
    np.testing.assert_allclose(local.numpy(), -c.numpy() / n, rtol=1e-6)

    # PartialDistributedOptimizer: the first layer is local.
    x = np.full((2, 3), hvd.rank() + 1.0, "float32")
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2), keras.layers.Dense(1)])
    with tf.GradientTape(persistent=True) as tape:
        loss = tf.reduce_mean(model(x))
    own = tape.gradient(loss, model.trainable_weights)
    popt = hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0),
                                           local_layers=[model.layers[0]])
    pairs = popt._compute_gradients(loss, model.trainable_weights, tape=tape)
    local_ids = {id(v) for v in model.layers[0].trainable_weights}
    for (g, v), mine in zip(pairs, own):
        if id(v) in local_ids:
            np.testing.assert_allclose(g.numpy(), mine.numpy() / n, rtol=1e-6)
        else:
            np.testing.assert_allclose(g.numpy(), mean_over_ranks(hvd, mine), rtol=1e-5)
    try:
        hvd.PartialDistributedOptimizer(keras.optimizers.SGD(1.0), local_layers=["dense"])
        raise AssertionError("a local layer that is not a layer was accepted")
    except ValueError as e:
        assert "local_layers" in str(e)


def check_groups_predivide_fp16(hvd):
    cs = [rank_coefficients(hvd) * (i + 1) for i in range(3)]
    means = [mean_over_ranks(hvd, c) for c in cs]
    for kwargs, tol in (({"groups": 2}, 1e-6), ({"num_groups": 3}, 1e-6),
                        ({"groups": "list"}, 1e-6), ({"gradient_predivide_factor": 2.0}, 1e-6),
                        ({"compression": hvd.Compression.fp16}, 1e-2)):
        vs = [tf.Variable([0.0, 0.0, 0.0]) for _ in cs]
        if kwargs.get("groups") == "list":
            kwargs = {"groups": [[vs[0], vs[2]]]}
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), **kwargs)
        opt.apply_gradients(opt._compute_gradients(
            lambda: tf.add_n([tf.reduce_sum(v * c) for v, c in zip(vs, cs)]), vs))
        for v, m in zip(vs, means):
            np.testing.assert_allclose(v.numpy(), -m, rtol=tol, atol=tol, err_msg=str(kwargs))


def check_sparse_gradients(hvd):
    r = hvd.rank()
    ids = np.array([[r, 3], [5, r + 1]], "int32")
    coeff = tf.constant(np.arange(2 * 2 * 4, dtype="float32").reshape(2, 2, 4) * (r + 1))
    for sparse_as_dense in (False, True):
        emb = keras.layers.Embedding(8, 4)
        emb.build((None, 2))
        table = emb.embeddings
        table.assign(np.zeros((8, 4), "float32"))
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(emb(ids) * coeff)
        own = tape.gradient(loss, [table])[0]
        assert isinstance(own, tf.IndexedSlices), type(own)
        expected = -mean_over_ranks(hvd, tf.convert_to_tensor(own))
        opt = hvd.DistributedOptimizer(keras.optimizers.SGD(1.0), sparse_as_dense=sparse_as_dense)
        opt.apply_gradients(opt._compute_gradients(
            lambda: tf.reduce_sum(emb(ids) * coeff), [table]))
        np.testing.assert_allclose(np.asarray(table.numpy()), expected, rtol=1e-6,
                                   err_msg="sparse_as_dense=%s" % sparse_as_dense)


def check_config_and_errors(hvd):
    plain = keras.optimizers.Adam(0.003)
    opt = hvd.DistributedOptimizer(plain)
    assert type(opt).__name__ == type(plain).__name__ and isinstance(opt, type(plain))
    assert opt.get_config() == plain.get_config()
    copy = opt.from_config(opt.get_config())
    assert type(copy) is type(opt) and copy.get_config() == opt.get_config()
    bad = [({"op": hvd.Adasum}, "op must be Average or Sum"),
           ({"backward_passes_per_step": 0}, "backward_passes_per_step must be an int >= 1"),
           ({"groups": -1}, "groups must be a positive int"),
           ({"op": hvd.Sum, "gradient_predivide_factor": 2.0}, "gradient_predivide_factor needs"),
           ({"groups": 2, "num_groups": 2}, "not both")]
    for kwargs, message in bad:
        try:
            hvd.DistributedOptimizer(keras.optimizers.SGD(0.1), **kwargs)
        except ValueError as e:
            assert message in str(e), (kwargs, str(e))
        else:
            raise AssertionError("accepted %s" % kwargs)
    try:
        hvd.DistributedOptimizer(opt)
    except ValueError as e:
        assert "already a DistributedOptimizer" in str(e)
    else:
        raise AssertionError("wrapped twice")


CHECKS = [check_train_on_batch_applies_the_averaged_gradient, check_backward_passes_per_step,
          check_backward_passes_in_fit, check_sum_and_reduced_once, check_local_variables,
          check_groups_predivide_fp16, check_sparse_gradients, check_config_and_errors]

test_keras_3, test_tf_keras = both_flavours(CHECKS, "tf_keras_optimizer", __file__)

if __name__ == "__main__":
    sys.exit(main(CHECKS, "tf_keras_optimizer"))
