#!/usr/bin/env python3
"""The lines of a kernel that cost most, from Nsight Compute's source page as CSV
(`ncu -i REPORT --page source --csv --print-source cuda`): each line's share of the warps'
stall samples and of the instructions executed, the top ones printed with their text.
Usage: ncu_source.py CSV [NAME] [TOP]"""
import csv
import sys


def column(header, *words):
    """The first column whose name holds all the words (case-insensitive), else None."""
    for i, name in enumerate(header):
        if all(w.lower() in name.lower() for w in words):
            return i
    return None


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def main():
    path, name = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 25
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    start = next((i for i, r in enumerate(rows) if column(r, "source") is not None), None)
    if start is None:
        print(f"{name}: no source table in {path}: {' | '.join(rows[0]) if rows else 'empty'}")
        return
    header, body = rows[start], rows[start + 1:]
    src = column(header, "source")
    line = column(header, "line") if column(header, "line") != src else None
    samples = column(header, "stall sampling", "all") or column(header, "sampl")
    insts = column(header, "instructions executed") or column(header, "inst")
    if samples is None or insts is None:
        print(f"{name}: columns {header}")
        return
    total_s = sum(number(r[samples]) for r in body if len(r) > samples) or 1.0
    total_i = sum(number(r[insts]) for r in body if len(r) > insts) or 1.0
    print(f"{name}: {total_i:.0f} warp instructions, {total_s:.0f} stall samples")
    ranked = sorted((r for r in body if len(r) > max(samples, insts)),
                    key=lambda r: -number(r[samples]))
    for r in ranked[:top]:
        where = r[line] if line is not None else ""
        print(f"  {100 * number(r[samples]) / total_s:5.1f}% samples {100 * number(r[insts]) / total_i:5.1f}% inst"
              f"  {where:>5}  {r[src].strip()[:110]}")


if __name__ == "__main__":
    main()
