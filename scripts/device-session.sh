#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# One GPU session of the whole engine, for a lent machine with little time: build, then
# the phases named in PHASES, each step under its own time limit so one slow step cannot
# cost the others. Logs and JSON go to $OUT, packed into $OUT/logs.tar.gz (a device call
# returns only a few files: the logs sit in $OUT/logs); a short summary is printed last. Run from the repo root:
#   source .devdeps/env.sh && PHASES="tests kernels" scripts/device-session.sh
# The machine lacks cmocka and jansson: after ../shared/device/get-cmocka.sh, also
# `(cd .devdeps && apt-get download libjansson4 libjansson-dev)` (env.sh unpacks every .deb).
# Phases: probe (streaming ceilings, conversion rates, decode GEMM over K), tests (every GPU test), kernels
# (dense and MoE GEMMs against torch's cuBLAS), chain (decode GEMMs back to back, PDL on
# and off), layers (the MoE layer in three layouts; LAYER_QUANT, LAYER_M), plan (tuner and
# the default/heuristic/tuned columns of the PLAN_LAYOUTS kernels in each PLAN_QUANT scheme;
# TUNE_ARGS="--layout L --chain 8" tunes one layout back to back, PLAN_ARGS="--chain 8" times
# the columns so), system (comm, e2e, the embedding example), ncu
# (Nsight Compute sections of the dense decode GEMM), w8a8 (the 8-bit GEMMs next to torch:
# fp8 _scaled_mm, else bf16), fp8shapes (the fp8 shapes issue #8 sets targets on;
# FP8_PLAN=all compares the plans), w4a8 (W4A8 next to W8A8 on masked decode), sass (SASS
# of cached kernels named by $SASS, run after the phases that compile them), trace
# (per-CTA timelines of the decode GEMMs, HUMMING_TRACE=1), power (SM clock and power
# while our kernels and torch's run, scripts/power-windows.py).
# A device call gives up to 10 minutes a command: DEADLINE_S cuts every step's limit to what
# is left of that many seconds from the script's start, and skips a step with under 10 left,
# so that the logs are packed and come back. CACHE_IN names a packed kernel cache of an
# earlier call (unpacked where HUMMING_CACHE_DIR does not exist yet), CACHE_OUT where this
# call's cache is packed at the end: a fresh machine then compiles only what is new.
# BENCH_BIN names a humming-moe-bench built here (scripts/device-ab.sh pack-bin, carried in
# .snap): nothing is built there, so only the phases that run the benchmark alone work
# (kernels, chain, trace, w8a8, fp8shapes, w4a8, layers), as in
#   BENCH_BIN=.snap/bench-SHA PHASES="kernels fp8shapes" DENSE_M=1,16,1024,4096 \
#     KERNEL_MOE=down MOE_M=1,2,16 MASKED_M= scripts/device-session.sh
set -uo pipefail
OUT=${OUT:-out/device-session}
BUILD=${BUILD:-build-gpu}
PHASES=${PHASES:-tests kernels layers plan system}
LOGS=$OUT/logs
mkdir -p "$LOGS"
export HUMMING_CACHE_DIR=${HUMMING_CACHE_DIR:-/tmp/humming-cache}
summary="$OUT/summary.txt"
: >"$summary"

note() { echo "$*" | tee -a "$summary"; }

step() { # name seconds command...
  local name=$1 limit=$2
  shift 2
  if [ -n "${DEADLINE_S:-}" ]; then
    local left=$((DEADLINE_S - SECONDS))
    [ "$left" -lt "$limit" ] && limit=$left
    [ "$limit" -lt 10 ] && { : >"$LOGS/$name.log"; note "step $name: skipped, ${left} s left of DEADLINE_S"; return 124; }
  fi
  local t0=$SECONDS
  timeout "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  note "step $name: rc=$rc in $((SECONDS - t0)) s"
  return $rc
}

pack() {
  tar -C "$OUT" -czf "$OUT/logs.tar.gz" logs 2>/dev/null && rm -rf "$LOGS"
  [ -n "${CACHE_OUT:-}" ] && [ -d "$HUMMING_CACHE_DIR" ] &&
    tar -C "$(dirname "$HUMMING_CACHE_DIR")" -czf "$CACHE_OUT" "$(basename "$HUMMING_CACHE_DIR")"
}
trap pack EXIT
if [ -n "${CACHE_IN:-}" ] && [ -f "$CACHE_IN" ] && [ ! -d "$HUMMING_CACHE_DIR" ]; then
  mkdir -p "$(dirname "$HUMMING_CACHE_DIR")" && tar -C "$(dirname "$HUMMING_CACHE_DIR")" -xzf "$CACHE_IN"
fi

has() { [[ " $PHASES " == *" $1 "* ]]; }

# The dense GEMM of the targets: N = 8192 (gate_up of intermediate 4096), K = $1 (8192).
dense_shape() {
  echo "--model tiny --hidden ${1:-8192} --intermediate 4096 --experts 1 --top-k 1 --layout dense --gemm gate_up"
}

nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv,noheader | tee "$LOGS/device.txt"
if [ -n "${BENCH_BIN:-}" ]; then
  # No build there: a fresh machine's first minutes are the dearest (thirty-fifth session:
  # one call in eight got a machine). The benchmark's run path names this machine's
  # /usr/local/cuda/lib, the device's NVRTC sits in lib64.
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  bench=$BENCH_BIN
else
  step build 240 bash -c "cmake -S . -B $BUILD -DCMAKE_BUILD_TYPE=Release -DHM_PYTHON3=$(command -v python3) &&
    cmake --build $BUILD -j$(nproc)" || { grep -E "error" "$LOGS/build.log" | head -20; exit 1; }
  bench="$BUILD/humming-moe-bench"
fi
mpi1="mpirun --allow-run-as-root -np 1"

if has tests; then
  step gpu-tests "${TESTS_LIMIT:-330}" ctest --test-dir "$BUILD" -L gpu -R "${GPU_TESTS:-.}" --timeout "${TEST_TIMEOUT:-300}" \
    --output-on-failure -V
  grep -E "^ *[0-9]+/[0-9]+ Test|tests passed|tests failed" "$LOGS/gpu-tests.log" | tee -a "$summary"
fi

if has kernels; then
  # shellcheck disable=SC2046
  step kernel-dense 120 "$bench" kernel $(dense_shape) --quant w4a16 --m "${DENSE_M:-1:16384:x2}" --baseline torch \
    --json "$LOGS/kernel-dense.json"
  for g in ${KERNEL_MOE-gate_up down}; do
    step "kernel-moe-$g" 150 "$bench" kernel --model deepseek-v3 --quant w4a16 --layout indexed --gemm "$g" \
      --m "${MOE_M:-1,4,16,64,256,1024,4096,8192}" --baseline torch --json "$LOGS/kernel-moe-$g.json"
  done
fi

if has chain; then
  # Steady state: --chain R forwards back to back per sample (distinct weights or routings),
  # with programmatic dependent launch on and off; torch only once.
  for pdl in 1 0; do
    base=$([[ $pdl == 1 ]] && echo torch || echo none)
    for c in ${CHAIN_R:-1 8}; do
      # shellcheck disable=SC2046
      step "chain-dense-c$c-pdl$pdl" 120 env HUMMING_PDL=$pdl "$bench" kernel $(dense_shape) --quant w4a16 \
        --m "${CHAIN_DENSE_M:-1,16}" --chain "$c" --baseline "$base" --json "$LOGS/chain-dense-c$c-pdl$pdl.json"
      for g in ${CHAIN_MOE-gate_up down}; do
        step "chain-moe-$g-c$c-pdl$pdl" 150 env HUMMING_PDL=$pdl "$bench" kernel --model deepseek-v3 --quant w4a16 \
          --layout indexed --gemm "$g" --m "${CHAIN_MOE_M:-1,16,64}" --chain "$c" --baseline "$base" \
          --json "$LOGS/chain-moe-$g-c$c-pdl$pdl.json"
      done
    done
  done
fi

# Per-CTA timelines of the decode GEMMs back to back (HUMMING_TRACE=1: the mma.sync kernels
# print them under their rows; TRACE_LEVEL=2 adds a line per busy CTA, the last to leave
# last), each next to the same run untraced, which times the trace's own cost; dense over
# K, the MoE GEMMs on plan auto and on TRACE_PLANS.
if has trace; then
  for tr in 0 "${TRACE_LEVEL:-1}"; do
    for k in ${TRACE_DENSE_K:-2048 4096 8192 16384}; do
      check=$([[ $tr != 0 && $k == 8192 ]] && echo 1 || echo 0)
      # shellcheck disable=SC2046
      step "trace$tr-dense-k$k" 120 env HUMMING_TRACE="$tr" "$bench" kernel $(dense_shape "$k") --quant w4a16 \
        --m "${TRACE_DENSE_M:-1,16}" --chain 8 --baseline none --check "$check" --json "$LOGS/trace$tr-dense-k$k.json"
    done
    for g in gate_up down; do
      for plan in auto ${TRACE_PLANS-}; do
        step "trace$tr-moe-$g-$plan" 150 env HUMMING_TRACE="$tr" "$bench" kernel --model deepseek-v3 --quant w4a16 \
          --layout indexed --gemm "$g" --m "${TRACE_MOE_M:-1,16}" --chain 8 --baseline none \
          --check "$([[ $tr != 0 ]] && echo 1 || echo 0)" \
          --plan "$plan" --json "$LOGS/trace$tr-moe-$g-$plan.json"
      done
    done
  done
  grep -h -E "^# trace|^# cta |^ *[0-9]+ " "$LOGS"/trace[12]-*.log | cut -c1-400 >"$OUT/traces.txt"
fi

if has w8a8; then
  for q in ${W8A8_QUANTS:-w8a8-fp8 w8a8-int8}; do
    for g in gate_up down; do
      step "w8a8-$q-$g" 150 "$bench" kernel --model deepseek-v3 --quant "$q" --layout contiguous --gemm "$g" \
        --m "${W8A8_M:-1,16,64,256,4096,32768}" --baseline torch --json "$LOGS/w8a8-$q-$g.json"
    done
  done
fi

# The shapes issue #8 names: fp8 block-scaled grouped-contiguous with 4096 rows a group
# (8 experts, top-1, 32768 rows, no shared expert), and grouped-masked decode on DeepSeek-V3's
# experts as its layer runs them (the shared one fused as expert 256).
if has fp8shapes; then
  for g in gate_up down; do
    step "fp8-groups-$g" 150 "$bench" kernel --model deepseek-v3 --experts 8 --top-k 1 --shared-experts 0 \
      --quant w8a8-fp8 --layout contiguous --gemm "$g" --m 32768 --baseline torch --plan "${FP8_PLAN:-auto}" \
      --json "$LOGS/fp8-groups-$g.json"
    [ -n "${MASKED_M-x}" ] || continue
    step "fp8-masked-$g" 150 "$bench" kernel --model deepseek-v3 --quant w8a8-fp8 --layout masked --gemm "$g" \
      --m "${MASKED_M:-1,16,64,256,1024}" --baseline torch --plan "${FP8_PLAN:-auto}" \
      --json "$LOGS/fp8-masked-$g.json"
  done
fi

# W4A8 against W8A8 on the same grouped-masked decode shapes (issue #8: MXFP4 at <= 16 rows
# an expert at least 1.3x the fp8 kernel), our own kernels only.
# W4A8_ARGS adds bench options (--chain 8 --plan heuristic).
if has w4a8; then
  for q in ${W4A8_QUANTS:-w4a8-mxfp4 w8a8-fp8}; do
    for g in ${W4A8_GEMMS:-gate_up down}; do
      # shellcheck disable=SC2086
      step "w4a8-$q-$g" 120 "$bench" kernel --model deepseek-v3 --quant "$q" --layout masked --gemm "$g" \
        --m "${W4A8_M:-1,4,16,64}" --baseline none ${W4A8_ARGS:-} --json "$LOGS/w4a8-$q-$g.json"
      grep -E "^ +[0-9]+ " "$LOGS/w4a8-$q-$g.log" | sed "s/^/w4a8 $q $g: /" | tee -a "$summary"
    done
  done
fi

if has layers; then
  for layout in ${LAYER_LAYOUTS:-masked indexed contiguous}; do
    step "layer-$layout" "${LAYER_LIMIT:-150}" "$bench" layer --model deepseek-v3 --quant "${LAYER_QUANT:-w4a16}" --layout "$layout" \
      --check 0 --m "${LAYER_M:-1,4,16,64,256,1024,4096,8192}" --baseline "${LAYER_BASELINE:-ours}" \
      --json "$LOGS/layer-$layout.json"
  done
fi

if has plan; then
  # PLAN_QUANT may name several schemes, tuned and timed one after the other (W4A8 against
  # W8A8 on the same tuned shapes, issue #8).
  for q in ${PLAN_QUANT:-w4a16}; do
    # shellcheck disable=SC2086
    [ -n "${TUNE-1}" ] && step "tune-$q" "${TUNE_LIMIT:-480}" "$BUILD/humming-moe" tune --model deepseek-v3 \
      --quant "$q" ${TUNE_ARGS:-}
    for layout in ${PLAN_LAYOUTS:-indexed}; do
      for g in ${PLAN_GEMMS:-gate_up down}; do
        # shellcheck disable=SC2086
        step "plan-$q-$layout-$g" "${PLAN_LIMIT:-150}" "$bench" kernel --model deepseek-v3 --quant "$q" \
          --layout "$layout" --gemm "$g" --plan all --baseline none --m "${PLAN_M:-1:4096:x2}" ${PLAN_ARGS:-} \
          --json "$LOGS/plan-$q-$layout-$g.json"
      done
    done
  done
fi

if has system; then
  step comm 90 $mpi1 "$bench" comm --model deepseek-v3 --quant bf16 --m 1:8192:x8
  step layer-dist 90 $mpi1 "$bench" layer --model deepseek-v3 --quant w4a16 --ep 1 --m 1,128,1024 --baseline none
  step e2e "${E2E_LIMIT:-300}" "$bench" e2e --model deepseek-v3 --quant w4a16 --concurrency 1,16,64 --input-len "${E2E_IN:-512}" \
    --output-len "${E2E_OUT:-64}" --distinct-layers 2 --json "$LOGS/e2e.json"
  step embed 90 "$BUILD/humming-moe-embed-example" --backend cuda --gpus 1
fi

# Streaming ceilings by fetch method and size (test_mem_stream), the rates of the weight-code
# conversions (test_unpack_rate), then the dense decode GEMM over K (N = 8192): the slope is
# its streaming rate, the intercept its fixed cost.
if has probe; then
  step mem-stream 120 "$BUILD/tests/test_mem_stream"
  grep -E "^#|^  [a-z]" "$LOGS/mem-stream.log" | tee -a "$summary"
  step unpack-rate 60 "$BUILD/tests/test_unpack_rate"
  grep -E "^#|^  [a-z]" "$LOGS/unpack-rate.log" | tee -a "$summary"
  for m in ${PROBE_M:-1 16}; do
    for k in ${PROBE_K:-2048 4096 8192 16384 32768}; do
      # shellcheck disable=SC2046
      step "kfit-m$m-k$k" 60 "$bench" kernel $(dense_shape "$k") --quant w4a16 --m "$m" --baseline none \
        --json "$LOGS/kfit-m$m-k$k.json"
      note "kfit M=$m K=$k: $(grep -E "^ +$m " "$LOGS/kfit-m$m-k$k.log" | head -1)"
    done
  done
fi

# SM clock, power and throttle reasons every POWER_MS ms while our kernel and then torch's
# run for POWER_ITERS timed runs each, the bench's protocol on both sides (L2 flushed before
# each run): issue #8's fp8 gate_up groups and issue #5's dense W4A16 M = 4096. Whether the
# rate falls with the clock over a run, and whose kernel the power cap holds back more.
if has power; then
  smi="$LOGS/power-smi.csv" marks="$LOGS/power-marks.txt"
  # power.draw is a running average that trails a kernel by ~0.5 s (twenty-second session):
  # the instantaneous reading, where the driver has it, keeps a window's tail out of it.
  watts=power.draw.instant
  nvidia-smi --query-gpu="$watts" --format=csv,noheader >/dev/null 2>&1 || watts=power.draw
  nvidia-smi --query-gpu=timestamp,clocks.sm,"$watts",temperature.gpu,clocks_event_reasons.active \
    --format=csv,noheader -lms "${POWER_MS:-10}" >"$smi" 2>&1 &
  smi_pid=$!
  window() { # name command...
    local name=$1
    shift
    sleep 3 # the clock back up between windows
    echo "$(date +%H:%M:%S.%N | cut -c1-12) $name-start" >>"$marks"
    step "power-$name" 300 "$@"
    echo "$(date +%H:%M:%S.%N | cut -c1-12) $name-end" >>"$marks"
  }
  fp8="--model deepseek-v3 --experts 8 --top-k 1 --shared-experts 0 --quant w8a8-fp8 --layout contiguous --gemm gate_up --m 32768"
  torch_fp8="--mode kernel --fp8 --n 4096 --k 7168 --experts 8 --top-k 1 --m 32768"
  torch_w4="--mode kernel --n 8192 --k 8192 --experts 1 --top-k 1 --m 4096"
  iters=${POWER_ITERS:-500}
  # shellcheck disable=SC2086,SC2046
  {
    "$bench" kernel $fp8 --iters 2 --warmup 1 --check 0 --baseline none >/dev/null 2>&1 # compile first
    "$bench" kernel $(dense_shape) --quant w4a16 --m 4096 --iters 2 --warmup 1 --check 0 --baseline none >/dev/null 2>&1
    window fp8-ours "$bench" kernel $fp8 --iters "$iters" --warmup 5 --check 0 --baseline none
    window fp8-torch python3 launch/baseline_torch.py $torch_fp8 --iters "$iters" --warmup 5
    window w4-ours "$bench" kernel $(dense_shape) --quant w4a16 --m 4096 --iters $((3 * iters)) --warmup 5 \
      --check 0 --baseline none
    window w4-torch python3 launch/baseline_torch.py $torch_w4 --iters $((3 * iters)) --warmup 5
  }
  kill "$smi_pid"
  python3 scripts/power-windows.py "$smi" "$marks" | tee -a "$summary"
fi

ncu_summary() { # log
  grep -E "hm_gemm|Grid Size|Block Size|Registers|Duration|DRAM Throughput|Memory Throughput|Achieved Occ|Issue Slots|Issued Warp|No Eligible|Warp Cycles Per Issued|Active Warps Per|Eligible Warps|Waves Per SM|Stall|L2 Hit|L1/TEX Hit|Mem Busy|Max Bandwidth|Mem Pipes" \
    "$1" | cut -c1-150 | tee -a "$summary"
}

# NCU_SECTIONS="--set full" for everything Nsight measures; NCU_FP8=1 adds the fp8
# block-scaled grouped-contiguous GEMM of issue #8 (8 x 4096 rows, gate_up).
# NCU_SOURCE=1 keeps each report and exports its per-instruction SASS page: where the warps
# stall, instruction by instruction (needs the SourceCounters of --set full).
ncu_step() { # name seconds launches-to-skip bench-args...
  local name=$1 limit=$2 skip=$3 report=()
  shift 3
  [ -n "${NCU_SOURCE:-}" ] && report=(-o "$LOGS/$name")
  # shellcheck disable=SC2086
  step "$name" "$limit" ncu --clock-control none -k regex:hm_gemm --launch-skip "$skip" --launch-count 1 $sections \
    "${report[@]}" "$bench" "$@"
  if [ -n "${NCU_SOURCE:-}" ]; then
    step "$name-details" 60 ncu -i "$LOGS/$name.ncu-rep" --page details
    step "$name-sass" 120 ncu -i "$LOGS/$name.ncu-rep" --page source --csv --print-source sass
    rm -f "$LOGS/$name.ncu-rep"  # tens of MB: the two pages carry what is read from it
    ncu_summary "$LOGS/$name-details.log"
  else
    ncu_summary "$LOGS/$name.log"
  fi
}

if has ncu; then
  dense=$(dense_shape)
  sections=${NCU_SECTIONS:-"--section SpeedOfLight --section LaunchStats --section Occupancy --section SchedulerStats
    --section WarpStateStats --section MemoryWorkloadAnalysis"}
  for run in ${NCU_RUNS:-auto:1 default:1}; do
    plan=${run%%:*} m=${run##*:}
    # shellcheck disable=SC2086
    ncu_step "ncu-$plan-m$m" 180 3 kernel $dense --quant w4a16 --m "$m" --plan "$plan" --iters 3 --warmup 1 \
      --check 0 --graph 0 --baseline none
  done
  if [ -n "${NCU_FP8:-}" ]; then
    ncu_step ncu-fp8-groups 150 2 kernel --model deepseek-v3 --experts 8 --top-k 1 --shared-experts 0 \
      --quant w8a8-fp8 --layout contiguous --gemm gate_up --m 32768 --iters 2 --warmup 1 --check 0 --graph 0 \
      --baseline none
  fi
fi

# SASS of the cached kernels whose names match $SASS (a grep -E pattern), for instruction
# counts per loop: the compile cache keeps each kernel's options.txt (its name) and cubin.
if has sass; then
  for d in "$HUMMING_CACHE_DIR"/kernels/*/* "$BUILD"/test-cache/kernels/*/*; do
    [ -f "$d/kernel.cubin" ] || continue
    name=$(grep -oE "hm_[a-z0-9_]+\.cu -arch=sm_[0-9a]+" "$d/options.txt" | head -1 | tr ' =' '__')
    [ -n "$name" ] && echo "$name" | grep -qE "${SASS:-m8n256k128_w1x4x2_s4}" || continue
    cuobjdump -sass "$d/kernel.cubin" >"$LOGS/sass-$name.txt" 2>&1
    note "sass $name: $(grep -cE '^ +/\*[0-9a-f]{4}\*/' "$LOGS/sass-$name.txt") instructions"
  done
fi

for f in "$LOGS"/kernel-*.log "$LOGS"/w8a8-*.log "$LOGS"/fp8-*.log "$LOGS"/w4a8-*.log "$LOGS"/layer-*.log "$LOGS"/plan-*.log "$LOGS"/comm.log "$LOGS"/e2e.log; do
  [ -f "$f" ] || continue
  echo "== $(basename "$f")"
  grep -vE "^# (timing|rank|roofline)" "$f" | grep -E "^#|^ +[0-9]" | tail -14
done
