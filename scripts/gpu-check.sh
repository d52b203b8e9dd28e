#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Everything one GPU session needs for the weight-only GEMM, in one command: build,
# the GPU tests (GPU_TESTS selects them, default the GEMM ones), and the W4A16 g128
# N=K=8192 timing next to torch bf16 matmul (CUDA events, cold weights, medians).
# Logs go to $OUT (default out/gpu-check). Usage, from the repo root:
#   source .devdeps/env.sh && scripts/gpu-check.sh
set -uo pipefail
OUT=${OUT:-out/gpu-check}
BUILD=${BUILD:-build-gpu}
mkdir -p "$OUT"

nvidia-smi --query-gpu=name,clocks.max.sm,memory.total,driver_version --format=csv | tee "$OUT/device.txt"

# Release (-O3) finds maybe-uninitialized cases that RelWithDebInfo does not; they stay
# warnings here so that one module's warning does not cost a whole GPU session.
if ! { cmake -S . -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_FLAGS=-Wno-error=maybe-uninitialized && cmake --build "$BUILD" -j"$(nproc)"; } \
    >"$OUT/build.log" 2>&1; then
  grep -E "error|Error" "$OUT/build.log" | head -40
  exit 1
fi

# -V shows each case's error and the timing table; the summary lines are grepped below.
ctest --test-dir "$BUILD" -L gpu -R "${GPU_TESTS:-test_gemm}" -V --output-on-failure >"$OUT/ctest.log" 2>&1
rc=$?
grep -E "FAIL|rel_err .* ok$|identical|#|^[0-9]+: +[0-9]+ |Passed|Failed|tests passed|ERROR" "$OUT/ctest.log" |
  grep -vE "rel_err .* ok$" | sed 's/^[0-9]*: //' | tail -80
echo "GEMM cases ok: $(grep -cE 'rel_err .* ok$' "$OUT/ctest.log"), failed: $(grep -cE 'rel_err .* FAIL$' "$OUT/ctest.log")"

python3 - <<'PY' 2>&1 | tee "$OUT/torch.log"
import statistics, torch
n = k = 8192
# Rotating over copies keeps the weights cold in L2 without the dirty lines a memset
# flush leaves behind (their write-back would be charged to the timed matmul).
ws = [torch.randn(n, k, dtype=torch.bfloat16, device="cuda") for _ in range(3)]
print("# torch", torch.__version__, torch.cuda.get_device_name())
print("#     M  torch_bf16_us  TFLOP/s")
for m in (1, 16, 64, 256, 1024, 4096):
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    times = []
    for i in range(23):
        w = ws[i % len(ws)]
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        torch.matmul(a, w.t())
        e.record()
        torch.cuda.synchronize()
        if i >= 3:
            times.append(s.elapsed_time(e))
    t = statistics.median(times)
    print(f"{m:7d} {t * 1e3:14.2f} {2 * m * n * k / (t * 1e-3) / 1e12:8.1f}")
PY
exit $rc
