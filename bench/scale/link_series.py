#!/usr/bin/env python3
"""Samples the byte counters of network links every few milliseconds.

    link_series.py VETH[,VETH...] SECONDS OUT [--every 0.002]

Writes OUT: one line per sample, "t tx1 rx1 tx2 rx2 ..." (seconds since
the start, then each link's /sys/class/net/<veth>/statistics tx_bytes and
rx_bytes). On the root-side veth of a netns host (tests/multihost/netns.sh)
tx is what goes down to the host, rx what comes up from it.
`link_series.py --rates OUT [--bin 0.02]` prints the samples as Mbit/s per
host and direction in bins, from the first bin that moved a megabyte.
"""
import argparse
import sys
import time


def sample(veths, seconds, out, every):
    files = [(open(f"/sys/class/net/{v}/statistics/tx_bytes"),
              open(f"/sys/class/net/{v}/statistics/rx_bytes")) for v in veths]
    t0 = time.time()
    with open(out, "w") as f:
        while time.time() - t0 < seconds:
            row = ["%.4f" % (time.time() - t0)]
            for tx, rx in files:
                tx.seek(0)
                rx.seek(0)
                row += [tx.read().strip(), rx.read().strip()]
            f.write(" ".join(row) + "\n")
            time.sleep(every)


def rates(path, width):
    rows = [list(map(float, line.split())) for line in open(path) if line.strip()]
    if not rows:
        sys.exit(f"link_series.py: {path}: no samples")
    hosts = (len(rows[0]) - 1) // 2
    base = rows[0]
    start = next((i for i, r in enumerate(rows)
                  if sum(r[1:]) - sum(base[1:]) > 1e6), 0)
    last = rows[start]
    for r in rows[start:]:
        dt = r[0] - last[0]
        if dt < width:
            continue
        cells = []
        for h in range(hosts):
            down = (r[1 + 2 * h] - last[1 + 2 * h]) * 8 / dt / 1e6
            up = (r[2 + 2 * h] - last[2 + 2 * h]) * 8 / dt / 1e6
            cells.append("h%d up %4.0f dn %4.0f" % (h + 1, up, down))
        print("%6.0f ms  " % ((r[0] - rows[start][0]) * 1e3) + " | ".join(cells))
        last = r


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("args", nargs="*")
    p.add_argument("--every", type=float, default=0.002)
    p.add_argument("--rates", metavar="FILE")
    p.add_argument("--bin", type=float, default=0.02)
    a = p.parse_args()
    if a.rates:
        rates(a.rates, a.bin)
        return
    if len(a.args) != 3:
        p.error("expected VETHS SECONDS OUT (or --rates FILE)")
    sample(a.args[0].split(","), float(a.args[1]), a.args[2], a.every)


if __name__ == "__main__":
    main()
