#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Latency vs M from humming-moe-bench --csv files (kernel or layer mode), with gnuplot.
#   launch/plot.sh OUT.png RUN.csv [RUN2.csv ...]
# One line per file (time_us, labelled by the file name) and, dashed, the bf16 baseline
# measured in the same run (bf16_us) when the file has it. Both axes are log2.
set -euo pipefail

if [ $# -lt 2 ]; then
  echo "usage: $0 OUT.png RUN.csv [RUN2.csv ...]" >&2
  exit 2
fi
command -v gnuplot >/dev/null || { echo "$0: gnuplot not found (apt-get install gnuplot-nox)" >&2; exit 1; }
out=$1
shift
for f in "$@"; do
  [ -r "$f" ] || { echo "$0: cannot read $f" >&2; exit 1; }
  head -n1 "$f" | grep -q '"\?time_us"\?' || { echo "$0: $f has no time_us column (kernel/layer --csv)" >&2; exit 1; }
done

plots=""
for f in "$@"; do
  name=$(basename "$f" .csv)
  plots+="'$f' using (column('M')):(column('time_us')) with linespoints lw 2 title '$name', "
  if head -n1 "$f" | grep -q 'bf16_us'; then
    plots+="'$f' using (column('M')):(column('bf16_us')) with linespoints dt 2 title '$name bf16', "
  fi
done

gnuplot <<EOF
set terminal pngcairo size 1000,640 font ",11"
set output '$out'
set datafile separator comma
set key autotitle columnhead top left
set logscale xy 2
set xlabel 'M (tokens)'
set ylabel 'latency (us, median)'
set grid xtics ytics mxtics mytics
set title 'humming-moe-bench: latency vs M'
plot ${plots%, }
EOF
echo "$0: wrote $out"
