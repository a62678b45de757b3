#!/usr/bin/python3
"""Hyper-parameter search for the Fashion-MNIST CNN with kolo.hpo
(docs/hpo.md). Three modes, each a kolorun job:

    # TPE + median pruner, 2 teams of 2 ranks, 24 trials; trial 0 is the
    # default configuration (below), so the best is compared at equal epochs
    build/bin/kolorun -np 4 env PYTHONPATH=build/python \\
        /usr/bin/python3 examples/hpo_fashion_mnist.py search --out /tmp/hpo-fmnist

    # population-based training and random search at equal compute: 4
    # members / 4 trials, teams of 1 rank, the same epochs each
    build/bin/kolorun -np 4 ... examples/hpo_fashion_mnist.py pbt --out DIR
    build/bin/kolorun -np 4 ... examples/hpo_fashion_mnist.py random --out DIR
    PYTHONPATH=build/python /usr/bin/python3 examples/hpo_fashion_mnist.py compare --out DIR

The model is examples/fashion_mnist.py's CNN (conv 16, conv 32, a hidden
layer) with the hidden layer's width and a dropout before the last layer as
hyper-parameters; SGD with momentum. Default configuration: the example's
SGD defaults, lr 0.02, no momentum, batch 64, width 128, no dropout. To keep
a search short on a small machine each epoch is a fixed subset of
--train-size training images (default 12,000 of 60,000); the accuracy is on
the whole test set (10,000 images), split among the team's ranks. Every
mode writes OUT/<mode>.json (per trial or member: accuracy per epoch and
the wall-clock time of each) and its PNG plots.
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from fashion_mnist import DEFAULT_DATA, load_fashion_mnist, to_input  # noqa: E402

import kolo.hpo as hpo  # noqa: E402
import kolo.torch as kt  # noqa: E402

DEFAULTS = {"lr": 0.02, "momentum": 0.0, "batch_size": 64, "hidden": 128, "dropout": 0.0}


class Net(nn.Module):
    def __init__(self, hidden, dropout):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 3)
        self.conv2 = nn.Conv2d(16, 32, 3)
        self.fc1 = nn.Linear(32 * 5 * 5, hidden)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(hidden, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


class Data:
    def __init__(self, args):
        images, labels = load_fashion_mnist(args.data, train=True)
        g = torch.Generator().manual_seed(0)
        pick = torch.randperm(images.shape[0], generator=g)[:args.train_size]
        self.x, self.y = to_input(images[pick]), labels[pick]
        tx, ty = load_fashion_mnist(args.data, train=False)
        self.tx, self.ty = to_input(tx), ty


def train_epoch(model, opt, data, batch, epoch, team):
    """One epoch on this rank's shard of the subset (the team's ranks take
    disjoint shards of a permutation drawn from the epoch)."""
    model.train()
    order = torch.randperm(data.x.shape[0], generator=torch.Generator().manual_seed(epoch))
    mine = order[team.rank::team.size]
    steps = mine.shape[0] // batch
    for s in range(steps):
        idx = mine[s * batch:(s + 1) * batch]
        opt.zero_grad()
        F.cross_entropy(model(data.x[idx]), data.y[idx]).backward()
        opt.step()


def accuracy(model, data, team):
    """Test accuracy over the whole test set, each rank a part."""
    model.eval()
    n = data.tx.shape[0]
    lo, hi = n * team.rank // team.size, n * (team.rank + 1) // team.size
    with torch.no_grad():
        correct = (model(data.tx[lo:hi]).argmax(1) == data.ty[lo:hi]).sum().item()
    if team.size > 1:
        correct = kt.allreduce(torch.tensor([float(correct)]), op=kt.Sum, name="correct",
                               process_set=team.process_set).item()
    return correct / n


def build(hp, team):
    torch.manual_seed(1234)
    model = Net(int(hp["hidden"]), float(hp["dropout"]))
    opt = torch.optim.SGD(model.parameters(), lr=hp["lr"], momentum=hp["momentum"])
    if team.size > 1:
        kt.broadcast_parameters(model.state_dict(), root_rank=team.leader,
                                process_set=team.process_set)
        opt = kt.DistributedOptimizer(opt, named_parameters=model.named_parameters(),
                                      process_set=team.process_set)
    return model, opt


def search(args, data):
    study = hpo.Study("fmnist", storage="sqlite:///%s/search.db" % args.out, sampler="tpe",
                      pruner="median", team_size=2, resume=args.resume)
    study.enqueue_trial(DEFAULTS)
    t0 = time.time()

    def objective(trial, team):
        hp = {"lr": trial.suggest_float("lr", 1e-3, 0.3, log=True),
              "momentum": trial.suggest_float("momentum", 0.0, 0.95),
              "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128, 256]),
              "hidden": trial.suggest_categorical("hidden", [32, 64, 128, 256]),
              "dropout": trial.suggest_float("dropout", 0.0, 0.5)}
        model, opt = build(hp, team)
        curve = []
        for epoch in range(args.epochs):
            train_epoch(model, opt, data, hp["batch_size"], epoch, team)
            acc = accuracy(model, data, team)
            curve.append((time.time() - t0, acc))
            trial.set_user_attr("curve", curve)
            trial.report(acc, epoch)
            if trial.should_prune():
                import optuna
                raise optuna.TrialPruned()
        return acc

    study.optimize(objective, n_trials=args.trials)
    if kt.rank() != 0:
        return
    from kolo.hpo import plots
    trials = study.trials
    default = trials[0]
    best = study.best_trial
    pruned = [t for t in trials if t.state.name == "PRUNED"]
    summary = {
        "default": {"number": default.number, "value": default.value,
                    "params": default.params},
        "best": {"number": best.number, "value": best.value, "params": best.params},
        "margin": best.value - default.value, "trials": len(trials),
        "pruned": len(pruned),
        "pruned_epochs": [len(t.intermediate_values) for t in pruned],
        "epochs": args.epochs, "utilisation": study.utilisation(),
        "wall_seconds": time.time() - t0,
        "states": {s: sum(t.state.name == s for t in trials)
                   for s in ("COMPLETE", "PRUNED", "FAIL")}}
    with open(os.path.join(args.out, "search.json"), "w") as f:
        json.dump(summary, f, indent=1)
    print("search: default %.4f, best %.4f (trial %d, +%.4f), %d pruned of %d; "
          "utilisation %s" % (default.value, best.value, best.number, summary["margin"],
                              len(pruned), len(trials),
                              {k: round(v, 3) for k, v in summary["utilisation"].items()}),
          flush=True)
    for path in plots.study_plots(trials, args.out):
        print("search: wrote %s" % path, flush=True)


SPACE = {"lr": (1e-3, 0.3, "log"), "momentum": (0.0, 0.95), "dropout": (0.0, 0.5),
         "batch_size": [32, 64, 128, 256]}


def random_search(args, data):
    study = hpo.Study("random", storage=None, sampler=hpo_random(args.seed), pruner="none",
                      team_size=1)
    t0 = time.time()

    def objective(trial, team):
        hp = {"lr": trial.suggest_float("lr", 1e-3, 0.3, log=True),
              "momentum": trial.suggest_float("momentum", 0.0, 0.95),
              "dropout": trial.suggest_float("dropout", 0.0, 0.5),
              "batch_size": trial.suggest_categorical("batch_size", [32, 64, 128, 256]),
              "hidden": DEFAULTS["hidden"]}
        model, opt = build(hp, team)
        curve = []
        for epoch in range(args.epochs):
            train_epoch(model, opt, data, hp["batch_size"], epoch, team)
            curve.append((time.time() - t0, accuracy(model, data, team)))
            trial.set_user_attr("curve", curve)
        return curve[-1][1]

    study.optimize(objective, n_trials=kt.size())
    if kt.rank() == 0:
        runs = [{"params": t.params, "curve": t.user_attrs.get("curve", [])}
                for t in study.trials]
        _finish(args, "random", runs, time.time() - t0)


def hpo_random(seed):
    import optuna
    return optuna.samplers.RandomSampler(seed=seed)


def pbt(args, data):
    pop = hpo.PBT(population=kt.size(), interval_steps=1, quantile=0.25, hyperparams=SPACE,
                  seed=args.seed, lineage_path=os.path.join(args.out, "pbt_lineage.json"))
    t0 = time.time()

    def train(member, team):
        hp = dict(member.hyperparams, hidden=DEFAULTS["hidden"])
        model, opt = build(hp, team)
        curve = []
        for epoch in range(args.epochs):
            train_epoch(model, opt, data, int(member.hyperparams["batch_size"]), epoch, team)
            acc = accuracy(model, data, team)
            curve.append((time.time() - t0, acc))
            if epoch + 1 < args.epochs:
                member.exploit(acc, model, opt, step=epoch + 1)
                model.drop.p = member.hyperparams["dropout"]
        member.history.append({"step": args.epochs, "score": acc, "parent": None,
                               "hyperparams": dict(member.hyperparams), "seconds": 0.0,
                               "time": curve[-1][0]})
        return acc

    lineage = pop.run(train)
    if kt.rank() == 0:
        runs = [{"params": m["hyperparams"], "history": m["history"]} for m in lineage]
        # the time of each member's score: from its history's steps
        _finish(args, "pbt", runs, time.time() - t0, exploit=pop.exploit_seconds)
        from kolo.hpo import plots
        plots.lineage_plot(lineage, os.path.join(args.out, "pbt_lineage.png"))


def _finish(args, mode, runs, seconds, exploit=None):
    out = {"mode": mode, "epochs": args.epochs, "ranks": kt.size(), "seconds": seconds,
           "rank_seconds": seconds * kt.size(), "runs": runs}
    if exploit is not None:
        out["exploit_seconds_rank0"] = exploit
    with open(os.path.join(args.out, "%s.json" % mode), "w") as f:
        json.dump(out, f, indent=1)
    print("%s: %.1f s on %d ranks; wrote %s/%s.json" % (mode, seconds, kt.size(), args.out,
                                                       mode), flush=True)


def compare(args):
    """OUT/pbt_vs_random.png from OUT/pbt.json and OUT/random.json: each
    member's / trial's test accuracy against wall-clock time, and the best
    so far of each method."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(figsize=(7, 4))
    lines = []
    for mode, color in (("random", "C0"), ("pbt", "C3")):
        with open(os.path.join(args.out, "%s.json" % mode)) as f:
            run = json.load(f)
        points = []
        for r in run["runs"]:
            curve = r["curve"] if mode == "random" else [(h["time"], h["score"])
                                                         for h in r["history"]]
            ax.plot([c[0] for c in curve], [c[1] for c in curve], color=color, lw=0.6,
                    alpha=0.5)
            points += curve
        points.sort()
        best, xs, ys = -math.inf, [], []
        for t, acc in points:
            best = max(best, acc)
            xs.append(t)
            ys.append(best)
        ax.step(xs, ys, where="post", color=color, lw=2,
                label="%s: best %.4f (%.0f rank-s)" % (mode, best, run["rank_seconds"]))
        lines.append("%s: best test accuracy %.4f, %.1f s x %d ranks = %.0f rank-s"
                     % (mode, best, run["seconds"], run["ranks"], run["rank_seconds"]))
    ax.set_xlabel("wall-clock (s)")
    ax.set_ylabel("test accuracy")
    ax.set_title("PBT and random search at equal compute (thin: each member / trial)")
    ax.legend()
    fig.tight_layout()
    path = os.path.join(args.out, "pbt_vs_random.png")
    fig.savefig(path, dpi=100)
    for line in lines:
        print(line)
    print("compare: wrote %s" % path)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("mode", choices=("search", "pbt", "random", "compare"))
    p.add_argument("--out", required=True, help="directory for JSON and plots")
    p.add_argument("--trials", type=int, default=24)
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--train-size", type=int, default=12000)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--resume", action="store_true")
    p.add_argument("--data", default=DEFAULT_DATA)
    args = p.parse_args()
    if args.mode == "compare":
        return compare(args)
    torch.set_num_threads(1)
    kt.init()
    os.makedirs(args.out, exist_ok=True)
    data = Data(args)
    {"search": search, "pbt": pbt, "random": random_search}[args.mode](args, data)


if __name__ == "__main__":
    main()
