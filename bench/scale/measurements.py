"""The measurement file of the scale model (docs/scale.md, "Validation"):
kolo-bench's JSON lines -> CSV rows, and reading the CSV back.

CSV header (the contract shared with `kolo-predict calibrate --from`):

    transport,hosts,ranks_per_host,link_bps,algorithm,bytes,seconds

one row per (setting, algorithm, size); transport is the run's
KOLO_TRANSPORT (auto: shared memory inside a host, tcp between hosts;
tcp: tcp between every pair); seconds is the median, over the
repeated measurements of that size in one kolo-bench run (--sizes lists a
size several times), of kolo-bench's time per call (back-to-back calls
after a barrier, total / iterations, the maximum over ranks); link_bps is
the tc tbf rate of every host link in bit/s, 0 when not shaped (one host).

    python3 bench/scale/measurements.py append OUT.csv LOG TRANSPORT HOSTS \
        RANKS_PER_HOST LINK_BPS [ALGORITHM]

appends the rows of one kolorun log (its "[rank] {...}" lines; ALGORITHM
names the rows when given, else each JSON line's own "algorithm") and
prints them; exit status 1 when the log has no kolo-bench result.
"""

import csv
import json
import os
import re
import statistics
import sys

HEADER = ["transport", "hosts", "ranks_per_host", "link_bps", "algorithm", "bytes",
          "seconds"]
_PREFIX = re.compile(r"^\[[^\]]*\] ?")

# tc's decimal rate units, bit/s.
_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9}


def rate_bps(text):
    """'100mbit' -> 100000000; 'none' or '0' -> 0. ValueError when unknown."""
    t = text.strip().lower()
    if t in ("none", "0", ""):
        return 0
    m = re.match(r"^([0-9.]+)([a-z]+)$", t)
    if not m or m.group(2) not in _RATE_UNITS:
        raise ValueError("link rate %r: expected e.g. 100mbit, 1gbit, 10gbit or none"
                         % text)
    return int(round(float(m.group(1)) * _RATE_UNITS[m.group(2)]))


def bench_results(lines):
    """kolo-bench JSON objects of a log (kolorun's "[rank] " prefix removed)."""
    out = []
    for line in lines:
        line = _PREFIX.sub("", line.strip())
        if not line.startswith('{"tool":"kolo-bench"'):
            continue
        out.append(json.loads(line))
    return out


def rows_from_results(results, transport, hosts, per_host, link_bps, algorithm=None):
    """One row per (algorithm, bytes): the median time over its repeats."""
    times = {}
    for r in results:
        if r.get("op") != "allreduce":
            continue
        key = (algorithm or r["algorithm"], int(r["bytes"]))
        times.setdefault(key, []).append(float(r["time_us"]) * 1e-6)
    rows = []
    for (alg, nbytes), ts in sorted(times.items()):
        rows.append({"transport": transport, "hosts": int(hosts),
                     "ranks_per_host": int(per_host), "link_bps": int(link_bps),
                     "algorithm": alg, "bytes": nbytes,
                     "seconds": statistics.median(ts)})
    return rows


def write_rows(path, rows):
    """Appends ROWS to the CSV at PATH, writing the header to a new file."""
    new = not os.path.exists(path) or os.path.getsize(path) == 0
    with open(path, "a", newline="") as f:
        w = csv.DictWriter(f, fieldnames=HEADER)
        if new:
            w.writeheader()
        for row in rows:
            w.writerow(dict(row, seconds="%.9g" % row["seconds"]))


def read_rows(path):
    """The rows of a measurement CSV, typed; ValueError naming a bad line."""
    with open(path, newline="") as f:
        reader = csv.DictReader(f)
        if reader.fieldnames != HEADER:
            raise ValueError("%s: header %s, expected %s" % (
                path, ",".join(reader.fieldnames or []), ",".join(HEADER)))
        rows = []
        for n, r in enumerate(reader, start=2):
            try:
                rows.append({"transport": r["transport"], "hosts": int(r["hosts"]),
                             "ranks_per_host": int(r["ranks_per_host"]),
                             "link_bps": int(float(r["link_bps"])),
                             "algorithm": r["algorithm"], "bytes": int(r["bytes"]),
                             "seconds": float(r["seconds"])})
            except (TypeError, ValueError) as e:
                raise ValueError("%s line %d: %s" % (path, n, e))
    return rows


def main(argv):
    if len(argv) < 8 or argv[1] != "append":
        sys.stderr.write(__doc__)
        return 2
    out, log, transport, hosts, per_host, link = argv[2:8]
    algorithm = argv[8] if len(argv) > 8 else None
    with open(log) as f:
        results = bench_results(f)
    rows = rows_from_results(results, transport, hosts, per_host, rate_bps(link),
                             algorithm)
    if not rows:
        sys.stderr.write("measurements.py: %s has no kolo-bench allreduce result\n" % log)
        return 1
    write_rows(out, rows)
    for r in rows:
        print("  %-5s %10d B  %12.1f us" % (r["algorithm"], r["bytes"], r["seconds"] * 1e6))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
