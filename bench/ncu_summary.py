#!/usr/bin/env python3
"""Sums an Nsight Compute text report (ncu's default output) by kernel: launches, total time,
and the launches' mean DRAM and SM throughput, achieved occupancy and cycles per issued
instruction, with the first stall reason ncu names; where the report has the
smsp__average_warps_issue_stalled_* metrics, each kernel's largest stalls in cycles per issued
instruction. Usage: ncu_summary.py REPORT"""
import re
import sys
from collections import OrderedDict

UNITS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3,
         "s": 1e6, "second": 1e6}
METRICS = {"Duration": "time_us", "DRAM Throughput": "dram", "Compute (SM) Throughput": "sm",
           "Achieved Occupancy": "occ", "Warp Cycles Per Issued Instruction": "cpi"}


def number(text):
    return float(text.replace(",", ""))


def parse(path):
    kernels, cur = OrderedDict(), None
    for line in open(path, errors="replace"):
        if line.startswith("  ") and not line.startswith("   ") and ")x(" in line and "Context" in line:
            rest = re.sub(r"\((anonymous namespace)\)::|<unnamed>::", "", line.strip())
            rest = re.sub(r"^void ", "", rest)
            name = re.match(r"[\w:]+", rest).group(0).split("::")[-1]
            cur = kernels.setdefault(name, {"n": 0, "time_us": 0.0, "dram": [], "sm": [],
                                            "occ": [], "cpi": [], "stall": "", "stalls": {}})
            cur["n"] += 1
            continue
        if cur is None:
            continue
        for label, key in METRICS.items():
            m = re.match(r"^\s+" + re.escape(label) + r"\s+(\S+)\s+([\d.,]+)\s*$", line)
            if m:
                value = number(m.group(2))
                if key == "time_us":
                    cur[key] += value * UNITS.get(m.group(1), 1.0)
                else:
                    cur[key].append(value)
        m = re.match(r"^\s+smsp__average_warps_issue_stalled_(\w+?)_per_issue_active\.ratio\s+"
                     r"(?:\S+\s+)?([\d.,]+)\s*$", line)
        if m:
            cur["stalls"].setdefault(m.group(1), []).append(number(m.group(2)))
            continue
        m = re.search(r"stalled (?:waiting )?(?:for |on )?(.{0,70}?)(?:\.|,| which|\s*$)", line)
        if m and not cur["stall"]:
            cur["stall"] = m.group(1).strip()
    return kernels


def mean(values):
    return sum(values) / len(values) if values else float("nan")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    kernels = parse(sys.argv[1])
    if not kernels:
        print("ncu_summary: no kernels in " + sys.argv[1])
        return
    total = sum(k["time_us"] for k in kernels.values())
    print("%-14s %4s %10s %6s %6s %6s %6s %6s  %s" % ("kernel", "n", "total us", "share", "DRAM%",
                                                    "SM%", "occ%", "CPI", "first stall named"))
    for name, k in kernels.items():
        print("%-14s %4d %10.1f %5.1f%% %6.1f %6.1f %6.1f %6.1f  %s" % (
            name[:14], k["n"], k["time_us"], 100 * k["time_us"] / total, mean(k["dram"]),
            mean(k["sm"]), mean(k["occ"]), mean(k["cpi"]), k["stall"]))
    for name, k in kernels.items():
        if k["stalls"]:
            top = sorted(((mean(v), s) for s, v in k["stalls"].items()), reverse=True)[:6]
            print("%-14s stalls a issue: %s" % (name[:14], ", ".join(
                "%s %.2f" % (s, v) for v, s in top)))


if __name__ == "__main__":
    main()
