"""kolo.torch.lms on a GPU (docs/lms.md, "What needs the GPU"): one process,
one device, about a minute on an H100/H200.

1. capped: an MLP and batch whose plain training (GPU Adam, no LMS) peaks
   at P bytes; the process is then capped with
   torch.cuda.set_per_process_memory_fraction to P / 1.5. Plain training
   must fail with out-of-memory under the cap; training with LMS
   (activations offloaded once memory_allocated passes 60% of the cap,
   optimizer state and update on the host) runs STEPS steps and its losses
   must match the uncapped plain run's within RTOL.
2. cost: a smaller batch that fits. Steps per second of plain training and
   of LMS (activations only, limit set so that about half of the saved
   activations move), and the GPU time of the copies (CUDA events on the
   copy stream): hidden = 1 - (LMS step - plain step) / copy time per step,
   clamped to [0, 1]. Also LMS with the optimizer on the host.

   python3 scripts/gpu_check/lms_gpu.py --out OUTDIR       # on the GPU
   python3 scripts/gpu_check/lms_gpu.py --out D --device cpu --small   # flow only

Writes OUTDIR/lms.json and prints one summary line starting PASS or FAIL.
"""

import argparse
import json
import os
import sys
import time

try:  # fewer fragmentation failures under the cap (torch >= 2.1)
    from importlib.metadata import version as _version
    _major, _minor = (int(x) for x in _version("torch").split(".")[:2])
    if (_major, _minor) >= (2, 1):
        os.environ.setdefault("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")
except Exception:
    pass

import torch
import torch.nn as nn

from kolo.torch import lms

STEPS = 20
RTOL = 1e-3


def make_model(width, depth, device):
    torch.manual_seed(0)
    layers = []
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 16)).to(device)


def batch(step, rows, width, device):
    g = torch.Generator(device=device).manual_seed(step)  # same batches every run
    x = torch.randn(rows, width, generator=g, device=device)
    y = torch.randn(rows, 16, generator=g, device=device)
    return x, y


def sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def train(model, opt, steps, rows, width, device, first=0):
    losses = []
    for step in range(first, first + steps):
        x, y = batch(step, rows, width, device)
        opt.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def is_oom(e):
    return isinstance(e, getattr(torch.cuda, "OutOfMemoryError", ())) or \
        "out of memory" in str(e)


def capped(args, device, report):
    width, depth, rows = args.width, args.depth, args.rows
    model = make_model(width, depth, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    plain = train(model, opt, STEPS, rows, width, device)
    del model, opt
    cap = None
    if device.type == "cuda":
        peak = torch.cuda.max_memory_allocated(device)
        total = torch.cuda.get_device_properties(device).total_memory
        cap = int(peak / 1.5)
        torch.cuda.empty_cache()
        torch.cuda.set_per_process_memory_fraction(cap / total, device)
        report.update(plain_peak_bytes=peak, cap_bytes=cap, total_bytes=total)
        # Plain training must not fit under the cap.
        model = make_model(width, depth, device)
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        try:
            train(model, opt, 1, rows, width, device)
            report["plain_under_cap"] = "ran (the cap is not binding)"
        except RuntimeError as e:
            if not is_oom(e):
                raise
            report["plain_under_cap"] = "out of memory"
        del model, opt
        torch.cuda.empty_cache()
        limit = int(cap * 0.6)
    else:
        limit = args.rows * width * 4 * depth // 3
    model = make_model(width, depth, device)
    handle = lms.enable(model, limit_bytes=limit, prefetch=2)
    opt = handle.offload_optimizer(torch.optim.Adam(model.parameters(), lr=1e-4))
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    t0 = time.perf_counter()
    got = train(model, opt, STEPS, rows, width, device)
    sync(device)
    worst = max(abs(a - b) / max(abs(a), 1e-30) for a, b in zip(plain, got))
    report.update(lms_limit_bytes=limit, plain_losses=plain, lms_losses=got,
                  max_rel_loss_diff=worst, lms_seconds=time.perf_counter() - t0,
                  lms_stats=handle.stats())
    if device.type == "cuda":
        report["lms_peak_bytes"] = torch.cuda.max_memory_allocated(device)
        torch.cuda.set_per_process_memory_fraction(1.0, device)
    handle.disable()
    del model, opt
    ok = worst <= RTOL and (cap is None or report["plain_under_cap"] == "out of memory")
    return ok


def timed_steps(model, opt, rows, width, device, warm, steps, mover=None):
    train(model, opt, warm, rows, width, device)
    sync(device)
    if mover is not None and hasattr(mover, "reset_timing"):
        mover.reset_timing()
    t0 = time.perf_counter()
    train(model, opt, steps, rows, width, device, first=warm)
    sync(device)
    return (time.perf_counter() - t0) / steps


def cost(args, device, report):
    width, depth, rows = args.width, args.depth, args.rows // 2
    warm, steps = 3, args.timed_steps
    model = make_model(width, depth, device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)
    plain = timed_steps(model, opt, rows, width, device, warm, steps)
    del model, opt
    acts = (depth + 1) * rows * width * 4  # saved storages of one step
    out = {"plain_step_s": plain, "activation_bytes": acts}
    for name, kinds in (("lms_activations", ("activations",)),
                        ("lms_activations_optimizer", ("activations", "optimizer"))):
        model = make_model(width, depth, device)
        base = 0
        if device.type == "cuda":
            sync(device)
            base = torch.cuda.memory_allocated(device)
        # Parameters, gradients and Adam state (or none on the host) + half
        # of the activations.
        extra = 4 * sum(p.numel() * 4 for p in model.parameters())
        handle = lms.enable(model, limit_bytes=base + extra + acts // 2, prefetch=2,
                            offload=kinds)
        if device.type == "cuda":
            handle.mover.timing = True
        opt = torch.optim.Adam(model.parameters(), lr=1e-4)
        if "optimizer" in kinds:
            opt = handle.offload_optimizer(opt)
        step = timed_steps(model, opt, rows, width, device, warm, steps, handle.mover)
        copy = handle.mover.copy_seconds() / steps if device.type == "cuda" else None
        row = {"step_s": step, "throughput_vs_plain": plain / step,
               "stats": handle.stats()}
        if copy:
            row["copy_s_per_step"] = copy
            row["hidden_fraction"] = min(1.0, max(0.0, 1.0 - (step - plain) / copy))
        out[name] = row
        handle.disable()
        del model, opt, handle
    report["cost"] = out
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--small", action="store_true", help="tiny sizes (flow check)")
    args = ap.parse_args()
    args.width, args.depth, args.rows, args.timed_steps = 2048, 16, 16384, 10
    if args.small:
        args.width, args.depth, args.rows, args.timed_steps = 64, 4, 256, 2
    device = torch.device(args.device)
    if device.type == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    os.makedirs(args.out, exist_ok=True)
    report = {"torch": torch.__version__, "device": str(device), "width": args.width,
              "depth": args.depth, "rows": args.rows, "steps": STEPS, "rtol": RTOL}
    if device.type == "cuda":
        report["gpu"] = torch.cuda.get_device_name(device)
    ok = capped(args, device, report)
    ok = cost(args, device, report) and ok
    with open(os.path.join(args.out, "lms.json"), "w") as f:
        json.dump(report, f, indent=1, default=str)
    c = report["cost"]
    hid = c["lms_activations"].get("hidden_fraction")
    print("%s capped: plain peak %s B, cap %s B, plain under cap: %s, LMS %d steps max "
          "rel loss diff %.2e (tol %g); cost: LMS activations %.3fx plain throughput, "
          "copies %s hidden; with optimizer on host %.3fx" % (
              "PASS" if ok else "FAIL", report.get("plain_peak_bytes"),
              report.get("cap_bytes"), report.get("plain_under_cap"), STEPS,
              report["max_rel_loss_diff"], RTOL,
              c["lms_activations"]["throughput_vs_plain"],
              "%.0f%%" % (100 * hid) if hid is not None else "n/a",
              c["lms_activations_optimizer"]["throughput_vs_plain"]))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
