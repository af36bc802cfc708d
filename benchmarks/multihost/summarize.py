#!/usr/bin/python3
"""Summarize benchmarks/multihost/run.sh results: medians (min-max) and ratios.

    summarize.py RAW_DIR [--rate 1gbit]

RAW_DIR holds NAME__repR.json (`choir perf --json` or gloo_allreduce.py) and
NAME__repR.iperf.json (iperf3 -J). Ratios are computed per repetition (the runs
of one repetition are adjacent in time) and reported as median (min-max).
"""
import argparse
import glob
import json
import os
import re
import statistics
from collections import defaultdict


def fmt(v):
    if v is None:
        return "-"
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    if v >= 1:
        return f"{v:.2f}"
    return f"{v:.3f}"


def med_range(values):
    values = [v for v in values if v is not None]
    if not values:
        return "-"
    m = statistics.median(values)
    if len(values) == 1:
        return fmt(m)
    return f"{fmt(m)} ({fmt(min(values))}–{fmt(max(values))})"


def mib(b):
    return f"{b // (1 << 20)} MiB" if b % (1 << 20) == 0 else f"{b} B"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("raw")
    ap.add_argument("--rate", default="1gbit")
    a = ap.parse_args()

    # busbw[config][bytes][rep] = GB/s ; algo[config][bytes] = set of names
    busbw = defaultdict(lambda: defaultdict(dict))
    algo = defaultdict(lambda: defaultdict(set))
    checks = defaultdict(set)
    iperf = {}
    for path in sorted(glob.glob(os.path.join(a.raw, "*.json"))):
        base = os.path.basename(path)
        m = re.match(r"(.+)__rep(\d+)(\.iperf)?\.json$", base)
        if not m:
            continue
        name, rep, is_iperf = m.group(1), int(m.group(2)), m.group(3)
        try:
            with open(path) as f:
                doc = json.load(f)
        except (OSError, ValueError):
            continue
        if is_iperf:
            try:
                end = doc["end"]
                gbs = end["sum_received"]["bits_per_second"] / 8e9  # GB/s
                if "sum_received_bidir_reverse" in end:  # --bidir: mean of the two directions
                    gbs = (gbs + end["sum_received_bidir_reverse"]["bits_per_second"] / 8e9) / 2
                iperf.setdefault(name, {})[rep] = gbs
            except (KeyError, TypeError):
                pass
            continue
        for r in doc.get("results", []):
            busbw[name][r["bytes"]][rep] = r["busbw_median"]
            algo[name][r["bytes"]].add(r.get("algorithm", "?"))
            checks[name].add(r.get("check") or "-")

    out = []
    out.append("busbw in GB/s (1 GB = 1e9 B), float32 sum allreduce; median (min–max) over repetitions.\n")
    load_path = os.path.join(a.raw, "load.txt")
    if os.path.exists(load_path):
        with open(load_path) as f:
            loads = [line.split()[1] for line in f if len(line.split()) >= 2]
        out.append("Load average (1 min) of the machine at the start of each repetition and at the end: "
                   + ", ".join(loads) + " (2 vCPUs; other jobs share the machine).\n")
    for key, title in (("a_iperf3", "1 TCP stream, host 1 -> host 0"),
                       ("a_iperf3bidir", "--bidir, 1 stream each way at once, per direction")):
        v = list(iperf.get(key, {}).values())
        if v:
            out.append(f"**iperf3 between the two namespace hosts, {title}:** "
                       f"{med_range([x * 8 for x in v])} Gbit/s = {med_range(v)} GB/s ({len(v)} runs)\n")
    failures_path = os.path.join(a.raw, "failures.txt")
    if os.path.exists(failures_path):
        with open(failures_path) as f:
            failed = [line.strip() for line in f if line.strip()]
        if failed:
            out.append("**Runs that exited nonzero** (their figures, when rank 0 wrote them, are still "
                       "included): " + ", ".join(failed) + "\n")

    def table(title, configs):
        configs = [c for c in configs if c in busbw]
        if not configs:
            return
        sizes = sorted({b for c in configs for b in busbw[c]})
        out.append(f"#### {title}\n")
        out.append("| size | " + " | ".join(configs) + " |")
        out.append("|---|" + "---|" * len(configs))
        for b in sizes:
            cells = []
            for c in configs:
                vals = list(busbw[c].get(b, {}).values())
                names = ",".join(sorted(algo[c].get(b, set())))
                cells.append(f"{med_range(vals)}" + (f" `{names}`" if names else ""))
            out.append(f"| {mib(b)} | " + " | ".join(cells) + " |")
        out.append("")

    def ratio(title, num, den, target=None, den_scalar=None):
        if num not in busbw or (den not in busbw and not den_scalar):
            return
        out.append(f"#### {title}\n")
        out.append("| size | ratio, median (min–max) of per-repetition ratios |" + (" target | met? |" if target else ""))
        out.append("|---|---|" + ("---|---|" if target else ""))
        for b in sorted(busbw[num]):
            rs = []
            for rep, v in busbw[num][b].items():
                d = den_scalar.get(rep) if den_scalar is not None else busbw[den].get(b, {}).get(rep)
                if d:
                    rs.append(v / d)
            if not rs:
                continue
            row = f"| {mib(b)} | {med_range(rs)} |"
            if target:
                row += f" {target} | {'yes' if statistics.median(rs) >= target else 'no'} |"
            out.append(row)
        out.append("")

    table("(a) 2 hosts x 1 rank, no rate limit", ["a_choir_2x1", "a_gloo_2x1"])
    ratio("(a) choir busbw / iperf3 single-stream bandwidth", "a_choir_2x1", None, target=0.8,
          den_scalar=iperf.get("a_iperf3", {}))
    ratio("(a) choir busbw / iperf3 --bidir bandwidth per direction", "a_choir_2x1", None,
          den_scalar=iperf.get("a_iperf3bidir", {}))
    ratio("(a) gloo busbw / iperf3 single-stream bandwidth", "a_gloo_2x1", None,
          den_scalar=iperf.get("a_iperf3", {}))
    table("(b) 2 hosts x 2 ranks (blocked placement), no rate limit",
          ["b_choir_2x2_default", "b_choir_2x2_ring", "b_gloo_2x2"])
    ratio("(b) choir default / choir --algo ring, 2 x 2", "b_choir_2x2_default", "b_choir_2x2_ring", target=1.5)
    table(f"(c) 2 hosts x 4 ranks, tbf {a.rate} on each host's eth0",
          ["c_choir_2x4i_default", "c_choir_2x4i_ring", "c_choir_2x4b_ring", "c_gloo_2x4i"])
    ratio("(c) choir default / choir --algo ring, 2 x 4 interleaved, rate-limited",
          "c_choir_2x4i_default", "c_choir_2x4i_ring", target=3)
    ratio("(d) choir / gloo, 2 x 1", "a_choir_2x1", "a_gloo_2x1")
    ratio("(d) choir default / gloo, 2 x 2", "b_choir_2x2_default", "b_gloo_2x2")
    ratio("(d) choir default / gloo, 2 x 4 interleaved, rate-limited", "c_choir_2x4i_default", "c_gloo_2x4i")
    bad = [c for c, s in checks.items() if "FAILED" in s]
    out.append("Correctness: " + ("FAILED in " + ", ".join(bad) if bad else
                                  "every choir perf row with --check and every gloo row verified ok"
                                  if any("ok" in s for s in checks.values()) else "not checked"))
    print("\n".join(out))


if __name__ == "__main__":
    main()
