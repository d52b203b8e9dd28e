#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU session of the whole engine, for a lent machine with little time: build,
# every GPU test, then the kernel, layer, comm and e2e benchmarks, each step under its
# own time limit so one slow step cannot cost the others. Logs and JSON go to $OUT;
# a short summary is printed last. Run from the repo root after
#   source .devdeps/env.sh
set -uo pipefail
OUT=${OUT:-out/device-session}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"
export HUMMING_CACHE_DIR=${HUMMING_CACHE_DIR:-/tmp/humming-cache}
summary="$OUT/summary.txt"
: >"$summary"

note() { echo "$*" | tee -a "$summary"; }

step() { # name seconds command...
  local name=$1 limit=$2
  shift 2
  local t0=$SECONDS
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  note "step $name: rc=$rc in $((SECONDS - t0)) s"
  return $rc
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$OUT/device.txt"
step build 240 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release && cmake --build $BUILD -j$(nproc)" ||
  { grep -E "error" "$OUT/build.log" | head -20; exit 1; }

bench="$BUILD/humming-moe-bench"
step gpu-tests 300 ctest --test-dir "$BUILD" -L gpu -R "${GPU_TESTS:-.}" --timeout 240 --output-on-failure -V
grep -E "tests passed|tests failed|\*\*\*Failed|Passed|Skipped" "$OUT/gpu-tests.log" | grep -E "^[0-9]+/|tests" | tee -a "$summary"

dense="--model tiny --hidden 8192 --intermediate 4096 --experts 1 --top-k 1 --layout dense --gemm gate_up"
step kernel-dense 150 "$bench" kernel $dense --quant w4a16 --m 1:16384:x4 --baseline torch --json "$OUT/kernel-dense.json"
step kernel-moe-up 150 "$bench" kernel --model deepseek-v3 --quant w4a16 --layout indexed --gemm gate_up \
  --m 1:8192:x4 --json "$OUT/kernel-moe-up.json"
step kernel-moe-down 150 "$bench" kernel --model deepseek-v3 --quant w4a16 --layout indexed --gemm down \
  --m 1:8192:x4 --json "$OUT/kernel-moe-down.json"
for layout in ${LAYER_LAYOUTS:-masked indexed contiguous}; do
  step "layer-$layout" 150 "$bench" layer --model deepseek-v3 --quant w4a16 --layout "$layout" --check 0 \
    --m 1,4,16,64,256,1024,4096,8192 --json "$OUT/layer-$layout.json"
done
step comm-bf16 90 mpirun --allow-run-as-root -np 1 "$bench" comm --model deepseek-v3 --quant bf16 --m 1:8192:x8
step comm-fp8 90 mpirun --allow-run-as-root -np 1 "$bench" comm --model deepseek-v3 --quant w8a8-fp8 --m 1:8192:x8
step e2e 300 "$bench" e2e --model deepseek-v3 --quant w4a16 --concurrency 1,16,64 --input-len "${E2E_IN:-512}" \
  --output-len "${E2E_OUT:-64}" --distinct-layers 2 --json "$OUT/e2e.json"

tar -C "$OUT" -czf "$OUT/logs.tar.gz" --exclude=logs.tar.gz . 2>/dev/null
for f in "$OUT"/kernel-*.log "$OUT"/layer-*.log "$OUT"/comm-*.log "$OUT"/e2e.log; do
  echo "== $(basename "$f")"
  grep -vE "^# (timing|rank|roofline)" "$f" | grep -E "^#|^ +[0-9]" | tail -14
done
