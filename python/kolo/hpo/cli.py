"""kolo-hpo: hyper-parameter search over scripts that know nothing of kolo.

    kolo-hpo --np N --team-size k --params params.yaml --trials 40 \\
             [--sampler tpe|random|grid] [--pruner median|halving|none] \\
             [--pbt --segments S ...] -- python train.py --lr @lr --momentum @momentum

Each trial is a ``kolorun -np k`` job of the command with the trial's
values in place of its ``@placeholders`` (space.py); N/k jobs run at once.
The job's ``FoM: <value>`` lines are the trial's intermediate values (each
reported to Optuna's pruner, which may end the job) and the last one is
its objective (blackbox.py). The study is an Optuna study in SQLite
(``--storage``, default OUTDIR/study.db) held by this one process, so
``--resume`` continues a study whose kolo-hpo was killed.

With ``--pbt`` the N/k jobs are a population trained in ``--segments``
segments: after each, the bottom quantile's members take a top member's
checkpoint file (the command's ``@checkpoint``, which the script loads if
it exists and saves at its end) and hyper-parameters, perturbed or
resampled (pbt.py's rules); the lineage goes to OUTDIR/lineage.json.
"""

import argparse
import os
import shutil
import sys
import threading
import time

from kolo.hpo import blackbox, space
from kolo.hpo.pbt import exploit_plan, explore, sample


def parse(argv):
    if "--" not in argv:
        raise SystemExit("kolo-hpo: missing '-- COMMAND ...' (the training command)")
    cut = argv.index("--")
    command = argv[cut + 1:]
    p = argparse.ArgumentParser(prog="kolo-hpo", description=__doc__.split("\n\n")[0])
    p.add_argument("--np", type=int, required=True, help="ranks in all (N)")
    p.add_argument("--team-size", type=int, default=1, help="ranks per trial (k)")
    p.add_argument("--params", required=True, help="the search space (YAML)")
    p.add_argument("--trials", type=int, default=20, help="trials in the study")
    p.add_argument("--timeout", type=float, default=None, help="start no trial after S s")
    p.add_argument("--sampler", default="tpe", help="tpe, random or grid")
    p.add_argument("--pruner", default="median", help="median, halving, hyperband, none")
    p.add_argument("--direction", default="maximize", choices=("maximize", "minimize"))
    p.add_argument("--seed", type=int, default=None, help="the sampler's / PBT's seed")
    p.add_argument("--study", default="kolo-hpo", help="the study's name")
    p.add_argument("--storage", default=None, help="Optuna storage URL")
    p.add_argument("--resume", action="store_true", help="continue the stored study")
    p.add_argument("--output-dir", default=None, help="logs, lineage, plots")
    p.add_argument("--plots", action="store_true", help="write PNG plots at the end")
    p.add_argument("--kolorun", default=None, help="the kolorun to start trials with")
    p.add_argument("--pbt", action="store_true", help="population-based training")
    p.add_argument("--segments", type=int, default=4, help="PBT: segments per member")
    p.add_argument("--quantile", type=float, default=0.25)
    p.add_argument("--perturb", default="0.8,1.2")
    p.add_argument("--resample-probability", type=float, default=0.25)
    args = p.parse_args(argv[:cut])
    if not command:
        p.error("the command after '--' is empty")
    if args.team_size < 1 or args.np < 1 or args.np % args.team_size:
        p.error("--team-size %d does not divide --np %d" % (args.team_size, args.np))
    args.output_dir = args.output_dir or "kolo-hpo-%s" % args.study
    args.kolorun = args.kolorun or os.environ.get("KOLO_HPO_KOLORUN") or \
        shutil.which("kolorun")
    if not args.kolorun:
        p.error("kolorun not found: give --kolorun PATH")
    return args, command


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    args, command = parse(argv)
    try:
        params = space.load_params(args.params)
        space.check_command(command, params, args.pbt)
        os.makedirs(args.output_dir, exist_ok=True)
        if args.pbt:
            run_pbt(args, params, command)
        else:
            run_study(args, params, command)
    except ValueError as e:
        print("kolo-hpo: %s" % e, file=sys.stderr)
        return 2
    return 0


def _log(line):
    print(line, flush=True)


class _OwnerTrial:
    """Optuna's suggest calls, made through the owner's requests."""

    def __init__(self, owner, number):
        self.owner, self.number = owner, number

    def _call(self, request):
        status, value = self.owner.handle(-1, request)
        if status == "err":
            raise value
        return value

    def __getattr__(self, attr):
        if not attr.startswith("suggest_"):
            raise AttributeError(attr)
        kind = attr[len("suggest_"):]
        return lambda name, *a, **kw: self._call(("suggest", self.number, kind, name, a, kw))


def run_study(args, params, command):
    import optuna

    from kolo.hpo import report
    from kolo.hpo.owner import StudyOwner
    from kolo.hpo.samplers import make_pruner, make_sampler
    from kolo.hpo.study import open_study, split_teams

    n_trials = args.trials
    if args.sampler == "grid":
        grid = space.grid_space(params)
        sampler = optuna.samplers.GridSampler(grid, seed=args.seed)
        size = 1
        for values in grid.values():
            size *= len(values)
        n_trials = min(n_trials, size)
    else:
        sampler = make_sampler(args.sampler, seed=args.seed)
    storage = args.storage or "sqlite:///%s" % os.path.abspath(
        os.path.join(args.output_dir, "study.db"))
    study = open_study(args.study, storage, sampler, make_pruner(args.pruner),
                       args.direction, args.resume, _log)
    teams = split_teams(args.np, args.team_size)
    owner = StudyOwner(study, teams, n_trials, args.timeout, _log)

    def team_loop(team):
        while True:
            status, number = owner.handle(-1, ("next", team))
            if status == "err":
                raise number
            if number is None:
                return
            try:
                values = space.suggest_all(_OwnerTrial(owner, number), params)
            except Exception as e:  # a bad range: the trial fails
                owner.handle(-1, ("tell", number, ("fail", "suggest: %s" % e)))
                continue
            values.update(trial=number, team=team)
            cmd = space.substitute(command, values)

            def on_fom(value, index):
                owner.handle(-1, ("report", number, value, index))
                status, prune = owner.handle(-1, ("prune?", number))
                return status == "ok" and bool(prune)

            log = os.path.join(args.output_dir, "trial-%d.log" % number)
            result = blackbox.run_job(args.kolorun, args.team_size, cmd, log, on_fom)
            owner.handle(-1, ("tell", number, blackbox.outcome(result)))

    threads = [threading.Thread(target=team_loop, args=(t,)) for t in range(len(teams))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    snap = owner.snapshot()
    report.print_table(snap, _log)
    if args.plots:
        from kolo.hpo import plots
        for path in plots.study_plots(snap["trials"], args.output_dir, args.direction):
            _log("kolo-hpo: wrote %s" % path)


def run_pbt(args, params, command):
    import json

    pspace = space.pbt_space(params)
    population = args.np // args.team_size
    factors = tuple(float(f) for f in args.perturb.split(","))
    seed = args.seed if args.seed is not None else 0
    ckpt = [os.path.abspath(os.path.join(args.output_dir, "member-%d.ckpt" % m))
            for m in range(population)]
    for path in ckpt:
        if os.path.exists(path):
            os.remove(path)
    import random
    hps = [{n: sample(s, random.Random("%s/init/%d" % (seed, m)))
            for n, s in sorted(pspace.items())} for m in range(population)]
    history = [[] for _ in range(population)]
    t0 = time.time()
    for segment in range(args.segments):
        scores = [None] * population

        def member_job(m, segment=segment, scores=scores):
            values = dict(hps[m], checkpoint=ckpt[m], member=m, segment=segment,
                          trial=segment * population + m, team=m)
            log = os.path.join(args.output_dir, "member-%d-segment-%d.log" % (m, segment))
            start = time.time()
            result = blackbox.run_job(args.kolorun, args.team_size,
                                      space.substitute(command, values), log,
                                      lambda v, i: False)
            out = blackbox.outcome(result)
            scores[m] = out[1] if out[0] == "complete" else float("nan")
            _log("kolo-hpo: pbt member %d segment %d FoM=%.6g time=%.1fs %s%s" % (
                m, segment, scores[m], time.time() - start,
                " ".join("%s=%s" % (k, v) for k, v in sorted(hps[m].items())),
                "" if out[0] == "complete" else " (%s)" % out[1]))

        threads = [threading.Thread(target=member_job, args=(m,)) for m in range(population)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        plan = exploit_plan(dict(enumerate(scores)), args.quantile, args.direction, seed,
                            segment + 1) if segment + 1 < args.segments else []
        parents = {}
        for loser, winner in plan:
            start = time.time()
            if os.path.exists(ckpt[winner]):
                shutil.copyfile(ckpt[winner], ckpt[loser])
            parents[loser] = (winner, time.time() - start)
        for m in range(population):
            history[m].append({"step": segment + 1, "score": scores[m],
                               "hyperparams": dict(hps[m]),
                               "parent": parents.get(m, (None,))[0],
                               "seconds": parents.get(m, (None, 0.0))[1],
                               "time": time.time() - t0})
        for loser, (winner, _) in parents.items():
            hps[loser] = explore(hps[winner], pspace, factors, args.resample_probability,
                                 seed, segment + 1, loser)
            _log("kolo-hpo: pbt member %d takes member %d's checkpoint; now %s" % (
                loser, winner, " ".join("%s=%s" % kv for kv in sorted(hps[loser].items()))))
    lineage = [{"member": m, "history": history[m], "final_score": history[m][-1]["score"],
                "hyperparams": hps[m]} for m in range(population)]
    path = os.path.join(args.output_dir, "lineage.json")
    with open(path, "w") as f:
        json.dump({"direction": args.direction, "members": lineage}, f, indent=1)
    best = max(lineage, key=lambda m: m["final_score"] if args.direction == "maximize"
               else -m["final_score"])
    _log("kolo-hpo: pbt best member %d FoM=%.6g %s; lineage in %s" % (
        best["member"], best["final_score"],
        " ".join("%s=%s" % kv for kv in sorted(best["history"][-1]["hyperparams"].items())),
        path))
    if args.plots:
        from kolo.hpo import plots
        _log("kolo-hpo: wrote %s" % plots.lineage_plot(lineage, os.path.join(
            args.output_dir, "pbt_lineage.png")))


if __name__ == "__main__":
    sys.exit(main())
