"""kolo.tensorflow above the op layer, on 2 (or more) ranks: the
distributed tape (eager and tf.function, groups, backward_passes_per_step,
local sources), DistributedOptimizer (eager, and a TF1 graph with
backward_passes_per_step), broadcast_variables (eager, in place, TF1 graph),
object broadcast and gather, fp16 compression, tf.IndexedSlices,
SyncBatchNormalization against BatchNormalization over the concatenated
batch (rank r holds r + 2 rows), the elastic states (commit, restore, sync)
and the run loop, and the errors of bad arguments.

  build/bin/kolorun -np 2 .venv/bin/python tests/python/tf_api.py
  (PYTHONPATH=build/python; pytest runs it too.) tf_api_legacy_keras.py
  runs the Keras checks again under tf_keras (TF_USE_LEGACY_KERAS=1).
"""

import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

import kolo  # noqa: E402
import kolo.tensorflow as hvd  # noqa: E402

hvd.init()
R, N = hvd.rank(), hvd.size()
# The checks build many small models and configurations on purpose, so
# TensorFlow would warn of retracing, which one training program does not do.
tf.get_logger().setLevel("ERROR")
XS = [float(r + 1) for r in range(N)]  # rank r's input
MEAN_X = sum(XS) / N


def close(a, b, tol=1e-5):
    np.testing.assert_allclose(np.asarray(a, dtype=np.float64),
                               np.asarray(b, dtype=np.float64), rtol=tol, atol=tol)


def raises(cls, fn, text=None):
    try:
        fn()
    except cls as e:
        if text is not None:
            assert text in str(e), "%r not in %r" % (text, str(e))
        return e
    raise AssertionError("%s not raised" % cls.__name__)


# ---- the tape ---------------------------------------------------------------

def _linear_grads(tape_args, in_function):
    """loss = sum(w * x) + sum(b) * x: d/dw = x, d/db = x; returns the
    distributed gradients of w and b."""
    w = tf.Variable(tf.ones([3]))
    b = tf.Variable(tf.ones([2]))
    x = tf.constant(XS[R])

    def step():
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w * x) + tf.reduce_sum(b) * x
        tape = hvd.DistributedGradientTape(tape, **tape_args)
        return tape.gradient(loss, [w, b])

    grads = tf.function(step)() if in_function else step()
    return [g.numpy() for g in grads]


def test_tape_averages_eagerly_and_in_tf_function():
    for in_function in (False, True):
        gw, gb = _linear_grads({}, in_function)
        close(gw, [MEAN_X] * 3)
        close(gb, [MEAN_X] * 2)
        gw, gb = _linear_grads({"op": hvd.Sum}, in_function)
        close(gw, [sum(XS)] * 3)


def test_tape_groups_and_compression():
    for args in ({"groups": 1}, {"num_groups": 2}, {"compression": hvd.Compression.fp16},
                 {"gradient_predivide_factor": 2.0}):
        for in_function in (False, True):
            gw, gb = _linear_grads(args, in_function)
            close(gw, [MEAN_X] * 3, tol=1e-3)
            close(gb, [MEAN_X] * 2, tol=1e-3)
    # Groups as lists of variables (the other variables one group each).
    w, b, c = (tf.Variable(tf.ones([2])) for _ in range(3))
    x = tf.constant(XS[R])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum((w + b + c) * x)
    tape = hvd.DistributedGradientTape(tape, groups=[[w, c]])
    for g in tape.gradient(loss, [w, b, c]):
        close(g, [MEAN_X] * 2)


def test_tape_nested_sources_and_none():
    w = tf.Variable(tf.ones([2]))
    unused = tf.Variable(tf.ones([2]))
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(w) * XS[R]
    grads = hvd.DistributedGradientTape(tape).gradient(loss, {"w": w, "u": unused})
    close(grads["w"], [MEAN_X] * 2)
    assert grads["u"] is None


def test_tape_backward_passes_per_step():
    w = tf.Variable(tf.zeros([2]))
    x = tf.constant(XS[R])

    @tf.function
    def step(scale):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(w) * x * scale
        tape = hvd.DistributedGradientTape(tape, backward_passes_per_step=2,
                                           average_aggregated_gradients=True)
        g = tape.gradient(loss, [w])[0]
        return g, tape.aggregation_complete

    g, done = step(tf.constant(1.0))
    assert not bool(done)
    close(g, [0.0, 0.0])
    g, done = step(tf.constant(3.0))
    assert bool(done)
    close(g, [MEAN_X * (1.0 + 3.0) / 2] * 2)  # average over ranks and passes
    g, done = step(tf.constant(5.0))  # the sums were cleared
    assert not bool(done)
    g, done = step(tf.constant(1.0))
    close(g, [MEAN_X * 3.0] * 2)


def test_partial_tape_keeps_local_layers_local():
    dense = tf.keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    shared = tf.keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    x = tf.constant([[XS[R]]])
    with tf.GradientTape() as tape:
        loss = tf.reduce_sum(shared(dense(x)))
    tape = hvd.PartialDistributedGradientTape(tape, local_layers=dense)
    variables = dense.trainable_weights + shared.trainable_weights
    g_local, g_shared = tape.gradient(loss, variables)
    close(g_local, [[XS[R] / N]])  # local, scaled by 1/size
    close(g_shared, [[MEAN_X]])
    raises(kolo.InvalidArgumentError,
           lambda: hvd.PartialDistributedGradientTape(tape, local_layers=[object()]))


def test_tape_sparse_gradients():
    emb = tf.Variable(tf.zeros([4, 2]))
    idx = tf.constant([R % 4])
    for sparse_as_dense in (False, True):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.gather(emb, idx)) * XS[R]
        g = hvd.DistributedGradientTape(tape, sparse_as_dense=sparse_as_dense).gradient(
            loss, [emb])[0]
        assert isinstance(g, tf.IndexedSlices) != sparse_as_dense
        expected = np.zeros([4, 2])
        for r in range(N):
            expected[r % 4] += XS[r] / N
        close(tf.convert_to_tensor(g), expected)


# ---- allreduce and friends ------------------------------------------------------

def test_allreduce_compression_and_sparse():
    t = tf.fill([5], XS[R])
    out = hvd.allreduce(t, compression=hvd.Compression.fp16)
    assert out.dtype == tf.float32
    close(out, [MEAN_X] * 5, tol=1e-3)
    out = hvd.allreduce(t, op=hvd.Max, prescale_factor=2.0)
    close(out, [2 * max(XS)] * 5)
    s = tf.IndexedSlices(tf.fill([1, 3], XS[R]), tf.constant([R]), tf.constant([N, 3]))
    out = hvd.allreduce(s, op=hvd.Sum)
    close(tf.convert_to_tensor(out), [[x] * 3 for x in XS])
    raises(NotImplementedError, lambda: hvd.allreduce(s, op=hvd.Min), "Sum and Average")
    raises(NotImplementedError, lambda: hvd.allreduce(s, postscale_factor=2.0))
    raises(hvd.AdasumNotSupportedError, lambda: hvd.allreduce(t, op=hvd.Adasum))
    raises(kolo.InvalidArgumentError, lambda: hvd.allreduce(t, op=hvd.Sum, average=True))
    mixed = hvd.grouped_allreduce([t, s, t * 2], op=hvd.Sum)
    close(mixed[0], [sum(XS)] * 5)
    close(tf.convert_to_tensor(mixed[1]), [[x] * 3 for x in XS])
    close(mixed[2], [2 * sum(XS)] * 5)
    rows = hvd.reducescatter(tf.fill([2 * N, 2], XS[R]), op=hvd.Sum)
    close(rows, np.full([2, 2], sum(XS)))
    rows = hvd.grouped_reducescatter([tf.fill([N, 1], XS[R])],
                                     compression=hvd.Compression.fp16)
    close(rows[0], [[MEAN_X]], tol=1e-3)


def test_bad_arguments_are_clear_errors():
    tape = tf.GradientTape()
    raises(hvd.AdasumNotSupportedError,
           lambda: hvd.DistributedGradientTape(tape, op=hvd.Adasum), "Adasum")
    raises(kolo.InvalidArgumentError,
           lambda: hvd.DistributedGradientTape(tape, groups=0), "groups")
    raises(kolo.InvalidArgumentError,
           lambda: hvd.DistributedGradientTape(tape, op=hvd.Sum,
                                               gradient_predivide_factor=2.0),
           "gradient_predivide_factor")
    raises(kolo.InvalidArgumentError,
           lambda: hvd.DistributedGradientTape(tape, backward_passes_per_step=0),
           "backward_passes_per_step")
    raises(kolo.InvalidArgumentError,
           lambda: hvd.DistributedGradientTape(object()), "tf.GradientTape")
    raises(kolo.InvalidArgumentError, lambda: hvd.init(comm=[0, 1]), "comm")
    raises(RuntimeError, lambda: hvd.broadcast_global_variables(0), "eager")
    raises(kolo.InvalidArgumentError,
           lambda: hvd.broadcast_variables([tf.constant(1.0)], 0), "tf.Variable")


# ---- the TF1 optimizer ------------------------------------------------------

def test_distributed_optimizer_eagerly():
    w = tf.Variable([1.0, 1.0])
    opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(0.5))
    opt.minimize(lambda: tf.reduce_sum(w) * XS[R], var_list=[w])
    close(w, [1.0 - 0.5 * MEAN_X] * 2)
    raises(kolo.InvalidArgumentError, lambda: hvd.DistributedOptimizer(
        tf.compat.v1.train.GradientDescentOptimizer(0.5), backward_passes_per_step=2),
        "graph mode")


def test_distributed_optimizer_graph_mode_aggregation():
    with tf.Graph().as_default():
        w = tf.compat.v1.get_variable("w", initializer=tf.zeros([2]))
        scale = tf.compat.v1.placeholder(tf.float32, [])
        step = tf.compat.v1.train.get_or_create_global_step()
        opt = hvd.DistributedOptimizer(tf.compat.v1.train.GradientDescentOptimizer(1.0),
                                       backward_passes_per_step=2,
                                       average_aggregated_gradients=True)
        train = opt.minimize(tf.reduce_sum(w) * XS[R] * scale, global_step=step)
        bcast = hvd.broadcast_global_variables(0)
        with tf.compat.v1.Session() as sess:
            sess.run([tf.compat.v1.global_variables_initializer(),
                      tf.compat.v1.local_variables_initializer()])
            sess.run(bcast)
            sess.run(train, {scale: 1.0})
            close(sess.run(w), [0.0, 0.0])  # first pass: only summed
            sess.run(train, {scale: 3.0})
            close(sess.run(w), [-MEAN_X * 2.0] * 2)  # (1 + 3) / 2 passes
            sess.run(train, {scale: 1.0})
            close(sess.run(w), [-MEAN_X * 2.0] * 2)
            assert sess.run(step) == 3


# ---- broadcasts and objects -----------------------------------------------------

def test_broadcast_variables_and_objects():
    vs = [tf.Variable(tf.fill([3], float(R))), tf.Variable(tf.fill([2, 2], R + 10))]
    hvd.broadcast_variables(vs, root_rank=0)
    close(vs[0], [0.0] * 3)
    close(vs[1], [[10, 10], [10, 10]])
    vs = [tf.Variable(tf.fill([3], float(R)))]
    hvd.broadcast_variables(vs, root_rank=N - 1, inplace=True)
    close(vs[0], [float(N - 1)] * 3)
    hvd.broadcast_variables([], root_rank=0)
    obj = {"rank": R, "list": [1, 2]} if R == 0 else None
    assert hvd.broadcast_object(obj, root_rank=0) == {"rank": 0, "list": [1, 2]}
    assert hvd.broadcast_object_fn(root_rank=N - 1)(("x", R)) == ("x", N - 1)
    assert hvd.allgather_object({"r": R} if R else "zero") == \
        ["zero"] + [{"r": r} for r in range(1, N)]


def test_broadcast_variables_graph_mode():
    with tf.Graph().as_default():
        v = tf.compat.v1.get_variable("v", initializer=tf.fill([2], float(R)))
        op = hvd.broadcast_global_variables(N - 1)
        with tf.compat.v1.Session() as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            sess.run(op)
            close(sess.run(v), [float(N - 1)] * 2)
            assert hvd.broadcast_object(R, root_rank=0) == 0  # no session needed


# ---- SyncBatchNormalization ---------------------------------------------------

def test_sync_batch_norm_equals_batch_norm_over_the_global_batch():
    rows = [r + 2 for r in range(N)]
    start = sum(rows[:R])
    rng = np.random.RandomState(3)
    for shape in ([3], [4, 2]):  # features, or (length, channels)
        full = rng.normal(2.0, 3.0, size=[sum(rows)] + shape).astype(np.float32)
        ref = tf.keras.layers.BatchNormalization(momentum=0.5)
        sync = hvd.SyncBatchNormalization(momentum=0.5)
        expected = ref(full, training=True).numpy()[start:start + rows[R]]
        got = sync(full[start:start + rows[R]], training=True).numpy()
        close(got, expected, tol=1e-4)
        close(sync.moving_mean, ref.moving_mean, tol=1e-4)
        close(sync.moving_variance, ref.moving_variance, tol=1e-4)
        # Inference: the moving statistics, no communication.
        close(sync(full[:1], training=False), ref(full[:1], training=False), tol=1e-4)
    raises(kolo.InvalidArgumentError, lambda: hvd.SyncBatchNormalization(fused=True),
           "fused")


# ---- elastic ----------------------------------------------------------------

def test_elastic_tensorflow_state_commit_restore_sync():
    vs = [tf.Variable(tf.fill([2], float(R + 1)))]
    state = hvd.elastic.TensorFlowState(vs, epoch=10 + R)
    state.sync()
    close(vs[0], [1.0, 1.0])
    assert state.epoch == 10
    vs[0].assign([5.0, 5.0])
    state.epoch = 11
    state.restore()
    close(vs[0], [1.0, 1.0])
    assert state.epoch == 10
    vs[0].assign([7.0, 7.0])
    state.epoch = 12
    state.commit()
    vs[0].assign([9.0, 9.0])
    state.restore()
    close(vs[0], [7.0, 7.0])
    assert state.epoch == 12


def test_elastic_keras_state_and_run_loop():
    model = tf.keras.Sequential([tf.keras.Input([2]),
                                 tf.keras.layers.Dense(1, kernel_initializer="ones")])
    opt = tf.keras.optimizers.SGD(0.1, momentum=0.9)
    model.compile(optimizer=opt, loss="mse")
    model.fit(np.full([2, 2], R, np.float32), np.ones([2, 1], np.float32), verbose=0)
    state = hvd.elastic.TensorFlowKerasState(model, batch=R)
    calls = {"n": 0, "resets": 0}
    state.register_reset_callbacks([lambda: calls.__setitem__("resets", calls["resets"] + 1)])

    @hvd.elastic.run
    def train(state):
        calls["n"] += 1
        if calls["n"] == 1:
            state.batch = 99
            for v in model.variables:
                v.assign(v + 1.0)
            raise hvd.HorovodInternalError("simulated failure of a peer")
        return [v.numpy() for v in model.variables], state.batch

    weights, batch = train(state)
    assert calls == {"n": 2, "resets": 1}
    assert batch == 0  # rolled back to the commit, then rank 0's
    gathered = hvd.allgather_object([w.tolist() for w in weights])
    assert all(g == gathered[0] for g in gathered)  # synced from rank 0
    bad = tf.keras.Sequential([tf.keras.layers.Dense(1)])
    raises(kolo.InvalidArgumentError, lambda: hvd.elastic.TensorFlowKerasState(bad),
           "built")

    # A program error is not retried.
    @hvd.elastic.run
    def wrong(state):
        raise kolo.InvalidArgumentError("not a peer failure")
    raises(kolo.InvalidArgumentError, lambda: wrong(state))


def main(names=None):
    tests = [(k, v) for k, v in sorted(globals().items())
             if k.startswith("test_") and callable(v) and (names is None or k in names)]
    for name, fn in tests:
        fn()
        print("rank %d: %s ok" % (R, name), flush=True)
    print("rank %d of %d: %d kolo.tensorflow API checks passed" % (R, N, len(tests)),
          flush=True)


if __name__ == "__main__":
    main(sys.argv[1:] or None)


def test_elastic_recognises_a_lost_peer_however_tensorflow_wraps_it():
    """A lost peer raised by an op eagerly ("{{function_node ...}}
    PeerLostError: ...") and inside a tf.function such as model.fit's step
    (another class, "Graph execution error:" with the op's message as a
    line) both roll the elastic loop back; other errors do not."""
    from kolo.tensorflow.elastic import _as_kolo_error
    eager = tf.errors.UnavailableError(
        None, None, "{{function_node __wrapped__KoloAllreduce_device_/job:localhost}} "
        "PeerLostError: rank 2 closed its connection")
    in_fit = tf.errors.InternalError(
        None, None, "Graph execution error:\n\nDetected at node KoloAllreduce_1\n"
        "PeerLostError: rank 2 closed its connection\n\t [[{{node KoloAllreduce_1}}]]")
    silent = tf.errors.InternalError(None, None, "Graph execution error:\n"
                                     "KoloTimeoutError: rank 1 stopped answering")
    assert type(_as_kolo_error(eager)) is kolo.PeerLostError
    assert type(_as_kolo_error(in_fit)) is kolo.PeerLostError
    assert type(_as_kolo_error(silent)) is kolo.KoloTimeoutError
    mismatch = tf.errors.FailedPreconditionError(None, None, "MismatchError: 'w' dtype")
    assert _as_kolo_error(mismatch) is None
    assert _as_kolo_error(tf.errors.InternalError(None, None, "mentions PeerLostError: x")) \
        is None
