#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Commits against each other on a lent GPU machine, in one call: the way every kernel change
# of docs/PERF.md since the seventh session was measured. Two steps:
#   here:   scripts/device-ab.sh pack BASE HEAD       (git archive of each into .snap/)
#           or pack-bin BASE HEAD, which also builds each commit's humming-moe-bench here
#           (.snap/bench-SHA; it embeds its kernels' sources, and a binary built on this
#           Debian machine runs there): `run` then builds no tree but the one GPU_TESTS
#           needs, which saved most of a fresh machine's first minutes (thirty-first session)
#   there:  the device call, carrying .devdeps (../shared/device/get-cmocka.sh, then
#           `(cd .devdeps && apt-get download libjansson4 libjansson-dev)`) and .snap, runs
#           COMMITS="BASE HEAD" BENCH="..." scripts/device-ab.sh run
# A commit's tree, not the working tree, is what runs: the device's checkout may hold other
# work in progress. `run` builds every commit side by side, runs the GPU tests matched by
# GPU_TESTS on the last one, then each BENCH line (arguments of `humming-moe-bench kernel`,
# lines separated by ';') on every commit in turn, back to back (--chain 8, no baseline,
# output checked on the last commit only, unless CHECK=0). Results go to $OUT/tests.txt and
# $OUT/bench.txt.
# Compare within one call only: the same commit has run 7 % apart on two machines of a kind.
# Each commit compiles into a kernel cache of its own. SASS="R2UR|HGMMA" then counts those
# opcodes in every kernel a commit compiled ($OUT/sass.txt); AFTER_PHASES="fp8shapes kernels"
# runs those phases of device-session.sh on the tree of AFTER_ON (one of COMMITS, the last by
# default) with what is left of CALL_LIMIT seconds (580) from the start, its logs under
# $OUT/session. With GPU_TESTS, the tests' kernel cache comes back as $OUT/test-cache.tgz:
# copied to .snap/test-cache.tgz here, the next call's tests start from it. TESTS_JOBS=N runs
# N test binaries at once, each compiling on its own cores, and CASES_JOBS=N every case of
# each binary as its own process, N at a time (run_cases): for the checks only, never
# beside a timing test (test_gemm_perf, test_unpack_rate).
set -uo pipefail

pack() {
  mkdir -p .snap
  grep -qxF "/.snap/" .git/info/exclude 2>/dev/null || echo "/.snap/" >>.git/info/exclude
  for c in "$@"; do
    local sha
    sha=$(git rev-parse --short "$c") || exit 1
    git archive "$sha" -o ".snap/$sha.tar" && echo ".snap/$sha.tar"
  done
}

# The archive of each commit, and its benchmark built here in a scratch worktree.
pack_bin() {
  pack "$@" || exit 1
  local c sha dir
  for c in "$@"; do
    sha=$(git rev-parse --short "$c")
    dir=$(mktemp -d)
    tar -xf ".snap/$sha.tar" -C "$dir" &&
      cmake -S "$dir" -B "$dir/build" -DCMAKE_BUILD_TYPE=Release >/dev/null &&
      cmake --build "$dir/build" -j"$(nproc)" --target humming-moe-bench >/dev/null &&
      cp "$dir/build/humming-moe-bench" ".snap/bench-$sha" && echo ".snap/bench-$sha"
    local rc=$?
    rm -rf "$dir"
    [ $rc -eq 0 ] || exit 1
  done
}

kill_tree() { # pid: it and every process under it (a build's cmake and make outlive a killed subshell)
  local child
  for child in $(pgrep -P "$1"); do kill_tree "$child"; done
  kill "$1" 2>/dev/null
}

build() { # sha full: full=1 builds the tree even where its benchmark was carried (pack-bin)
  # REUSE=1: a warm machine keeps /tmp between calls, so a tree built by the call before stays
  # (a carried benchmark alone does not make a tree the tests can run in).
  [ -n "${REUSE:-}" ] && [ -x "/tmp/$1/build-gpu/humming-moe-bench" ] &&
    { [ "$2" = 0 ] || [ -f "/tmp/$1/build-gpu/CMakeCache.txt" ]; } && return 0
  rm -rf "/tmp/$1" && mkdir -p "/tmp/$1" && tar -xf ".snap/$1.tar" -C "/tmp/$1" || return 1
  if [ "$2" = 0 ] && [ -x ".snap/bench-$1" ]; then
    mkdir -p "/tmp/$1/build-gpu" && cp ".snap/bench-$1" "/tmp/$1/build-gpu/humming-moe-bench"
    return
  fi
  (cd "/tmp/$1" && cmake -S . -B build-gpu -DCMAKE_BUILD_TYPE=Release -DHM_PYTHON3="$(command -v python3)" \
    >/dev/null && cmake --build build-gpu -j"$(nproc)" >/dev/null)
}

bench() { # sha check line
  local sha=$1 check=$2 args
  read -r -a args <<<"$3"
  (cd "/tmp/$sha" && HUMMING_CACHE_DIR="/tmp/$sha-cache" timeout "${BENCH_LIMIT:-120}" build-gpu/humming-moe-bench \
    kernel "${args[@]}" --chain 8 --baseline none --check "${CHECK:-$check}" 2>&1) | grep -E "^ +[0-9]|WARN|rror" |
    cut -c1-210
}

sass_counts() { # sha
  local d name
  for d in "/tmp/$1-cache"/kernels/*/*; do
    [ -f "$d/kernel.cubin" ] || continue
    name=$(grep -oE "hm_[a-z0-9_]+\.cu" "$d/options.txt" | head -1)
    cuobjdump -sass "$d/kernel.cubin" >/tmp/ab-sass.txt 2>&1
    printf '%s %s:' "$1" "$name"
    for op in ${SASS//|/ }; do printf ' %s %d' "$op" "$(grep -cE "\b$op\b" /tmp/ab-sass.txt)"; done
    echo
  done
}

# The GPU tests' kernel cache, for the next call to start them warm: a test binary compiles
# dozens of kernels into a cold one (test_gemm_wgmma: over 400 s on an H100). Only what fits
# the 16 MiB a returned file may hold comes back.
save_test_cache() { # sha
  tar -czf "$OUT/test-cache.tgz" -C "/tmp/$1/build-gpu" test-cache 2>/dev/null || return 0
  if [ "$(stat -c %s "$OUT/test-cache.tgz")" -gt $((16 << 20)) ]; then
    rm -f "$OUT/test-cache.tgz"
    echo "the test cache is over 16 MiB packed: not returned" >>"$OUT/tests.txt"
  fi
}

# Every case of each GPU test binary GPU_TESTS matches as a process of its own
# (HM_TEST_FILTER), CASES_JOBS at a time over all the binaries, in the tree's root: a
# binary's kernels then compile on as many cores instead of one, sharing the tests' kernel
# cache through its file locks (test_gemm_w8a8 did not finish in a call's 519 s on one
# core; the binaries after test_gemm_moe's one long case waited behind it, thirty-second
# session). For the checks only, as TESTS_JOBS. A line a case, PASS, SKIP, FAIL or TIMEOUT
# (UNFINISHED where TESTS_LIMIT cut it off), written at once (the cases end in any order), a
# failure's lines after it.
gpu_cases() { # "binary case" lines of the GPU tests GPU_TESTS matches, from the tree's root
  local bin
  for bin in $(ctest --test-dir build-gpu -N -L gpu -R "$GPU_TESTS" | sed -nE 's/^ +Test +#[0-9]+: +//p'); do
    grep -oE "cmocka_unit_test\([a-z0-9_]+\)" "tests/gpu/$bin.c" | sed -E "s/.*\((.*)\)/$bin \1/"
  done
}

run_cases() {
  # shellcheck disable=SC2016
  gpu_cases |
    xargs -P "$CASES_JOBS" -L 1 bash -c '
        log=$(HUMMING_CACHE_DIR=build-gpu/test-cache HM_TEST_FILTER=$1 timeout "${TEST_TIMEOUT:-200}" \
          "build-gpu/tests/$0" 2>&1)
        case $? in 0) r=PASS ;; 77) r=SKIP ;; 124) r=TIMEOUT ;; *) r=FAIL ;; esac
        # A case cut off by its limit: how far it got (the GPU tests print a line a check,
        # line-buffered since the thirty-fifth session).
        detail=$(case $r in
          FAIL) grep -E "FAIL|rror|Assert|rel_err" <<<"$log" | grep -v " ok$" | head -8 ;;
          TIMEOUT) printf "%d checks ok, the last line: %s" "$(grep -c " ok$" <<<"$log")" "$(tail -1 <<<"$log")" ;;
          esac)
        if [ -n "$detail" ]; then printf "%s %s %s in %d s\n%s\n" "$r" "$0" "$1" "$SECONDS" "$detail"
        else printf "%s %s %s in %d s\n" "$r" "$0" "$1" "$SECONDS"; fi'
}

run() {
  : "${OUT:?OUT must name the folder results go to}"
  mkdir -p "$OUT"
  # shellcheck disable=SC1091
  source .devdeps/env.sh
  read -r -a commits <<<"${COMMITS:?COMMITS must name the packed commits}"
  # The CUDA toolkit's libraries (NVRTC) for a carried benchmark, whose run path is this
  # machine's /usr/local/cuda/lib.
  export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  local last=${commits[${#commits[@]} - 1]}
  # The trees build at once, so that a call waits for the slowest build, not for their sum.
  local pids=() i p
  for c in "${commits[@]}"; do
    build "$c" "$([[ -n ${GPU_TESTS:-} && $c == "$last" ]] && echo 1 || echo 0)" &
    pids+=($!)
  done
  for i in "${!pids[@]}"; do
    wait "${pids[$i]}" || {
      echo "build of ${commits[$i]} failed"
      for p in "${pids[@]}"; do kill_tree "$p"; done
      exit 1
    }
  done
  if [ -n "${GPU_TESTS:-}" ]; then
    [ -f .snap/test-cache.tgz ] && tar -xzf .snap/test-cache.tgz -C "/tmp/$last/build-gpu"
    if [ -n "${CASES_JOBS:-}" ]; then
      (cd "/tmp/$last" && timeout "${TESTS_LIMIT:-240}" bash -c "$(declare -f gpu_cases run_cases); run_cases") 2>&1 |
        tee "$OUT/tests.txt"
      # A case the limit cut off prints nothing of its own (thirty-second session: one of
      # test_gemm_w8a8's eleven went missing so).
      (cd "/tmp/$last" && gpu_cases) | while read -r bin case; do
        grep -q " $bin $case in " "$OUT/tests.txt" || echo "UNFINISHED $bin $case: TESTS_LIMIT ran out"
      done | tee -a "$OUT/tests.txt"
    else
      (cd "/tmp/$last" && timeout "${TESTS_LIMIT:-240}" ctest --test-dir build-gpu -L gpu -R "$GPU_TESTS" \
        -j "${TESTS_JOBS:-1}" --timeout "${TEST_TIMEOUT:-200}" --output-on-failure) 2>&1 |
        grep -E "Test +#|tests passed|FAIL|rror|Assert|rel_err" | head -40 | tee "$OUT/tests.txt"
    fi
    save_test_cache "$last"
  fi
  IFS=';' read -r -a lines <<<"${BENCH:-}"
  for line in "${lines[@]}"; do
    for c in "${commits[@]}"; do
      echo "== $c: $line"
      bench "$c" "$([[ $c == "$last" ]] && echo 1 || echo 0)" "$line"
    done
  done 2>&1 | tee "$OUT/bench.txt"
  if [ -n "${SASS:-}" ]; then
    for c in "${commits[@]}"; do sass_counts "$c"; done >"$OUT/sass.txt"
  fi
  if [ -n "${AFTER_PHASES:-}" ]; then
    local on=${AFTER_ON:-$last}
    (cd "/tmp/$on" && OUT="$OUT/session" HUMMING_CACHE_DIR="/tmp/$on-cache" PHASES="$AFTER_PHASES" \
      DEADLINE_S=$((${CALL_LIMIT:-580} - SECONDS)) bash scripts/device-session.sh >"$OUT/session.txt" 2>&1)
  fi
}

case "${1:-}" in
pack) shift && pack "$@" ;;
pack-bin) shift && pack_bin "$@" ;;
run) run ;;
*) echo "usage: $0 pack COMMIT... | pack-bin COMMIT... | run   (see the comment at the top)" >&2 && exit 2 ;;
esac
