#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""SM clock and board power per timed window, from an nvidia-smi log:
    nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,temperature.gpu,clocks_event_reasons.active \\
        --format=csv,noheader -lms 10 > smi.csv
and a marks file of "HH:MM:SS.mmm NAME-start" / "HH:MM:SS.mmm NAME-end" lines:
    scripts/power-windows.py smi.csv marks.txt
prints, per window, over its loaded samples (power at least LOADED of the window's
largest: a window also holds its process's setup), their count, the SM clock (median, min),
the power (median, max), the temperature at the end, and the share of them throttled by the
software power cap (event bit 0x4) or by hardware or thermal slowdown (0x8, 0x20, 0x40)."""
import sys

POWER_CAP = 0x4
SLOWDOWN = 0x8 | 0x20 | 0x40
LOADED = 0.6


def seconds(clock):
    """Seconds since midnight of "HH:MM:SS.fff"."""
    h, m, s = clock.split(":")
    return int(h) * 3600 + int(m) * 60 + float(s)


def number(text):
    return float(text.strip().split()[0])


def samples(path):
    out = []
    with open(path) as f:
        for line in f:
            cols = [c.strip() for c in line.split(",")]
            if len(cols) < 5 or " " not in cols[0]:
                continue
            try:
                out.append((seconds(cols[0].split()[1]), number(cols[1]), number(cols[2]), number(cols[3]),
                            int(cols[4], 16)))
            except ValueError:
                continue
    return out


def windows(path):
    starts, out = {}, []
    with open(path) as f:
        for line in f:
            clock, name = line.split()
            base, edge = name.rsplit("-", 1)
            if edge == "start":
                starts[base] = seconds(clock)
            elif base in starts:
                out.append((base, starts.pop(base), seconds(clock)))
    return out


def median(values):
    v = sorted(values)
    return v[len(v) // 2]


def main():
    rows = samples(sys.argv[1])
    print(f"{'window':<16} {'loaded':>7} {'SM MHz med/min':>15} {'W med/max':>11} {'temp C':>6} "
          f"{'power cap':>9} {'slowdown':>8}")
    for name, t0, t1 in windows(sys.argv[2]):
        w = [r for r in rows if t0 <= r[0] <= t1]
        if not w:
            print(f"{name:<16} {0:>7}")
            continue
        peak = max(r[2] for r in w)
        w = [r for r in w if r[2] >= LOADED * peak]
        capped = sum(1 for r in w if r[4] & POWER_CAP) / len(w)
        slowed = sum(1 for r in w if r[4] & SLOWDOWN) / len(w)
        print(f"{name:<16} {len(w):>7} {median([r[1] for r in w]):>8.0f}/{min(r[1] for r in w):<6.0f} "
              f"{median([r[2] for r in w]):>5.0f}/{max(r[2] for r in w):<5.0f} {w[-1][3]:>6.0f} "
              f"{100 * capped:>8.0f}% {100 * slowed:>7.0f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
