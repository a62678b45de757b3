"""A training script that knows nothing of kolo.hpo (kolo-hpo's tests):
it prints one 'FoM: <value>' line per epoch and, with --checkpoint, resumes
from and saves its state (the epochs trained so far, the progress they
made, and the --member of each run that wrote it) to that file.

    python3 hpo_fom_script.py --lr 0.1 --width 32 --act relu [--epochs 3]
            [--checkpoint FILE --member M] [--fail-if-width 8]
"""

import argparse
import json
import os
import sys
import time

p = argparse.ArgumentParser()
p.add_argument("--lr", type=float, required=True)
p.add_argument("--width", type=int, required=True)
p.add_argument("--act", required=True)
p.add_argument("--epochs", type=int, default=3)
p.add_argument("--checkpoint")
p.add_argument("--fail-if-width", type=int, default=None)
p.add_argument("--member", type=int, default=None)
p.add_argument("--sleep", type=float, default=0.0, help="seconds per epoch")
a = p.parse_args()
if a.width == a.fail_if_width:
    sys.exit("width %d is not supported" % a.width)
state = {"epochs": 0, "progress": 0.0, "writers": []}
if a.checkpoint and os.path.exists(a.checkpoint):
    with open(a.checkpoint) as f:
        state = json.load(f)
    print("resumed: writers=%s" % state["writers"], flush=True)
for _ in range(a.epochs):
    state["epochs"] += 1
    # Best at lr = 0.1 and width 32; progress accumulates over epochs (PBT).
    state["progress"] += 1.0 - abs(a.lr - 0.1) * 5 - abs(a.width - 32) / 64.0
    bonus = 0.5 if a.act == "tanh" else 0.0
    print("FoM: %.6f" % (state["progress"] + bonus), flush=True)
    time.sleep(a.sleep)
if a.checkpoint:
    state["writers"].append(a.member)
    with open(a.checkpoint, "w") as f:
        json.dump(state, f)
