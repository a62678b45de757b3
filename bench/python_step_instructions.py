"""One rank's step of 1,000 in-place allreduces of 4 KiB, for counting
instructions under callgrind (bench/python_step_instructions.sh runs it).

    python_step_instructions.py torch|generic|lean|pyimpl STEPS

torch: hvd.allreduce_async_(t, name=...) for each tensor, then
hvd.synchronize(h) for each (tensors read natively, by
kolo.torch._tensor_reader, when kolo.torch installed it); generic: the same
with the native reader removed (tensors read through torch's Python
attributes, as KOLO_TORCH_NATIVE_READER=0); lean: the binding's allreduce_submit and
wait_release on the same tensors; pyimpl: as torch, through kolo.torch's
Python implementation (collectives._allreduce_async_py,
_ops._synchronize_py), which the C fast path replaced in the common case. One warm-up step, then, under callgrind
(the environment variable KOLO_CALLGRIND set), instrumentation is switched
on for STEPS steps only (callgrind_control -i on/off), so kolo.init, the
imports and the shutdown are not counted.
"""

import os
import subprocess
import sys

import torch

import kolo.torch as hvd
from kolo import _native as n


def main():
    mode, steps = sys.argv[1], int(sys.argv[2])
    if mode not in ("torch", "generic", "lean", "pyimpl"):
        raise SystemExit("mode must be torch, generic, lean or pyimpl, got %r" % mode)
    if mode == "generic":
        n.set_tensor_reader(None)
    print("native reader: %s" % ("yes" if hvd._native_reader_active() else "no"),
          flush=True)
    hvd.init()
    tensors = [torch.ones(1024, dtype=torch.float32) for _ in range(1000)]
    pairs = list(zip(tensors, ["step%04d.weight" % i for i in range(1000)]))
    F, A = n.FLOAT32, n.AVG
    submit_one, sync_one = hvd.allreduce_async_, hvd.synchronize
    if mode == "pyimpl":
        from kolo import _ops
        from kolo.torch import collectives
        submit_one, sync_one = collectives._allreduce_async_py, _ops._synchronize_py

    def step():
        if mode == "lean":
            hs = [n.allreduce_submit(m, t.data_ptr(), t.data_ptr(), t.shape, F, A)
                  for t, m in pairs]
            for h in hs:
                n.wait_release(h)
        else:
            hs = [submit_one(t, name=m) for t, m in pairs]
            for h in hs:
                sync_one(h)

    def instrument(on):
        if os.environ.get("KOLO_CALLGRIND"):
            subprocess.run(["callgrind_control", "-i", "on" if on else "off",
                            str(os.getpid())], check=True, stdout=subprocess.DEVNULL)

    step()
    instrument(True)
    for _ in range(steps):
        step()
    instrument(False)
    expected = torch.ones(1024)
    if not all(torch.equal(t, expected) for t in tensors):
        raise SystemExit("wrong result")
    hvd.shutdown()


if __name__ == "__main__":
    main()
