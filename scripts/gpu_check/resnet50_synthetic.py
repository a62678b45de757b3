"""Horovod's synthetic benchmark shape on one rank, for scripts/gpu-check.sh
(check resnet50_synthetic): torchvision's ResNet-50 (defined here if
torchvision is missing), batch 64, random images and labels on the GPU,
SGD(lr 0.01). Two models of the same initial weights take turns in one
process: plain PyTorch (loss.backward(); opt.step()) and the same through
kolo.torch.DistributedOptimizer (every gradient through kolo's runtime on
CUDA memory, host-staged). Rounds alternate (plain, kolo, plain, ...) so
clock and thermal drift hit both alike; each round times --steps steps
between CUDA synchronizations; the figures are the medians of the rounds.

    kolorun -np 1 python3 scripts/gpu_check/resnet50_synthetic.py --json OUT
"""

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as F

import kolo.torch as hvd


def resnet50():
    try:
        import torchvision
        return torchvision.models.resnet50(), "torchvision"
    except ImportError:
        pass
    import torch.nn as nn

    class Bottleneck(nn.Module):
        def __init__(self, cin, width, stride):
            super().__init__()
            cout = width * 4
            self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
            self.bn1 = nn.BatchNorm2d(width)
            self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
            self.bn2 = nn.BatchNorm2d(width)
            self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
            self.bn3 = nn.BatchNorm2d(cout)
            self.down = None
            if stride != 1 or cin != cout:
                self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                          nn.BatchNorm2d(cout))

        def forward(self, x):
            out = F.relu(self.bn1(self.conv1(x)))
            out = F.relu(self.bn2(self.conv2(out)))
            out = self.bn3(self.conv3(out))
            return F.relu(out + (x if self.down is None else self.down(x)))

    layers = [nn.Conv2d(3, 64, 7, 2, 3, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
              nn.MaxPool2d(3, 2, 1)]
    cin = 64
    for width, blocks, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
        for i in range(blocks):
            layers.append(Bottleneck(cin, width, stride if i == 0 else 1))
            cin = width * 4
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2048, 1000)]
    return nn.Sequential(*layers), "defined here (torchvision missing)"


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--steps", type=int, default=10, help="steps per timed round")
    p.add_argument("--rounds", type=int, default=5, help="timed rounds of each")
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--json", default=None)
    a = p.parse_args()
    hvd.init()
    dev = torch.device("cuda", 0)
    torch.cuda.set_device(dev)
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    plain_model, source = resnet50()
    kolo_model, _ = resnet50()
    kolo_model.load_state_dict(plain_model.state_dict())
    plain_model, kolo_model = plain_model.to(dev), kolo_model.to(dev)
    plain_opt = torch.optim.SGD(plain_model.parameters(), lr=0.01)
    kolo_opt = hvd.DistributedOptimizer(torch.optim.SGD(kolo_model.parameters(), lr=0.01),
                                        named_parameters=kolo_model.named_parameters())
    hvd.broadcast_parameters(kolo_model.state_dict(), root_rank=0)
    data = torch.randn(a.batch_size, 3, 224, 224, device=dev)
    target = torch.randint(0, 1000, (a.batch_size,), device=dev)

    def step(model, opt):
        opt.zero_grad()
        F.cross_entropy(model(data), target).backward()
        opt.step()

    def timed(model, opt):
        torch.cuda.synchronize()
        t = time.perf_counter()
        for _ in range(a.steps):
            step(model, opt)
        torch.cuda.synchronize()
        return a.batch_size * a.steps / (time.perf_counter() - t)

    for _ in range(a.warmup):
        step(plain_model, plain_opt)
        step(kolo_model, kolo_opt)
    plain, kolo = [], []
    for _ in range(a.rounds):
        plain.append(timed(plain_model, plain_opt))
        kolo.append(timed(kolo_model, kolo_opt))
    record = {"model": "resnet50 (%s)" % source, "batch_size": a.batch_size,
              "steps": a.steps, "rounds": a.rounds,
              "plain_img_s": statistics.median(plain), "kolo_img_s": statistics.median(kolo),
              "plain_rounds": plain, "kolo_rounds": kolo,
              "device": torch.cuda.get_device_name(dev), "torch": torch.__version__}
    print(json.dumps(record), flush=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(record, f)
    hvd.shutdown()


if __name__ == "__main__":
    main()
