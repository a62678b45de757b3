"""Memory per rank of sharded data parallelism (kolo.torch.zero), against
the formulas of docs/zero.md, for a float32 model of Ψ >= 50 M parameters
trained with Adam.

One configuration per job (peak RSS only grows):

  build/bin/kolorun -np 4 /usr/bin/python3 bench/zero_memory.py --stage 2

``--stage 0`` is plain data parallelism (kolo.torch.DistributedOptimizer).
``--driver`` runs every stage at N = 2 and 4 and prints a table (run from
the build tree's parent with PYTHONPATH=build/python).

What is measured on each rank, after two training steps:
- state bytes: the distinct storages of the parameters, gradients (at their
  largest: after synchronize(), before step()) and optimizer state;
- peak RSS over the warmed baseline: before the model is built, a warm-up
  trains a 2-layer model of the same width with the same optimizer, stage
  and collectives for two steps (so libtorch's and kolo's code and data
  that any first backward and Adam step page in, and the Python heap's
  growth, are in), is deleted, kolo's output cache is emptied, and then the
  peak (VmHWM) is reset to the current RSS (/proc/self/clear_refs) and
  that RSS is the baseline. The peak over it holds every per-model byte and
  transient: flat bucket copies, allgather outputs, activations, and for
  stage 3 the gathered units;
- peak RSS over the start-up RSS (before the warm-up), which adds that
  fixed process baseline (about 14 MB here) to the figure above;
- "not tensors": at the end, the RSS growth over the warmed baseline that
  is neither a live tensor made since then nor an idle block of kolo's
  output cache (what
  the warm-up did not page in: near 0 when the baseline is right).
Formulas (bytes): plain 16Ψ; stage 1: 4Ψ + 4Ψ + 8Ψ/N; stage 2: 4Ψ + 12Ψ/N;
stage 3: 16Ψ/N plus the gathered units (the largest and the prefetched next).
"""

import argparse
import gc
import json
import os
import resource
import subprocess
import sys

WIDTH, LAYERS = 1024, 48   # 48 x (1024*1024 + 1024) = 50.38 M parameters
BATCH = 8


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_bytes():
    """VmHWM: the peak RSS since start or the last reset_peak()."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak():
    """Resets the peak RSS to the current RSS (Linux: clear_refs 5)."""
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def build(torch, hvd, zero, stage, bucket_mb, layers):
    torch.manual_seed(0)
    model = torch.nn.Sequential(*[torch.nn.Linear(WIDTH, WIDTH) for _ in range(layers)])
    if stage == 3:
        zero.wrap(model)
    adam = torch.optim.Adam(model.parameters(), lr=1e-4)
    if stage == 0:
        opt = hvd.DistributedOptimizer(adam, named_parameters=model.named_parameters())
    else:
        opt = zero.DistributedOptimizer(adam, named_parameters=model.named_parameters(),
                                        stage=stage, bucket_mb=bucket_mb)
    return model, opt


def warm_up(torch, hvd, zero, stage, bucket_mb):
    """Two steps of a 2-layer model through the same code paths; returns
    the warmed baseline RSS, the live tensor bytes then, and whether the
    warm-up model was freed (module docstring)."""
    import weakref
    from kolo.torch import output_cache
    model, opt = build(torch, hvd, zero, stage, bucket_mb, 2)
    for _ in range(2):
        opt.zero_grad()
        model(torch.randn(BATCH, WIDTH)).pow(2).mean().backward()
        opt.step()
    gone = weakref.ref(model)
    del model, opt
    gc.collect()
    cache = output_cache.cache()
    with cache._lock:
        cache._idle.clear()
        cache._idle_bytes = 0
    gc.collect()
    live = live_tensor_bytes(torch)
    reset_peak()
    return rss_bytes(), live, gone() is None


def storage_bytes(tensors):
    seen = {}
    for t in tensors:
        if t is None or t.numel() == 0:
            continue
        s = t.storage()
        seen[s.data_ptr()] = s.nbytes() if hasattr(s, "nbytes") else s.size() * t.element_size()
    return sum(seen.values())


def live_tensor_bytes(torch):
    """The distinct storages of every tensor the Python heap reaches."""
    seen = {}
    for o in gc.get_objects():
        try:
            if torch.is_tensor(o) and o.numel():
                s = o.storage()
                seen[s.data_ptr()] = s.size() * o.element_size()
        except RuntimeError:
            pass
    return sum(seen.values())


class Probe:
    """--probe: samples the RSS growth in the optimizer's gradient hooks
    (``_launch``, ``_finish``) and stage 3's unit hooks, and in the second
    step also the live tensors and the output cache's idle blocks (slow:
    a walk of the Python heap per sample); prints the samples of largest
    RSS, which tell what is alive at the peak."""

    def __init__(self, torch, base):
        import functools
        import importlib
        from kolo.torch import output_cache
        self.torch, self.base, self.cache = torch, base, output_cache.cache()
        self.detail, self.samples = False, []
        self.opt = None
        targets = [(importlib.import_module("kolo.torch.zero.optimizer")._ZeroMixin,
                    ("_launch", "_finish")),
                   (importlib.import_module("kolo.torch.zero.wrap")._Sharded,
                    ("pre_forward", "pre_backward", "end_backward"))]
        for cls, names in targets:
            for name in names:
                f = getattr(cls, name)

                def wrapped(*a, _f=f, _name=name, **k):
                    self.mark(_name + ".in")
                    out = _f(*a, **k)
                    self.mark(_name + ".out")
                    return out
                setattr(cls, name, functools.wraps(f)(wrapped))

    def mark(self, where):
        if not self.detail:
            return
        in_flight = len(getattr(self.opt, "_handles", ()))
        self.samples.append((where, (rss_bytes() - self.base) / 2 ** 20,
                             live_tensor_bytes(self.torch) / 2 ** 20,
                             self.cache.idle_bytes() / 2 ** 20, in_flight))

    def report(self, rank):
        for s in sorted(self.samples, key=lambda s: -s[1])[:6]:
            print("ZERO_PROBE rank %d at %s: rss growth %.1f MB, live tensors %.1f MB, "
                  "idle output cache %.1f MB, reduce-scatters in flight %d" % ((rank,) + s),
                  flush=True)


def measure(stage, bucket_mb, probe=False):
    import torch
    import kolo.torch as hvd
    from kolo.torch import zero
    hvd.init()
    torch.set_num_threads(1)
    startup = rss_bytes()
    base, live_base, freed = warm_up(torch, hvd, zero, stage, bucket_mb)
    probe = Probe(torch, base) if probe else None
    model, opt = build(torch, hvd, zero, stage, bucket_mb, LAYERS)
    psi = sum(p.numel() for p in model.parameters())
    largest = max(sum(p.numel() for p in m.parameters(recurse=False)) for m in model)
    state = 0
    if probe:
        probe.opt = opt
    for step in range(2):
        if probe:
            probe.detail = step == 1
        x = torch.randn(BATCH, WIDTH)
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.synchronize()
        params = [p for p in model.parameters()]
        grads = [p.grad for p in params]
        if stage:
            shards = [t for g in opt.param_groups for t in g["params"]]
            grads += [t.grad for t in shards]
            if stage == 3:
                params = [u.shard_buf for u in model._kolo_zero.units]
        at_grads = storage_bytes(params + grads)
        del params, grads  # no reference of the bench's own may outlive the step
        shards = None
        with opt.skip_synchronize():
            opt.step()
        opt_state = storage_bytes([v for s in opt.state.values() for v in s.values()
                                   if isinstance(v, torch.Tensor) and v.dim() > 0])
        state = max(state, at_grads + opt_state)
    if probe:
        probe.detail = False
        probe.report(hvd.rank())
    # After the steps, at rest: the RSS growth that is neither a live tensor
    # nor an idle block of kolo's output cache (which keeps the gradient
    # blocks between steps): library code paged in by the first steps,
    # the Python heap, the runtime's native buffers. It does not shrink, so
    # it is part of the peak too.
    from kolo.torch import output_cache
    gc.collect()
    idle = output_cache.cache().idle_bytes()
    other = rss_bytes() - base - (live_tensor_bytes(torch) - live_base) - idle
    n = hvd.size()
    formula = {0: 16 * psi, 1: 8 * psi + 8 * psi / n, 2: 4 * psi + 12 * psi / n,
               3: 16 * psi / n}[stage]
    window = 2 * 4 * largest if stage == 3 else 0
    out = {"stage": stage, "ranks": n, "rank": hvd.rank(), "psi": psi,
           "formula_mb": formula / 2 ** 20, "window_mb": window / 2 ** 20,
           "state_mb": state / 2 ** 20, "peak_rss_mb": (peak_bytes() - base) / 2 ** 20,
           "peak_over_startup_mb": (peak_bytes() - startup) / 2 ** 20,
           "other_mb": other / 2 ** 20, "idle_cache_mb": idle / 2 ** 20,
           "warmup_freed": freed, "warmup_live_mb": live_base / 2 ** 20}
    print("ZERO_MEMORY " + json.dumps(out), flush=True)


def driver(args):
    here = os.path.dirname(os.path.abspath(__file__))
    kolorun = os.path.join(args.build, "bin", "kolorun")
    rows = []
    for n in (2, 4):
        for stage in [int(s) for s in args.stages.split(",")]:
            cmd = [kolorun, "-np", str(n), sys.executable, os.path.join(here, "zero_memory.py"),
                   "--stage", str(stage), "--bucket-mb", str(args.bucket_mb)]
            out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
            got = [json.loads(l.split("ZERO_MEMORY ", 1)[1]) for l in out.splitlines()
                   if "ZERO_MEMORY " in l]
            worst = max(got, key=lambda g: g["peak_rss_mb"])
            worst["state_mb"] = max(g["state_mb"] for g in got)
            rows.append(worst)
            print(json.dumps(worst), flush=True)
    print("| N | stage | formula MB | state MB (ratio) | peak RSS over warmed baseline MB"
          " (ratio to formula + gathered units) | not tensors MB | peak RSS over start-up"
          " MB (ratio) |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        target = r["formula_mb"] + r["window_mb"]
        print("| %d | %s | %.0f%s | %.0f (%.3f) | %.0f (%.3f) | %.1f | %.0f (%.3f) |" % (
            r["ranks"], r["stage"] or "plain", r["formula_mb"],
            " + %.0f" % r["window_mb"] if r["window_mb"] else "",
            r["state_mb"], r["state_mb"] / r["formula_mb"], r["peak_rss_mb"],
            r["peak_rss_mb"] / target, r["other_mb"], r["peak_over_startup_mb"],
            r["peak_over_startup_mb"] / target))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stage", type=int, default=1)
    ap.add_argument("--bucket-mb", type=float, default=25)
    ap.add_argument("--driver", action="store_true")
    ap.add_argument("--stages", default="0,1,2,3", help="--driver: the stages to run")
    ap.add_argument("--build", default="build")
    ap.add_argument("--probe", action="store_true",
                    help="print what is alive at the largest RSS samples of the second "
                         "step (Probe; slows the step down)")
    args = ap.parse_args()
    if args.driver:
        driver(args)
    else:
        measure(args.stage, args.bucket_mb, args.probe)


if __name__ == "__main__":
    main()
