#!/usr/bin/env python3
"""Plots a `fusee load` report's timeline: throughput (starts and completions per second) and
the start latency's p50, p99 and max per second, as one PNG (matplotlib, Debian's
python3-matplotlib). Usage: bench/plot_load.py REPORT.json OUT.png"""
import json
import sys

import matplotlib

matplotlib.use("Agg")  # no display
import matplotlib.pyplot as plt  # noqa: E402


def main():
    report_file, out = sys.argv[1], sys.argv[2]
    r = json.load(open(report_file))
    tl = r.get("timeline", [])
    if not tl:
        sys.exit(f"plot_load: {report_file} has no timeline (a run shorter than a second?)")
    t = [s["t_s"] for s in tl]
    fig, (a, b) = plt.subplots(2, 1, figsize=(9, 6), sharex=True)
    a.plot(t, [s["starts_per_s"] for s in tl], label="starts answered / s")
    a.plot(t, [s["completed_per_s"] for s in tl], label="workflows completed / s")
    a.set_ylabel("per second")
    a.legend(loc="lower right")
    a.grid(alpha=0.3)
    b.plot(t, [s["start_p50_ms"] for s in tl], label="p50")
    b.plot(t, [s["start_p99_ms"] for s in tl], label="p99")
    b.plot(t, [s["start_max_ms"] for s in tl], label="max", alpha=0.4)
    b.set_ylabel("start answered (ms)")
    b.set_yscale("log")
    b.set_xlabel("seconds into the run")
    b.legend(loc="upper right")
    b.grid(alpha=0.3, which="both")
    checks = "all checks ok" if r.get("passed") else "CHECKS FAILED"
    fig.suptitle(f"fusee load: {r['scenario']} ({checks})")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot_load: {out}")


if __name__ == "__main__":
    main()
