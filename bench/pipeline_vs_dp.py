"""Pipeline x data parallelism against plain data parallelism, on the same 4
ranks of 2 hosts x 2 (run by bench/pipeline_vs_dp.sh under kolorun -H over
two network-namespace hosts; docs/pipeline.md, "Speed: pipeline against
data parallelism (measured)").

For each model and each round, every variant runs `--warmup` untimed and
`--steps` timed training steps (SGD), the variants interleaved so that the
shared machine's load falls on all of them alike:

  local   each rank its own copy, no communication: the compute alone
  dp      kolo.torch.DistributedOptimizer over all 4 ranks (batch G/4 each)
  mesh    Mesh(stages=2, replicas=2) as built: rank r*2+s is stage s of
          replica r, so with kolorun filling hosts in order a pipeline lies
          inside one host (activations over shm) and a stage's two replicas
          on different hosts (its allreduce crosses the link)
  mesh_t  the same mesh transposed (the Mesh's process sets in swapped
          roles): a pipeline spans the two hosts (activations cross the
          link), a stage's replicas share a host (allreduce over shm)

Every variant processes the same global batch G per step (mesh: G/2 per
replica in `--mlp-chunks` / `--conv-chunks` micro-batches, 1F1B). A step's
time is taken between two barriers over all 4 ranks. Each host's eth0 byte counters (read inside
the namespace) give the bytes a step moved over the host link.

Rank 0 prints one JSON line per (model, variant) prefixed "RESULT ", and the
models' sizes prefixed "MODEL ".
"""

import argparse
import json
import statistics
import time

import torch

import kolo.torch as kolo
from kolo.torch.pipeline import Mesh, Pipeline

VARIANTS = ("local", "dp", "mesh", "mesh_t")


def wide_mlp(width, layers):
    """Large parameters, small activations: `layers` Linear(width, width)."""
    mods = []
    for _ in range(layers):
        mods += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    return torch.nn.Sequential(*mods), 2 * (layers // 2)


def conv_net(channels, classes=10):
    """Few parameters, large activations: a 3x3 convolution to `channels`
    channels at full resolution (the stage boundary), then a 1x1 one, a
    global average and a classifier."""
    mods = [torch.nn.Conv2d(3, channels, 3, padding=1), torch.nn.ReLU(),
            torch.nn.Conv2d(channels, channels // 2, 1), torch.nn.ReLU(),
            torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
            torch.nn.Linear(channels // 2, classes)]
    return torch.nn.Sequential(*mods), 2


MODELS = {
    # name: (builder, sample shape, classes)
    "wide_mlp": (lambda a: wide_mlp(a.width, a.layers), lambda a: (a.width,),
                 lambda a: a.width),
    "conv": (lambda a: conv_net(a.channels), lambda a: (3, a.image, a.image),
             lambda a: 10),
}


def link_bytes():
    """(tx, rx) of this namespace's eth0, or None outside a netns host."""
    try:
        base = "/sys/class/net/eth0/statistics/"
        with open(base + "tx_bytes") as f, open(base + "rx_bytes") as g:
            return int(f.read()), int(g.read())
    except OSError:
        return None


class Variant:
    """One way of training one model on the 4 ranks; step() is one SGD step
    on this rank's share of the global batch."""

    def __init__(self, kind, name, build, shape, classes, batch, chunks, mesh, lr):
        torch.manual_seed(1)
        model, split = build()
        self.kind = kind
        me = kolo.rank()
        self.loss_fn = torch.nn.CrossEntropyLoss()
        if kind in ("local", "dp"):
            rows = batch // kolo.size()
            self.model = model
            opt = torch.optim.SGD(model.parameters(), lr=lr)
            if kind == "dp":
                opt = kolo.DistributedOptimizer(
                    opt, named_parameters=[("%s.dp.%s" % (name, n), p)
                                           for n, p in model.named_parameters()])
            self.opt = opt
        else:
            rows = batch // mesh.replicas
            if kind == "mesh":
                pipe_set, replica_set = mesh.pipeline_set, mesh.replica_set
            else:
                pipe_set, replica_set = mesh.replica_set, mesh.pipeline_set
            self.pipe = Pipeline(model, split_points=[split], chunks=chunks,
                                 schedule="1f1b", process_set=pipe_set)
            opt = torch.optim.SGD(self.pipe.module.parameters(), lr=lr)
            self.opt = kolo.DistributedOptimizer(
                opt, named_parameters=[("%s.%s.s%d.%s" % (name, kind, self.pipe.stage, n), p)
                                       for n, p in self.pipe.module.named_parameters()],
                backward_passes_per_step=chunks, process_set=replica_set)
        gen = torch.Generator().manual_seed(100 + me)
        self.x = torch.randn((rows,) + shape, generator=gen)
        self.y = torch.randint(0, classes, (rows,), generator=gen)

    def step(self):
        if self.kind in ("local", "dp"):
            self.loss_fn(self.model(self.x), self.y).backward()
            self.opt.step()
            self.opt.zero_grad()
        else:
            self.pipe.train_step(self.x, self.loss_fn, self.y)
            self.pipe.step(self.opt)


def sizes(build, shape):
    """(parameter bytes, boundary activation bytes per sample) of a model."""
    model, split = build()
    w = sum(p.numel() * p.element_size() for p in model.parameters())
    with torch.no_grad():
        h = torch.nn.Sequential(*list(model.children())[:split])(torch.zeros((1,) + shape))
    return w, h.numel() * h.element_size()


def timed_steps(variant, warmup, steps):
    for _ in range(warmup):
        variant.step()
    times, bytes_ = [], []
    for _ in range(steps):
        kolo.barrier()
        b0 = link_bytes()
        t0 = time.perf_counter()
        variant.step()
        kolo.barrier()
        t1 = time.perf_counter()
        b1 = link_bytes()
        times.append(t1 - t0)
        if b0 is not None:
            bytes_.append((b1[0] - b0[0], b1[1] - b0[1]))
    return times, bytes_


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--models", default="wide_mlp,conv")
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--width", type=int, default=4096)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--mlp-batch", type=int, default=8)
    ap.add_argument("--mlp-chunks", type=int, default=2)
    ap.add_argument("--channels", type=int, default=16)
    ap.add_argument("--image", type=int, default=128)
    ap.add_argument("--conv-batch", type=int, default=32)
    ap.add_argument("--conv-chunks", type=int, default=4)
    ap.add_argument("--lr", type=float, default=1e-4)
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.set_flush_denormal(True)
    kolo.init()
    if kolo.size() != 4:
        raise SystemExit("pipeline_vs_dp.py: needs 4 ranks (2 hosts x 2), got %d" %
                         kolo.size())
    mesh = Mesh(stages=2, replicas=2)
    models = args.models.split(",")
    kinds = args.variants.split(",")
    for m in models:
        if m not in MODELS:
            raise SystemExit("pipeline_vs_dp.py: unknown model %r (known: %s)" %
                             (m, ", ".join(MODELS)))
    for k in kinds:
        if k not in VARIANTS:
            raise SystemExit("pipeline_vs_dp.py: unknown variant %r (known: %s)" %
                             (k, ", ".join(VARIANTS)))
    batches = {"wide_mlp": args.mlp_batch, "conv": args.conv_batch}
    chunks = {"wide_mlp": args.mlp_chunks, "conv": args.conv_chunks}
    variants, info = {}, {}
    for m in models:
        builder, shape_of, classes_of = MODELS[m]
        build, shape = (lambda b=builder: b(args)), shape_of(args)
        w, a = sizes(build, shape)
        info[m] = {"model": m, "param_bytes": w, "boundary_bytes_per_sample": a,
                   "global_batch": batches[m], "chunks": chunks[m]}
        for k in kinds:
            variants[m, k] = Variant(k, m, build, shape, classes_of(args), batches[m],
                                     chunks[m], mesh, args.lr)
    results = {key: ([], []) for key in variants}
    round_medians = {key: [] for key in variants}
    for r in range(args.rounds):
        for m in models:
            order = kinds if r % 2 == 0 else kinds[::-1]
            for k in order:
                t, b = timed_steps(variants[m, k], args.warmup, args.steps)
                results[m, k][0].extend(t)
                results[m, k][1].extend(b)
                round_medians[m, k].append(statistics.median(t))
        if kolo.rank() == 0:
            print("round %d done" % r, flush=True)
    # Bytes per step on each host link: gather every rank's counters (the two
    # ranks of a host read the same eth0), keep local rank 0's.
    mine = {"%s/%s" % key: v[1] for key, v in results.items()}
    everyone = kolo.allgather_object((kolo.local_rank(), mine))
    if kolo.rank() != 0:
        return
    for m in models:
        print("MODEL " + json.dumps(info[m]), flush=True)
    for (m, k), (times, _) in results.items():
        hosts = []
        for local, theirs in everyone:
            steps = theirs["%s/%s" % (m, k)]
            if local == 0 and steps:
                hosts.append([statistics.median(s[0] for s in steps),
                              statistics.median(s[1] for s in steps)])
        step = statistics.median(times)
        print("RESULT " + json.dumps({
            "model": m, "variant": k, "steps": len(times), "step_s": step,
            "samples_per_s": batches[m] / step,
            "round_medians_s": round_medians[m, k],
            "host_link_tx_rx_bytes_per_step": hosts}), flush=True)


if __name__ == "__main__":
    main()
