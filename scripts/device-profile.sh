#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Where the decode GEMM spends its time: Nsight Compute sections of the dense W4A16
# kernel at M = 1, 16, 64 and of the bf16 kernel at M = 1 (N = K = 8192), then the
# MoE kernel and layer benchmarks against torch's per-expert cuBLAS loop. Logs to $OUT.
# Run from the repo root after `source .devdeps/env.sh`.
set -uo pipefail
OUT=${OUT:-out/device-profile}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
export HUMMING_CACHE_DIR=${HUMMING_CACHE_DIR:-/tmp/humming-cache}

step() { # name seconds command...
  local name=$1 limit=$2 t0=$SECONDS
  shift 2
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  echo "step $name: rc=$rc in $((SECONDS - t0)) s" | tee -a "$OUT/summary.txt"
  return $rc
}

step build 240 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j$(nproc)" ||
  { grep -E "error" "$OUT/build.log" | head -20; exit 1; }
bench="$BUILD/humming-moe-bench"
dense="--model tiny --hidden 8192 --intermediate 4096 --experts 1 --top-k 1 --layout dense --gemm gate_up"
sections="--section SpeedOfLight --section WarpStateStats --section SchedulerStats --section ComputeWorkloadAnalysis
  --section MemoryWorkloadAnalysis --section LaunchStats --section Occupancy --section InstructionStats"
for run in "w4a16 1" "w4a16 16" "w4a16 64" "bf16 1"; do
  set -- $run
  # shellcheck disable=SC2086
  step "ncu-$1-m$2" 120 ncu --clock-control none -k regex:hm_gemm --launch-skip 3 --launch-count 1 $sections \
    "$bench" kernel $dense --quant "$1" --m "$2" --iters 3 --warmup 1 --check 0 --graph 0 --baseline none
done
for flags in "--graph 0 --flush 1" "--graph 1 --flush 0"; do
  # shellcheck disable=SC2086
  step "dense-${flags// /}" 60 "$bench" kernel $dense --quant w4a16 --m 1,16 --check 0 $flags --baseline none
done
for g in gate_up down; do
  step "moe-$g" 200 "$bench" kernel --model deepseek-v3 --quant w4a16 --layout indexed --gemm "$g" \
    --m 1,4,16,64,256,1024,4096,8192 --check 0 --baseline torch --json "$OUT/moe-$g.json"
done
for layout in masked contiguous; do
  step "layer-$layout" 200 "$bench" layer --model deepseek-v3 --quant w4a16 --layout "$layout" --check 0 \
    --m 1,4,16,64,256,1024,4096,8192 --baseline torch --json "$OUT/layer-$layout.json"
done
tar -C "$OUT" -czf "$OUT/logs.tar.gz" --exclude=logs.tar.gz . 2>/dev/null
for f in "$OUT"/dense-*.log "$OUT"/moe-*.log "$OUT"/layer-*.log; do
  echo "== $(basename "$f")"
  grep -vE "^# (timing|rank|roofline)" "$f" | grep -E "^#|^ +[0-9]" | tail -12
done
