"""kolo.torch through a 1-rank NCCL communicator, for scripts/gpu-check.sh
(check nccl_1_rank; run with KOLO_DEVICE_PATH=nccl under kolorun -np 1):
an allreduce, broadcast and allgather of CUDA tensors (each result
checked) and nccl_built() (NCCL's version once libnccl.so.2 is usable as
a backend), the verdict as the last line: "PASS|FAIL nccl_built() X;
results right|WRONG".
"""

import torch

import kolo.torch as hvd


def main():
    hvd.init()
    dev = torch.device("cuda", 0)
    x = torch.arange(1000, dtype=torch.float32, device=dev)
    right = torch.equal(hvd.allreduce(x, op=hvd.Sum, name="nccl.ar").cpu(), x.cpu())
    right &= torch.equal(hvd.broadcast(x, 0, name="nccl.bc").cpu(), x.cpu())
    right &= torch.equal(hvd.allgather(x.view(10, 100), name="nccl.ag").cpu(),
                         x.view(10, 100).cpu())
    built = hvd.nccl_built()
    hvd.shutdown()
    ok = right and bool(built)
    print("%s nccl_built() %r; results %s"
          % ("PASS" if ok else "FAIL", built, "right" if right else "WRONG"), flush=True)


if __name__ == "__main__":
    main()
