"""Microbenchmarks of the pieces of kolo.torch's hot path (issue 15): what
one allreduce_async_ + synchronize spends in Python, piece by piece.

    /usr/bin/python3 bench/python_hotpath_micro.py torch [--rounds 7]
    build/bin/kolorun -np 1 /usr/bin/python3 bench/python_hotpath_micro.py native
    build/bin/kolorun -np 1 /usr/bin/python3 bench/python_hotpath_micro.py step

(PYTHONPATH=build/python for "native".) "torch": alternatives of the
wrapper's checks on a 4 KiB float32 tensor (device, layout, dtype, shape,
pointer, contiguity, names, registration, calls), no kolo needed.
"native": the binding's calls on one rank (allreduce_async in several
argument forms, poll, wait, release, and allreduce_submit and wait_release
when the build has them), in batches of --number operations pending at
once, as a training step has them: the submissions timed, then a poll
until all are done (untimed), then the completions timed. "step": the CPU
cost of one rank's step per operation, the same way: kolo.torch's
hvd.allreduce_async_(t, name=...) and hvd.synchronize(h) on 1,000 distinct
4 KiB tensors, next to the binding's lean calls (allreduce_submit,
wait_release) on the same tensors; "in all" is submit + synchronize, in
wall-clock time and in the calling thread's CPU time (time.thread_time_ns:
time the thread spent off the CPU, waiting for a core on a loaded
machine, is not counted).

Method: the cases are interleaved round by round (--rounds rounds) so that
a machine whose speed drifts hits them alike; the figure is each case's
median over the rounds (and the minimum), in ns per call. "torch" runs
--number calls per timing and subtracts the loop's own cost (an empty
statement). Read differences of less than ~10 ns (torch) or ~50 ns
(native) as noise on a shared machine.
"""

import argparse
import statistics
import sys
import timeit

import torch


def torch_cases():
    t = torch.zeros(1024, dtype=torch.float32)
    dtypes = {torch.float32: 0, torch.float64: 1, torch.float16: 2, torch.bfloat16: 3,
              torch.int32: 4, torch.int64: 5, torch.uint8: 6}
    g = {"t": t, "torch": torch, "dtypes": dtypes, "isinstance": isinstance,
         "Tensor": torch.Tensor, "strided": torch.strided, "f32": torch.float32,
         "name": "small0001.weight", "d": {}, "lock": __import__("threading").Lock(),
         "count": __import__("itertools").count(1), "shape": t.shape,
         "kind": "allreduce", "i": 12}
    setup = ("import collections\n"
             "Op = collections.namedtuple('Op', 'a b c')\n"
             "class S:\n"
             "    __slots__ = ('a', 'b', 'c')\n"
             "    def __init__(self, a, b, c):\n"
             "        self.a = a; self.b = b; self.c = c\n")
    return g, setup, [
        ("(empty)", "pass"),
        ("isinstance(t, Tensor)", "isinstance(t, Tensor)"),
        ("type(t) is Tensor", "type(t) is Tensor"),
        ("t.device.type != 'cpu'", "t.device.type != 'cpu'"),
        ("t.is_cuda", "t.is_cuda"),
        ("t.device", "t.device"),
        ("t.layout != strided", "t.layout != strided"),
        ("t.layout is strided", "t.layout is strided"),
        ("t.is_sparse", "t.is_sparse"),
        ("t.dtype", "t.dtype"),
        ("dtypes.get(t.dtype)", "dtypes.get(t.dtype)"),
        ("dtypes[t.dtype]", "dtypes[t.dtype]"),
        ("t.shape", "t.shape"),
        ("t.size()", "t.size()"),
        ("list(t.shape)", "list(t.shape)"),
        ("tuple(t.shape)", "tuple(t.shape)"),
        ("t.dim()", "t.dim()"),
        ("t.numel()", "t.numel()"),
        ("t.data_ptr()", "t.data_ptr()"),
        ("t.data_ptr() if t.numel() > 0 else 0", "t.data_ptr() if t.numel() > 0 else 0"),
        ("t.data_ptr() or 0 (null only when empty)", "t.data_ptr() or 0"),
        ("t.detach().data_ptr()", "t.detach().data_ptr()"),
        ("t.is_contiguous()", "t.is_contiguous()"),
        ("t.detach()", "t.detach()"),
        ("t.requires_grad", "t.requires_grad"),
        ("torch.is_grad_enabled()", "torch.is_grad_enabled()"),
        ("torch.empty(shape, dtype=f32)", "torch.empty(shape, dtype=f32)"),
        ("isinstance(name, str) and name", "isinstance(name, str) and name"),
        ("float(1.0)", "float(1.0)"),
        ("'%s.noname.%d' % (kind, i)", "'%s.noname.%d' % (kind, i)"),
        ("with lock: d[1] = 1", "with lock:\n    d[1] = 1"),
        ("d[1] = 1 (no lock)", "d[1] = 1"),
        ("next(count)", "next(count)"),
        ("S(1, 2, 3) (__slots__ class)", "S(1, 2, 3)"),
        ("(t, t, t) tuple", "(t, t, t)"),
        ("Op(1, 2, 3) namedtuple", "Op(1, 2, 3)"),
        ("lambda: t", "lambda: t"),
        ("[x] one-element list", "[t]"),
        ("f(a, b=1) python call, 1 kwarg", None),
        ("f(a, b) python call, positional", None),
        ("Horovod signature f(t, name=n) (7 params)", "f_hvd(t, name=name)"),
        ("Horovod signature f(t, None, n) positional", "f_hvd(t, None, name)"),
    ]


def native_batches(rounds, batch):
    """The binding's calls in batches of `batch` pending operations, as a
    step issues them: submit every one (timed), poll until all are done
    (untimed), then complete every one (timed). ns per operation."""
    import time

    import kolo
    from kolo import _native as n

    kolo.init()
    t = torch.zeros(1024, dtype=torch.float32)
    p = t.data_ptr()
    names = ["micro%04d.weight" % i for i in range(batch)]
    F, A = n.FLOAT32, n.AVG
    lean = hasattr(n, "wait_release")
    ns = time.perf_counter_ns

    def submit_list():
        shape = [1024]
        return [n.allreduce_async(m, p, p, shape, F, A) for m in names]

    def submit_size():
        shape = t.shape
        return [n.allreduce_async(m, p, p, shape, F, A) for m in names]

    def submit_list_from_size():
        return [n.allreduce_async(m, p, p, list(t.shape), F, A) for m in names]

    def submit_kwargs():
        shape = [1024]
        return [n.allreduce_async(m, p, p, shape, F, A, prescale=1.0, postscale=1.0,
                                  process_set=0) for m in names]

    def submit_all_positional():
        shape = [1024]
        return [n.allreduce_async(m, p, p, shape, F, A, 1.0, 1.0, 0) for m in names]

    def submit_lean_tuple():
        shape = (1024,)
        return [n.allreduce_submit(m, p, p, shape, F, A) for m in names]

    def submit_lean_size():
        shape = t.shape
        return [n.allreduce_submit(m, p, p, shape, F, A, 1.0, 1.0, 0) for m in names]

    def wait_then_release(hs):
        t0 = ns()
        for h in hs:
            n.wait(h)
        t1 = ns()
        for h in hs:
            n.release(h)
        return t1 - t0, ns() - t1

    def wait_release(hs):
        t0 = ns()
        for h in hs:
            n.wait_release(h)
        return ns() - t0, 0

    def poll_all(hs):
        t0 = ns()
        for h in hs:
            n.poll(h)
        return ns() - t0

    cases = [
        ("allreduce_async(shape list)", submit_list),
        ("allreduce_async(shape torch.Size)", submit_size),
        ("allreduce_async(list(t.shape))", submit_list_from_size),
        ("allreduce_async(+3 kwargs)", submit_kwargs),
        ("allreduce_async(9 positional)", submit_all_positional),
    ]
    if lean:
        cases += [
            ("allreduce_submit(shape tuple)", submit_lean_tuple),
            ("allreduce_submit(torch.Size, 9 positional)", submit_lean_size),
        ]
    samples = {}
    for _ in range(rounds):
        for label, submit in cases:
            t0 = ns()
            hs = submit()
            dt = ns() - t0
            while not all(n.poll(h) for h in hs):
                pass
            samples.setdefault("submit: " + label, []).append(dt / batch)
            samples.setdefault("poll (done)", []).append(poll_all(hs) / batch)
            # Completion: alternate the forms between cases.
            if lean and label.startswith("allreduce_submit"):
                w, _ = wait_release(hs)
                samples.setdefault("wait_release (done)", []).append(w / batch)
            else:
                w, r = wait_then_release(hs)
                samples.setdefault("wait (done)", []).append(w / batch)
                samples.setdefault("release (done)", []).append(r / batch)
    width = max(len(k) for k in samples)
    print("%-*s  %9s  %9s   (%d rounds of %d operations)" % (width, "case", "ns/op", "min",
                                                             rounds, batch))
    for k, v in samples.items():
        print("%-*s  %9.1f  %9.1f" % (width, k, statistics.median(v), min(v)))
    n.shutdown()


def torch_step(rounds, batch):
    """kolo.torch's allreduce_async_ + synchronize against the lean native
    calls, one rank, `batch` distinct tensors pending at once; ns per
    operation of the submit loop and of the synchronize loop (every
    operation already done)."""
    import time

    import kolo.torch as hvd
    from kolo import _native as n

    hvd.init()
    tensors = [torch.zeros(1024, dtype=torch.float32) for _ in range(batch)]
    names = ["step%04d.weight" % i for i in range(batch)]
    pairs = list(zip(tensors, names))
    F, A = n.FLOAT32, n.AVG
    ns = time.perf_counter_ns

    def torch_submit():
        return [hvd.allreduce_async_(t, name=m) for t, m in pairs]

    def torch_sync(hs):
        for h in hs:
            hvd.synchronize(h)

    def lean_submit():
        return [n.allreduce_submit(m, t.data_ptr(), t.data_ptr(), t.shape, F, A)
                for t, m in pairs]

    def lean_sync(hs):
        for h in hs:
            n.wait_release(h)

    def until_done(hs, poll):
        while not all(poll(h) for h in hs):
            pass

    cases = [("kolo.torch", torch_submit, torch_sync, hvd.poll),
             ("lean native", lean_submit, lean_sync, n.poll)]
    cpu = time.thread_time_ns
    samples = {}
    for _ in range(rounds):
        for label, submit, sync, poll in cases:
            c0, t0 = cpu(), ns()
            hs = submit()
            t1, c1 = ns(), cpu()
            until_done(hs, poll)
            c2, t2 = cpu(), ns()
            sync(hs)
            t3, c3 = ns(), cpu()
            for what, dt in (("submit", t1 - t0), ("synchronize (done)", t3 - t2),
                             ("in all", t1 - t0 + t3 - t2),
                             ("in all, thread CPU time", c1 - c0 + c3 - c2)):
                samples.setdefault("%s: %s" % (label, what), []).append(dt / batch)
    width = max(len(k) for k in samples)
    print("%-*s  %9s  %9s   (%d rounds of %d operations)" % (width, "case", "ns/op", "min",
                                                             rounds, batch))
    for k, v in samples.items():
        print("%-*s  %9.1f  %9.1f" % (width, k, statistics.median(v), min(v)))
    hvd.shutdown()


def run(cases, g, setup, number, rounds):
    def f_kw(a, b=1):
        return a

    def f_pos(a, b):
        return a

    def f_hvd(tensor, average=None, name=None, op=None, prescale_factor=1.0,
              postscale_factor=1.0, process_set=None):
        return tensor

    g = dict(g, f_kw=f_kw, f_pos=f_pos, f_hvd=f_hvd)
    stmts = []
    for label, stmt in cases:
        if stmt is None:
            stmt = "f_kw(1, b=2)" if "kwarg" in label else "f_pos(1, 2)"
        stmts.append((label, timeit.Timer(stmt, setup=setup, globals=g)))
    samples = {label: [] for label, _ in stmts}
    for _ in range(rounds):
        for label, timer in stmts:
            samples[label].append(timer.timeit(number) / number * 1e9)
    base = statistics.median(samples["(empty)"])
    width = max(len(label) for label, _ in stmts)
    print("%-*s  %9s  %9s" % (width, "case", "ns/call", "min"))
    for label, _ in stmts:
        med = statistics.median(samples[label]) - (0 if label == "(empty)" else base)
        low = min(samples[label]) - (0 if label == "(empty)" else base)
        print("%-*s  %9.1f  %9.1f" % (width, label, med, low))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("what", choices=("torch", "native", "step"))
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--number", type=int, default=0,
                   help="calls per timing (torch, default 200000) or operations per "
                        "batch (native, default 1000)")
    a = p.parse_args()
    if a.what == "torch":
        g, setup, cases = torch_cases()
        run(cases, g, setup, a.number or 200000, a.rounds)
    elif a.what == "native":
        native_batches(a.rounds, a.number or 1000)
    else:
        torch_step(a.rounds, a.number or 1000)
    return 0


if __name__ == "__main__":
    sys.exit(main())
