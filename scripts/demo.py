#!/usr/bin/python3
"""`make demo`'s training runs: a Fashion-MNIST example on 2 ranks, with a
speedup that means something on a small shared machine.

    scripts/demo.py --kolorun build/bin/kolorun [--epochs 2] [--steps 150]
                    [--out build/demo] -- TRAIN_COMMAND...

TRAIN_COMMAND is an example that takes the flags of examples/fashion_mnist.cpp
(build/bin/fashion_mnist, or env PYTHONPATH=build/python /usr/bin/python3
examples/fashion_mnist.py). Every run below trains --epochs epochs of --steps
steps (batch 64 per rank), so that their figures compare:

1. one rank alone (kolorun -np 1): the 1-rank throughput;
2. two independent 1-rank jobs started at once: their throughputs added up
   are the machine's ceiling for two processes (on 2 cores shared with
   anything else, or with turbo and memory bandwidth split, two processes
   reach less than twice one: 2x is not what the machine allows);
3. two ranks (kolorun -np 2), shown as it trains: its accuracy, and its
   speedup over (1) beside the ceiling (2) over (1), and how much of the
   ceiling it reaches, e.g.
   "speedup over 1 rank: 1.53x (...); ceiling of this machine (two 1-rank
   runs at once): 1.60x; kolo reaches 96% of it".

The example prints that line from its --baseline record, to which this
script adds the ceiling (ceiling_record). The records and logs stay in --out.
Throughputs are the examples' own: the mean over epochs after the first.
"""

import argparse
import json
import os
import subprocess
import sys

# The fields that must be equal for the runs' figures to compare.
SAME = ("batch_size", "steps_per_epoch", "epochs", "threads")


def ceiling_record(one, pair):
    """The 1-rank record `one` with the machine's ceiling added: the images/s
    of the two records of `pair` (two 1-rank runs at the same time) added up,
    as ceiling_images_per_second, and theirs as ceiling_runs. Raises
    ValueError naming the field when a record is not of 1 rank, has no
    throughput, or differs from `one` in a field of SAME."""
    records = [("the 1-rank run", one)] + [("ceiling run %d" % (i + 1), r)
                                           for i, r in enumerate(pair)]
    if len(pair) != 2:
        raise ValueError("the ceiling needs 2 runs at once, got %d" % len(pair))
    for name, r in records:
        if r.get("ranks") != 1:
            raise ValueError("%s has ranks %r, expected 1" % (name, r.get("ranks")))
        if not float(r.get("images_per_second", 0)) > 0:
            raise ValueError("%s has images_per_second %r, expected > 0"
                             % (name, r.get("images_per_second")))
        for key in SAME:
            if r.get(key) != one.get(key):
                raise ValueError("%s has %s %r, the 1-rank run %r: the figures would not "
                                 "compare" % (name, key, r.get(key), one.get(key)))
    out = dict(one)
    out["ceiling_runs"] = [float(r["images_per_second"]) for r in pair]
    out["ceiling_images_per_second"] = sum(out["ceiling_runs"])
    return out


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kolorun", required=True, help="build/bin/kolorun")
    p.add_argument("--epochs", type=int, default=2,
                   help="epochs of every run (the throughput leaves the first out)")
    p.add_argument("--steps", type=int, default=150, help="steps per epoch of every run")
    p.add_argument("--out", default="demo", help="directory of the records and logs")
    p.add_argument("train", nargs=argparse.REMAINDER,
                   help="-- and the example's command")
    a = p.parse_args(argv)
    if a.train and a.train[0] == "--":
        a.train = a.train[1:]
    if not a.train:
        p.error("the example's command is missing (after --)")
    if a.epochs < 2 or a.steps < 1:
        p.error("--epochs must be >= 2 (the first is warm-up), --steps >= 1")
    return a


def load(path):
    with open(path) as f:
        return json.load(f)


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    os.makedirs(a.out, exist_ok=True)
    out = lambda name: os.path.join(a.out, name)  # noqa: E731
    common = ["--epochs", str(a.epochs), "--max-steps", str(a.steps)]
    env = dict(os.environ, OMP_NUM_THREADS="1")

    def command(ranks, name, *extra):
        return ([a.kolorun, "-np", str(ranks)] + a.train + common +
                ["--json", out(name + ".json")] + list(extra))

    print("demo: %d epochs of %d steps on 1 rank, on two 1-rank jobs at once (the "
          "machine's ceiling), then on 2 ranks" % (a.epochs, a.steps), flush=True)
    one = command(1, "one", "--no-progress", "--baseline", out("one_base.json"))
    print("+ " + " ".join(one), flush=True)
    subprocess.run(one, env=env, check=True)

    print("+ two of: " + " ".join(command(1, "ceiling_N", "--no-progress")) +
          "  # at once, logs in " + a.out, flush=True)
    jobs = []
    for i in (1, 2):
        log = open(out("ceiling_%d.log" % i), "w")
        jobs.append((subprocess.Popen(
            command(1, "ceiling_%d" % i, "--no-progress", "--baseline",
                    out("ceiling_%d_base.json" % i)),
            env=env, stdout=log, stderr=subprocess.STDOUT), log))
    for job, log in jobs:
        if job.wait() != 0:
            sys.exit("demo: a ceiling run failed (exit %d), see %s"
                     % (job.returncode, log.name))
        log.close()
    pair = [load(out("ceiling_%d.json" % i)) for i in (1, 2)]
    base = ceiling_record(load(out("one.json")), pair)
    with open(out("baseline.json"), "w") as f:
        json.dump(base, f)
        f.write("\n")
    print("ceiling: %.0f + %.0f = %.0f images/s (1 rank alone: %.0f)" % (
        pair[0]["images_per_second"], pair[1]["images_per_second"],
        base["ceiling_images_per_second"], base["images_per_second"]), flush=True)

    two = command(2, "two", "--baseline", out("baseline.json"))
    print("+ " + " ".join(two), flush=True)
    subprocess.run(two, env=env, check=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as e:
        sys.exit("demo: %s exited with %d" % (e.cmd[0], e.returncode))
    except (OSError, ValueError) as e:
        sys.exit("demo: %s" % e)
