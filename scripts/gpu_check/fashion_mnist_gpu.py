"""Fashion-MNIST on the GPU through kolo.torch, for scripts/gpu-check.sh
(check fashion_mnist): the small CNN, the data, the sampler and the
evaluation split of examples/fashion_mnist.py (imported from there), with
the model, the gradients and the data on the rank's CUDA device; ranks
sharing one GPU all use it. Adam at 0.001 x ranks (the example's linear
scaling), batch 64 per rank. Prints and writes (--json) the test accuracy
over the full test set (each rank evaluates its part, counts summed).

    kolorun -np 2 python3 scripts/gpu_check/fashion_mnist_gpu.py --data DIR --json OUT
"""

import argparse
import importlib.util
import json
import os
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def example():
    spec = importlib.util.spec_from_file_location(
        "fashion_mnist_example", os.path.join(ROOT, "examples", "fashion_mnist.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--seed", type=int, default=42)
    p.add_argument("--json", default=None)
    p.add_argument("--device", choices=["cuda", "cpu"], default="cuda",
                   help="cpu: the same run without a GPU (to try the script)")
    p.add_argument("--max-steps", type=int, default=0, help="per epoch (0: all)")
    a = p.parse_args()
    ex = example()
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    if a.device == "cuda":
        dev = torch.device("cuda", hvd.local_rank() % torch.cuda.device_count())
        torch.cuda.set_device(dev)
    else:
        dev = torch.device("cpu")
    torch.manual_seed(a.seed)
    x, y = ex.load_fashion_mnist(a.data, train=True)
    x, y = x.to(dev), y.to(dev)
    tx, ty = ex.load_fashion_mnist(a.data, train=False)
    sampler = ex.DistributedSampler(len(y), rank, size, a.seed)
    model = ex.Cnn().to(dev)
    opt = torch.optim.Adam(model.parameters(), lr=0.001 * size)
    hvd.broadcast_parameters(model.state_dict(), root_rank=0)
    opt = hvd.DistributedOptimizer(opt, named_parameters=model.named_parameters())
    hvd.broadcast_optimizer_state(opt, root_rank=0)
    steps = sampler.num_samples // a.batch_size
    if a.max_steps:
        steps = min(steps, a.max_steps)
    start = time.time()
    for epoch in range(a.epochs):
        sampler.set_epoch(epoch)
        order = sampler.indices().to(dev)
        model.train()
        for b in range(steps):
            idx = order[b * a.batch_size:(b + 1) * a.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(model(ex.to_input(x[idx])), y[idx])
            loss.backward()
            opt.step()
        if rank == 0:
            print("epoch %d: loss %.4f (%.1f s)" % (epoch + 1, loss.item(),
                                                    time.time() - start), flush=True)
    if dev.type == "cuda":
        torch.cuda.synchronize()
    seconds = time.time() - start
    model.eval()
    lo, hi = ex.evaluation_range(len(ty), rank, size)
    with torch.no_grad():
        pred = model(ex.to_input(tx[lo:hi]).to(dev)).argmax(1).cpu()
    correct = torch.tensor([int((pred == ty[lo:hi]).sum())], dtype=torch.int64)
    correct = int(hvd.allreduce(correct, op=hvd.Sum, name="fmnist.correct").item())
    accuracy = correct / len(ty)
    record = {"ranks": size, "epochs": a.epochs, "batch_size": a.batch_size,
              "accuracy": accuracy, "seconds": seconds,
              "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu"}
    if rank == 0:
        print(json.dumps(record), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(record, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
