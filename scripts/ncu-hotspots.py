#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Where a kernel's warps wait, from Nsight Compute's source page:
    ncu -i REPORT --page source --csv --print-source sass > page.csv
    scripts/ncu-hotspots.py page.csv [TOP]
prints the SASS instructions holding the most stall samples (with their executed counts and
leading stall reasons), then the samples and executed instructions summed per opcode. The
full page is tens of thousands of lines; this is the part a device call's log can carry."""
import csv
import re
import sys
from collections import Counter


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def records(table):
    """The SASS rows as dicts. The page may open with other quoted lines and, with
    --import-source, repeat its header per source file; the header is the first row naming
    both Address and Source, and only rows of its width are instructions."""
    header = next((r for r in table if "Address" in r and "Source" in r), None)
    if header is None:
        return []
    return [dict(zip(header, r)) for r in table if len(r) == len(header) and r != header]


def main():
    path, top = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 40
    with open(path, newline="") as f:
        table = list(csv.reader(line for line in f if line.startswith('"')))
    rows = records(table)
    if not rows:
        sys.exit(f"{path}: no CSV rows")
    cols = rows[0].keys()
    samples = next(c for c in cols if c.startswith("Warp Stall Sampling (All"))
    executed = next((c for c in cols if c.startswith("Instructions Executed")), None)
    reasons = [c for c in cols if re.match(r"stall_|smsp__pcsamp", c)]
    total = sum(number(r[samples]) for r in rows) or 1.0
    print(f"{len(rows)} instructions, {total:.0f} samples; columns: {samples}, {executed}")
    hot = sorted(rows, key=lambda r: -number(r[samples]))[:top]
    for r in hot:
        why = sorted(((number(r[c]), c) for c in reasons), reverse=True)[:3]
        lead = ", ".join(f"{c.replace('stall_', '')} {v:.0f}" for v, c in why if v > 0)
        run = number(r[executed]) if executed else 0
        print(f"{100 * number(r[samples]) / total:5.1f}% {r['Address']:>6} {run:12.0f}  {r['Source'][:70]:70} {lead}")
    per_op, per_op_run = Counter(), Counter()
    for r in rows:
        op = r["Source"].split()[0] if r["Source"].split() else "?"
        op = op if not op.startswith("@") else r["Source"].split()[1]
        op = op.split(".")[0]
        per_op[op] += number(r[samples])
        per_op_run[op] += number(r[executed]) if executed else 0
    print("opcode: % of samples, instructions executed")
    for op, s in per_op.most_common(25):
        print(f"  {op:12} {100 * s / total:5.1f}% {per_op_run[op]:14.0f}")


if __name__ == "__main__":
    main()
