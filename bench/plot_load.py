#!/usr/bin/env python3
"""Plots a `fusee load` report's timeline as one PNG (matplotlib, Debian's python3-matplotlib):
throughput (starts and completions per second, invocations when endpoints ran), the start and
step-durable latencies' p50 and p99 per second (start max faint), and the server's resident
memory with the server kills marked. Usage: bench/plot_load.py REPORT.json OUT.png"""
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
    fig, (a, b, c) = plt.subplots(3, 1, figsize=(9, 8), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 3, 2]})
    a.plot(t, [s["starts_per_s"] for s in tl], label="starts answered / s")
    a.plot(t, [s["completed_per_s"] for s in tl], label="workflows completed / s")
    if any(s.get("invocations_per_s", 0) for s in tl):
        a.plot(t, [s.get("invocations_per_s", 0) for s in tl], label="invocations / s")
    a.set_ylabel("per second")
    a.legend(loc="lower right")
    a.grid(alpha=0.3)
    b.plot(t, [s["start_p50_ms"] for s in tl], label="start answered p50")
    b.plot(t, [s["start_p99_ms"] for s in tl], label="start answered p99")
    b.plot(t, [s["start_max_ms"] for s in tl], label="start answered max", alpha=0.3)
    if any(s.get("step_durable_p99_ms", 0) for s in tl):
        b.plot(t, [s.get("step_durable_p50_ms", 0) for s in tl], label="step durable p50")
        b.plot(t, [s.get("step_durable_p99_ms", 0) for s in tl], label="step durable p99")
    b.set_ylabel("latency (ms)")
    b.set_yscale("log")
    b.legend(loc="upper right", fontsize="small", ncol=2)
    b.grid(alpha=0.3, which="both")
    c.plot(t, [s.get("server_rss_mb", 0) for s in tl], label="server RSS (MB)")
    c.set_ylabel("server RSS (MB)")
    c.set_ylim(bottom=0)
    c.set_xlabel("seconds into the run")
    c.grid(alpha=0.3)
    for k, at in enumerate(r.get("server_kill_times_s", [])):
        for ax in (a, b, c):
            ax.axvline(at, color="red", alpha=0.5, linestyle="--",
                       label="kill -9" if k == 0 and ax is c else None)
    c.legend(loc="lower right")
    checks = "all checks ok" if r.get("passed") else "CHECKS FAILED"
    fig.suptitle(f"fusee load: {r['scenario']} ({checks})")
    fig.tight_layout()
    fig.savefig(out, dpi=100)
    print(f"plot_load: {out}")


if __name__ == "__main__":
    main()
