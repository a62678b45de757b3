"""ResNet-50 synthetic training through two device paths in one run, for
scripts/gpu-check.sh (check resnet50_ipc_staged): every rank (2 sharing
one GPU under the check) trains torchvision's ResNet-50 (resnet50_synthetic's,
defined there when torchvision is missing), batch 64 per rank, random images
and labels on the GPU, SGD through kolo.torch.DistributedOptimizer. Rounds
alternate between the paths (--paths, default ipc then staged): each round
sets KOLO_DEVICE_PATH, starts kolo (hvd.init(), which chooses the path),
runs --warmup untimed steps, then times --steps steps between CUDA
synchronizations (and a barrier, so the slowest rank counts), and shuts
kolo down. One model and optimizer serve every round: the paths reduce the
same gradients and only the reduction differs. Figures: images/s of the
job (every rank's batch) per path, the medians of its rounds, and the
ratio first path / last path; the last line (rank 0) is the verdict,
"PASS|FAIL <figures>": PASS when the ratio is at least --min-ratio (1.0:
the first path is not slower).

    kolorun -np 2 python3 scripts/gpu_check/resnet50_paths.py --json OUT
    # without a GPU (the script's own test): --device cpu --model small
"""

import argparse
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from resnet50_synthetic import resnet50  # noqa: E402


def small_model():
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, 2), torch.nn.ReLU(),
                               torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                               torch.nn.Linear(8, 1000)), "small (the script's test)"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--image-size", type=int, default=224)
    p.add_argument("--steps", type=int, default=10, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=3, help="timed rounds of each path")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps per round")
    p.add_argument("--paths", default="ipc,staged")
    p.add_argument("--device", default="cuda")
    p.add_argument("--model", default="resnet50", choices=["resnet50", "small"])
    p.add_argument("--min-ratio", type=float, default=1.0)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    paths = a.paths.split(",")
    local_rank = int(os.environ.get("KOLO_LOCAL_RANK", "0"))
    if a.device == "cuda":
        dev = torch.device("cuda", local_rank % torch.cuda.device_count())
        torch.cuda.set_device(dev)
        torch.backends.cudnn.benchmark = True
        sync = torch.cuda.synchronize
    else:
        dev, sync = torch.device("cpu"), (lambda: None)
    torch.manual_seed(0)
    model, source = resnet50() if a.model == "resnet50" else small_model()
    model = model.to(dev)
    data = torch.randn(a.batch_size, 3, a.image_size, a.image_size, device=dev)
    target = torch.randint(0, 1000, (a.batch_size,), device=dev)
    opt = None
    rates = {path: [] for path in paths}

    def step():
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    for _ in range(a.rounds):
        for path in paths:
            os.environ["KOLO_DEVICE_PATH"] = path
            hvd.init()
            if opt is None:  # the first round: one optimizer for every round
                hvd.broadcast_parameters(model.state_dict(), root_rank=0)
                opt = hvd.DistributedOptimizer(
                    torch.optim.SGD(model.parameters(), lr=0.01),
                    named_parameters=model.named_parameters())
            for _ in range(a.warmup):
                step()
            sync()
            hvd.allreduce(torch.zeros(1), name="resnet50_paths.barrier")
            t = time.perf_counter()
            for _ in range(a.steps):
                step()
            sync()
            elapsed = hvd.allreduce(torch.tensor([time.perf_counter() - t]),
                                    op=hvd.Max, name="resnet50_paths.time").item()
            rates[path].append(a.batch_size * hvd.size() * a.steps / elapsed)
            # Every rank holds the same model (the reductions agreed).
            first = next(model.parameters()).detach().double().sum()
            spread = hvd.allreduce(first.cpu().view(1), op=hvd.Max, name="rp.max") - \
                hvd.allreduce(first.cpu().view(1), op=hvd.Min, name="rp.min")
            assert spread.item() == 0, "ranks' models differ after %s steps" % path
            size = hvd.size()
            hvd.shutdown()
    record = {"model": "resnet50 (%s)" % source if a.model == "resnet50" else source,
              "batch_size": a.batch_size, "ranks": size, "steps": a.steps,
              "rounds": a.rounds, "paths": paths,
              "img_s": {path: statistics.median(r) for path, r in rates.items()},
              "rounds_img_s": rates,
              "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
              "torch": torch.__version__}
    record["ratio"] = record["img_s"][paths[0]] / record["img_s"][paths[-1]]
    if local_rank == 0:
        print(json.dumps(record), flush=True)
        if a.json:
            with open(a.json, "w") as f:
                json.dump(record, f)
        fast, slow = paths[0], paths[-1]
        print("%s %d ranks sharing the GPU, batch %d each: %s %.1f img/s, %s %.1f img/s "
              "(%.2fx, >= %.2f wanted; medians of %d alternating rounds of %d steps; %s)"
              % ("PASS" if record["ratio"] >= a.min_ratio else "FAIL", size,
                 a.batch_size, fast, record["img_s"][fast], slow, record["img_s"][slow],
                 record["ratio"], a.min_ratio, a.rounds, a.steps, record["model"]),
              flush=True)


if __name__ == "__main__":
    main()
