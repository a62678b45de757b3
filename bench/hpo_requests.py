#!/usr/bin/python3
"""The cost of a request to kolo.hpo's study owner (docs/hpo.md).

    build/bin/kolorun --hpo -np 4 env PYTHONPATH=build/python \\
        /usr/bin/python3 bench/hpo_requests.py [--calls 200]

Two teams of two ranks, one trial each; in it every rank calls
``trial.suggest_float`` --calls times (each: the leader's request to rank 0
and back, then a broadcast to the team) and ``trial.report`` as often
(the leader's request only). Prints, per team, the median and 90th
percentile of the time of one call: team 0's leader is rank 0 itself (a
call in-process), team 1's is rank 2 (a request over its link to rank 0).
Then the trial sleeps --idle seconds and each rank prints the CPU its
process used meanwhile (the links' threads and kolo's).
"""

import argparse
import resource
import statistics
import time

import kolo.hpo as hpo
import kolo.torch as kt

p = argparse.ArgumentParser()
p.add_argument("--calls", type=int, default=200)
p.add_argument("--idle", type=float, default=4.0, help="then sleep S s, measuring CPU")
a = p.parse_args()
kt.init()
study = hpo.Study("requests", sampler="random", pruner="none", team_size=2)


def objective(trial, team):
    suggest, report = [], []
    for i in range(a.calls):
        t0 = time.perf_counter()
        trial.suggest_float("x%d" % i, 0.0, 1.0)
        suggest.append(time.perf_counter() - t0)
    for i in range(a.calls):
        t0 = time.perf_counter()
        trial.report(0.5, i)
        report.append(time.perf_counter() - t0)
    if team.rank == 0:
        q = lambda xs, f: sorted(xs)[int(f * (len(xs) - 1))] * 1e3  # noqa: E731
        print("team %d (leader rank %d): suggest median %.2f ms p90 %.2f ms; "
              "report median %.2f ms p90 %.2f ms" % (
                  team.index, team.leader, statistics.median(suggest) * 1e3,
                  q(suggest, 0.9), statistics.median(report) * 1e3, q(report, 0.9)),
              flush=True)
    u0 = resource.getrusage(resource.RUSAGE_SELF)
    time.sleep(a.idle)
    u1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime
    print("rank %d: %.3f s of CPU over %.1f s of a sleeping trial (%.1f%% of a core)"
          % (kt.rank(), cpu, a.idle, 100 * cpu / a.idle), flush=True)
    return 0.0


study.optimize(objective, n_trials=2)
