"""kolo.torch.lms on the CPU: what the planner does to one training step of
an MLP under a byte budget (docs/lms.md, "What ran here").

For each limit (a fraction of the step's saved bytes): the peak resident
bytes by the planner's count and by the storages really held (sampled
after every save and use), the host pool's peak, how many storages moved
and how they came back (prefetched or fetched on demand), whether the
gradients equal those without LMS bit for bit, and the step time against
no LMS (CPU copies are memcpy: this is the bookkeeping's cost, not a GPU's).

  PYTHONPATH=build/python flock /work/wt/bench.lock /usr/bin/python3 bench/lms_cpu.py
"""

import argparse
import json
import time

import torch
import torch.nn as nn

from kolo.torch import lms


def mlp(width, depth):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 8))


def step(model, x, y):
    model.zero_grad(set_to_none=True)
    nn.functional.mse_loss(model(x), y).backward()
    return [p.grad.clone() for p in model.parameters()]


def timed(model, x, y, repeats):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        step(model, x, y)
        best = min(best, time.perf_counter() - t0)
    return best


def watch(handle):
    """Samples (counted, really held) after every save and use."""
    planner, acts, samples = handle.planner, handle._activations, []
    save, use = planner.save, planner.use

    def sample():
        real = sum(s.base.numel() * s.base.element_size()
                   for s in list(acts._all) if s.base is not None)
        samples.append((planner.resident, real))

    def save2(*a):
        e = save(*a)
        sample()
        return e

    def use2(e):
        use(e)
        sample()

    planner.save, planner.use = save2, use2
    return samples


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--width", type=int, default=1024)
    ap.add_argument("--depth", type=int, default=8)
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(args.rows, args.width, generator=g)
    y = torch.randn(args.rows, 8, generator=g)
    plain_model = mlp(args.width, args.depth)
    want = step(plain_model, x, y)
    plain_s = timed(plain_model, x, y, args.repeats)

    probe = mlp(args.width, args.depth)
    h = lms.enable(probe, offload=("activations",))
    step(probe, x, y)
    saved = h.stats()["peak_resident"]  # everything resident: no limit
    rows = []
    for frac in (1.0, 0.75, 0.5, 0.25, 0.1):
        for prefetch in (2,):
            model = mlp(args.width, args.depth)
            limit = None if frac == 1.0 else int(saved * frac)
            handle = lms.enable(model, limit_bytes=limit, prefetch=prefetch,
                                offload=("activations",))
            samples = watch(handle)
            got = step(model, x, y)
            st = handle.stats()
            row = {"limit_fraction": frac, "limit_bytes": limit, "prefetch": prefetch,
                   "peak_resident_counted": st["peak_resident"],
                   "peak_resident_real": max(r for _, r in samples),
                   "counted_equals_real": all(c == r for c, r in samples),
                   "peak_host_bytes": st["peak_host_bytes"],
                   "offloaded": st["offloaded"], "prefetched": st["prefetched"],
                   "fetched": st["fetched"], "saved": st["saved"],
                   "over_budget": st["over_budget"],
                   "grads_bit_identical": all(torch.equal(a, b) for a, b in zip(want, got))}
            del handle.planner.save, handle.planner.use  # the sampling off
            row["step_vs_plain"] = timed(model, x, y, args.repeats) / plain_s
            rows.append(row)
    out = {"width": args.width, "depth": args.depth, "rows": args.rows,
           "saved_bytes_per_step": saved, "plain_step_s": plain_s, "rows_": rows}
    if args.json:
        print(json.dumps(out, indent=1))
        return
    print("MLP %d x %d, batch %d, float32: %d bytes saved per step, plain step %.1f ms"
          % (args.depth, args.width, args.rows, saved, plain_s * 1e3))
    print("| limit | peak resident (counted = held) | peak host pool | moved | "
          "prefetched / on demand | grads bit-identical | step vs plain |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print("| %s | %d%s | %d | %d of %d | %d / %d | %s | %.2fx |" % (
            "none" if r["limit_bytes"] is None else
            "%d (%.0f%%)" % (r["limit_bytes"], 100 * r["limit_fraction"]),
            r["peak_resident_counted"],
            "" if r["counted_equals_real"] and r["peak_resident_real"] ==
            r["peak_resident_counted"] else " (held %d)" % r["peak_resident_real"],
            r["peak_host_bytes"], r["offloaded"], r["saved"], r["prefetched"],
            r["fetched"], "yes" if r["grads_bit_identical"] else "NO",
            r["step_vs_plain"]))


if __name__ == "__main__":
    main()
