"""The Python layer's cost per operation (issue 15): training steps of
1,000 in-place allreduces of 4 KiB float32 tensors through kolo.torch, as a
DistributedOptimizer step issues them, next to kolo-fusion-bench's C++ step
of the same tensors (bench/python_overhead.sh runs both in one run).

    build/bin/kolorun -np 2 /usr/bin/python3 bench/python_overhead.py \\
        [--mode torch|generic|native|lean|sketch|pyimpl] [--windows 5] [--window-time 0.5] [--json]

(PYTHONPATH=build/python.) A step, like kolo-fusion-bench --workload small:
an average allreduce of each of the 1,000 tensors (1,024 float32 values,
names small0999.weight .. small0000.weight, submitted in backward order),
then a wait for each in submission order. Modes:
  torch   hvd.allreduce_async_(t, name=...) then hvd.synchronize(h) of each
          (the Horovod API; the figure of issue 15's goal), reading tensors
          natively (kolo.torch._tensor_reader) when kolo.torch installed it
  generic as torch, with the native reader removed: the C fast path reads
          tensors through torch's Python attributes (what
          KOLO_TORCH_NATIVE_READER=0 does)
  native  kolo._native.allreduce_async(name, ptr, ptr, [1024], FLOAT32, AVG)
          then wait(h) and release(h): the binding alone, addresses and
          shapes computed once, outside the step
  lean    kolo._native.allreduce_submit(...) then wait_release(h): the lean
          entry points of the hot path (python/native/native.cc)
  sketch  a minimal wrapper of the Horovod calls over the lean entry points,
          with the checks kolo.torch makes done the cheap way (see
          make_sketch): what kolo.torch's Python could cost, for comparison
  pyimpl  kolo.torch's Python implementation of allreduce_async_ and
          synchronize (collectives._allreduce_async_py, _ops._synchronize_py),
          which the C fast path replaced in the common case: before and after
          in one run

Method (as kolo-fusion-bench): --warmup untimed steps, as many more timed to
pick rank 0's steps per window (about --window-time seconds, broadcast to
every rank), then --windows timed windows, each after a barrier; a window's
time is the maximum over the ranks; the figure is the median of the windows'
steps/s. Inside each step the submit loop and the synchronize loop are timed
apart (perf_counter_ns), reported as microseconds per operation (median of
the windows). The synchronize loop includes waiting for the collective;
"sync_done" times the same loop in extra steps where every operation has
already finished (polled first), i.e. the Python (and binding) cost of a
synchronize alone. Last, the tensors get rank-dependent values, one step
runs and every element is compared with the average over the ranks (check
"ok" or "FAIL"; exit status 1 on FAIL).

Barrier, broadcast and maximum use the synchronous calls of the world
communicator (kolo._native.barrier / broadcast / allreduce), not the runtime.
"""

import argparse
import json
import statistics
import sys
import time

import torch

import kolo.torch as hvd
from kolo import _native

TENSORS = 1000
ELEMENTS = 1024


def parse_args():
    p = argparse.ArgumentParser(
        description="Python step vs the runtime: 1,000 allreduces of 4 KiB")
    p.add_argument("--mode", choices=("torch", "generic", "native", "lean", "sketch",
                                      "pyimpl"),
                   default="torch")
    p.add_argument("--windows", type=int, default=5)
    p.add_argument("--window-time", type=float, default=0.5)
    p.add_argument("--steps", type=int, default=0,
                   help="steps per window instead of --window-time")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--done-steps", type=int, default=0,
                   help="steps of the sync_done measurement (0: one window's steps, "
                        "at most 50)")
    p.add_argument("--json", action="store_true", help="one JSON object (rank 0)")
    a = p.parse_args()
    if a.windows < 1 or a.warmup < 0 or a.steps < 0 or not 0 < a.window_time < 3600:
        p.error("--windows >= 1, --warmup >= 0, --steps >= 0, 0 < --window-time < 3600")
    return a


class World:
    """Barrier, rank 0's value and maximum over the world communicator."""

    def __init__(self):
        self._buf = torch.zeros(1, dtype=torch.float64)
        self._ptr = self._buf.data_ptr()

    def barrier(self):
        _native.barrier()

    def from_rank0(self, v):
        self._buf[0] = v
        _native.broadcast(self._ptr, 1, _native.FLOAT64, 0)
        return float(self._buf[0])

    def max(self, v):
        self._buf[0] = v
        _native.allreduce(self._ptr, self._ptr, 1, _native.FLOAT64, _native.MAX)
        return float(self._buf[0])


def make_sketch():
    """allreduce_async_(tensor, name) and synchronize(handle) as a lean
    kolo.torch could write them: the same checks (a CPU, strided tensor of
    a reducible dtype, a str name), each in its cheapest form, no detach(),
    the tensor's own shape (torch.Size) and address passed on, and the
    native handle as the Python handle in a dict (a dict's setitem and pop
    are atomic under the GIL: no lock). Non-contiguous and empty tensors
    and the other options are left out: a real wrapper takes a slower path
    for them. Not a replacement of kolo.torch; a yardstick."""
    Tensor, strided = torch.Tensor, torch.strided
    codes = {torch.float32: _native.FLOAT32, torch.float64: _native.FLOAT64,
             torch.float16: _native.FLOAT16, torch.bfloat16: _native.BFLOAT16,
             torch.int32: _native.INT32, torch.int64: _native.INT64,
             torch.uint8: _native.UINT8}
    submit, wait_release, avg = _native.allreduce_submit, _native.wait_release, _native.AVG
    pending = {}

    def allreduce_async_(tensor, name):
        if not isinstance(tensor, Tensor) or not isinstance(name, str):
            raise TypeError("allreduce_async_: a tensor and a str name")
        code = codes.get(tensor.dtype)
        if code is None or tensor.is_cuda or tensor.layout is not strided \
                or not tensor.is_contiguous():
            raise ValueError("allreduce_async_ '%s': not in this sketch" % name)
        ptr = tensor.data_ptr()
        h = submit(name, ptr, ptr, tensor.shape, code, avg)
        pending[h] = tensor
        return h

    def synchronize(handle):
        tensor = pending.pop(handle)
        wait_release(handle)
        return tensor

    return allreduce_async_, synchronize


def make_step(mode, tensors, names, times):
    """The step function of ``mode``; it adds the submit and synchronize
    loops' nanoseconds to times[0] and times[1]. Returns (step, submit,
    finish): submit() returns what finish(handles) completes, for the
    sync_done measurement."""
    ns = time.perf_counter_ns
    pairs = list(zip(tensors, names))

    if mode in ("torch", "generic", "sketch", "pyimpl"):
        if mode in ("torch", "generic"):
            submit_one, sync_one, poll_one = hvd.allreduce_async_, hvd.synchronize, hvd.poll
        elif mode == "pyimpl":
            from kolo import _ops
            from kolo.torch import collectives
            submit_one, sync_one = collectives._allreduce_async_py, _ops._synchronize_py
            poll_one = hvd.poll
        else:
            if not hasattr(_native, "wait_release"):
                sys.exit("python_overhead.py: --mode sketch needs kolo._native."
                         "allreduce_submit and wait_release (a newer build)")
            submit_one, sync_one = make_sketch()
            poll_one = _native.poll

        def submit():
            return [submit_one(t, name=n) for t, n in pairs]

        def finish(handles):
            for h in handles:
                sync_one(h)

        def done(handles):
            return all(poll_one(h) for h in handles)
    else:
        ptrs = [t.data_ptr() for t in tensors]
        args = [(n, p, p) for n, p in zip(names, ptrs)]
        shape = [ELEMENTS]
        f32, avg = _native.FLOAT32, _native.AVG
        if mode == "native":
            submit_one = _native.allreduce_async
            wait, release = _native.wait, _native.release

            def submit():
                return [submit_one(n, s, r, shape, f32, avg) for n, s, r in args]

            def finish(handles):
                for h in handles:
                    wait(h)
                    release(h)
        else:
            if not hasattr(_native, "wait_release"):
                sys.exit("python_overhead.py: --mode lean needs kolo._native."
                         "allreduce_submit and wait_release (a newer build)")
            submit_one = _native.allreduce_submit
            wait_release = _native.wait_release
            shape = (ELEMENTS,)

            def submit():
                return [submit_one(n, s, r, shape, f32, avg) for n, s, r in args]

            def finish(handles):
                for h in handles:
                    wait_release(h)

        def done(handles):
            return all(_native.poll(h) for h in handles)

    def step():
        t0 = ns()
        handles = submit()
        t1 = ns()
        finish(handles)
        t2 = ns()
        times[0] += t1 - t0
        times[1] += t2 - t1

    return step, submit, finish, done


def fill(tensors, rank):
    """Rank r's value at element j of tensor i: (3r + i + j) % 11, as
    kolo-fusion-bench's inputValue (i counts in submission order)."""
    j = torch.arange(ELEMENTS, dtype=torch.int64)
    with torch.no_grad():
        for i, t in enumerate(tensors):
            t.copy_((3 * rank + i + j) % 11)


def verify(tensors, names, size):
    j = torch.arange(ELEMENTS, dtype=torch.int64)
    for i, t in enumerate(tensors):
        want = sum(((3 * r + i + j) % 11).to(torch.float64) for r in range(size)) / size
        bad = ((t.to(torch.float64) - want).abs() > 1e-5 * want.abs().clamp(min=1.0))
        if bool(bad.any()):
            k = int(bad.nonzero()[0, 0])
            return ("'%s' (%d floats): wrong average at index %d: expected %g, got %g"
                    % (names[i], ELEMENTS, k, float(want[k]), float(t[k])))
    return ""


def main():
    a = parse_args()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    world = World()
    # Backward order: the last layer's gradient is ready first.
    names = ["small%04d.weight" % i for i in reversed(range(TENSORS))]
    tensors = [torch.zeros(ELEMENTS, dtype=torch.float32) for _ in names]
    fill(tensors, rank)
    times = [0, 0]
    if a.mode == "generic":
        _native.set_tensor_reader(None)
    step, submit, finish, done = make_step(a.mode, tensors, names, times)

    for _ in range(a.warmup):
        step()
    steps = a.steps
    if steps == 0:
        calibrate = max(1, a.warmup)
        t0 = time.perf_counter()
        for _ in range(calibrate):
            step()
        per_step = (time.perf_counter() - t0) / calibrate
        steps = int(world.from_rank0(max(1, min(1e7, -(-a.window_time // per_step)))))

    per_second, submit_us, sync_us = [], [], []
    for _ in range(a.windows):
        times[0] = times[1] = 0
        world.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            step()
        seconds = world.max(time.perf_counter() - t0)
        per_second.append(steps / seconds if seconds > 0 else 0.0)
        submit_us.append(times[0] / 1e3 / steps / TENSORS)
        sync_us.append(times[1] / 1e3 / steps / TENSORS)

    # Synchronize alone: every operation finished before the timed loop.
    done_steps = a.done_steps or min(steps, 50)
    done_ns = []
    world.barrier()
    for _ in range(done_steps):
        handles = submit()
        while not done(handles):
            pass
        t0 = time.perf_counter_ns()
        finish(handles)
        done_ns.append(time.perf_counter_ns() - t0)

    fill(tensors, rank)
    step()
    bad = verify(tensors, names, size)
    if bad:
        print("python_overhead.py: rank %d: %s" % (rank, bad), file=sys.stderr, flush=True)
    ok = world.max(1.0 if bad else 0.0) == 0.0

    med = statistics.median(per_second)
    rec = {
        "tool": "python_overhead.py", "case": "python-" + a.mode, "workload": "small",
        "ranks": size, "tensors": TENSORS, "bytes": TENSORS * ELEMENTS * 4,
        "steps": steps, "windows": [round(v, 3) for v in per_second],
        "steps_per_s": round(med, 3), "step_ms": round(1e3 / med if med else 0, 4),
        "submit_us_per_op": round(statistics.median(submit_us), 3),
        "sync_us_per_op": round(statistics.median(sync_us), 3),
        "sync_done_us_per_op": round(statistics.median(done_ns) / 1e3 / TENSORS, 3),
        "check": "ok" if ok else "FAIL",
        "native_reader": bool(hvd._native_reader_active()),
    }
    if rank == 0:
        if a.json:
            print(json.dumps(rec, separators=(",", ":")), flush=True)
        else:
            print("# python_overhead.py %s: %d ranks, %d tensors of %d B\n"
                  "#   windows of %d steps (steps/s): %s\n"
                  "  python-%s  steps/s %.2f  step %.3f ms  submit %.2f us/op  "
                  "synchronize %.2f us/op (%.2f when done)  native reader %s  check %s"
                  % (a.mode, size, TENSORS, ELEMENTS * 4, steps,
                     " ".join("%.2f" % v for v in per_second), a.mode, med,
                     rec["step_ms"], rec["submit_us_per_op"], rec["sync_us_per_op"],
                     rec["sync_done_us_per_op"], rec["native_reader"], rec["check"]),
                  flush=True)
    hvd.shutdown()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
