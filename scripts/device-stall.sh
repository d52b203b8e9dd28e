#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Runs a command (a GPU test case, a benchmark) and looks inside it when it goes quiet: each
# line it prints goes to LOG stamped with the seconds since the start, and once it has
# printed nothing for QUIET_S seconds, the GPU's load and, where cuda-gdb can attach, the
# resident kernels' blocks and warps with their program counters go to LOG too. Then it
# runs on to LIMIT_S. For a stall whose cause the host cannot see: the indexed swap test
# ran one launch of a few dozen tiles for minutes, the GPU busy at low power (docs/PERF.md,
# thirty-sixth session). On the lent machines cuda-gdb attaches on Firecracker, not gVisor.
#   LOG=$OUT/stall.txt QUIET_S=20 LIMIT_S=200 scripts/device-stall.sh .snap/test_gemm_swap
set -uo pipefail

LOG=${LOG:?the log file} QUIET_S=${QUIET_S:-20} LIMIT_S=${LIMIT_S:-300}
START=$SECONDS
: >"$LOG"
stamp() { while IFS= read -r line; do echo "$((SECONDS - START)) $line"; done >>"$LOG"; }
timeout "$LIMIT_S" stdbuf -oL "$@" > >(stamp) 2>&1 &
RUN=$!
sleep 1
PID=$(pgrep -n -P "$RUN" || true) # timeout's child: the command, stdbuf having exec'd it

# What the device and the quiet process are doing, once.
look_inside() {
  echo "## quiet for $QUIET_S s at t=$((SECONDS - START)) s; pid ${PID:-none}"
  nvidia-smi --query-gpu=utilization.gpu,power.draw,clocks.sm --format=csv,noheader 2>&1
  [ -n "$PID" ] && awk '{print "process state", $3, "utime", $14, "stime", $15}' "/proc/$PID/stat"
  if ! command -v cuda-gdb >/dev/null; then
    echo "no cuda-gdb here"
    return
  fi
  # The focus warp's next instructions say what it waits on (SASS, no debug info needed).
  [ -n "$PID" ] && timeout 120 cuda-gdb -q -p "$PID" -batch -ex "info cuda kernels" -ex "info cuda blocks" \
    -ex "info cuda warps" -ex 'x/12i $pc' -ex detach 2>&1 | head -240
}

# Twice: once quiet for QUIET_S, again after as long once more, so that warps that moved
# (a long loop) tell apart from warps that did not (a wait).
looked=0
while kill -0 "$RUN" 2>/dev/null; do
  sleep 2
  last=$(stat -c %Y "$LOG")
  if [ "$looked" -lt 2 ] && [ $(($(date +%s) - last)) -ge "$QUIET_S" ]; then
    look_inside >>"$LOG"
    looked=$((looked + 1))
  fi
done
wait "$RUN"
echo "## end t=$((SECONDS - START)) s, exit $?" >>"$LOG"
