#!/usr/bin/env python3
"""Where a kernel's warps wait, from Nsight Compute's source page as CSV (`ncu -i REPORT --page
source --csv --print-source sass`, or `cuda` where the build has -lineinfo): each opcode's (or
line's) share of the warps' stall samples and of the instructions executed, then the costliest
instructions with their top stall reasons and the instructions just before them (what a stall on
a barrier or a scoreboard waits for).
Usage: ncu_source.py CSV [NAME] [TOP]"""
import csv
import sys
from collections import Counter


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


def opcode(sass):
    """The opcode of a SASS line without its predicate and modifiers: HMMA, LDSM, BAR."""
    words = [w for w in sass.split() if not w.startswith("@")]
    return words[0].split(".")[0] if words else ""


def main():
    path, name = sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else ""
    top = int(sys.argv[3]) if len(sys.argv) > 3 else 12
    rows = [r for r in csv.reader(open(path, errors="replace")) if r]
    start = next((i for i, r in enumerate(rows) if column(r, "stall sampling", "all") is not None), None)
    if start is None:
        print(f"{name}: no per-instruction samples in {path}: {' | '.join(rows[0])[:200] if rows else 'empty'}")
        return
    header, body = rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]
    src, samples = column(header, "source"), column(header, "stall sampling", "all")
    insts = column(header, "instructions executed")
    stalls = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]
    total_s = sum(number(r[samples]) for r in body) or 1.0
    total_i = sum(number(r[insts]) for r in body) or 1.0
    print(f"{name}: {total_i:.0f} warp instructions, {total_s:.0f} stall samples")
    by_s, by_i = Counter(), Counter()
    for r in body:
        by_s[opcode(r[src])] += number(r[samples])
        by_i[opcode(r[src])] += number(r[insts])
    print("  " + ", ".join(f"{op} {100 * s / total_s:.1f}%s/{100 * by_i[op] / total_i:.1f}%i"
                           for op, s in by_s.most_common(14)))
    order = sorted(range(len(body)), key=lambda i: -number(body[i][samples]))
    for i in order[:top]:
        r = body[i]
        why = sorted(((number(r[j]), header[j][6:]) for j in stalls), reverse=True)[:2]
        before = " | ".join(body[k][src].strip()[:34] for k in range(max(0, i - 2), i))
        print(f"  {100 * number(r[samples]) / total_s:5.1f}% {r[src].strip()[:44]:44} "
              f"{' '.join(f'{w}:{v:.0f}' for v, w in why):34} after {before}")


if __name__ == "__main__":
    main()
