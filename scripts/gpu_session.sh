#!/usr/bin/env bash
# scripts/gpu_session.sh: everything a session wants from one device call, when calls are scarce
# (bench/NOTES.md, thirty-fifth and thirty-sixth sessions: most start attempts got no machine).
# On the device (carry [".deps"], after `scripts/deps.sh --carry` here):
#   bash scripts/gpu_session.sh
# 1. scripts/gpu_check.sh: build, every GPU test, mxmoe check, and the table with --clocks: on an
#    H200 (the card the targets are judged on) issue 4's token counts and the peers' (16, 1024:
#    KIMI_K3.md), decode only (T = 1, 8, 64) elsewhere (an H100's full table is in
#    bench/RESULTS.md, thirty-fifth session);
# 2. the GPU router against caller ids at T = 1, 8, 64 with the decode trace, RouteAlone, and
#    nvidia-smi's power section: router.txt; on an H200 also the rest of issue 4's matrix (the
#    full layer with its cuBLAS baselines, 89 GB of dequantized weights that only an H200 holds;
#    skewed routing in all three layouts): matrix.txt;
# 3. bench_chain_floor (the decode chain's structure with no math, D round 30): stdout.
# Prints gpu_check's summary and table LAST. $OUT keeps at most 8 files: build.log and ctest.log
# are dropped after a green build to make room for router.txt.
# MXMOE_SESSION_TOKENS overrides the table's token list; MXMOE_SESSION_TESTS=0 skips the GPU
# tests and mxmoe check (gpu_check's MXMOE_GPU_SKIP_TESTS: only where no kernel changed since
# they last passed on a device).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
LOG=${OUT:-build-gpu/logs}
mkdir -p build-gpu
mkdir -p "$LOG"
h200=
if nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | grep -q H200; then
  h200=1
  tokens=1,8,16,64,512,1024,4096,8192,16384
else
  tokens=1,8,64
fi
tokens=${MXMOE_SESSION_TOKENS:-$tokens}
# The options every table of the session shares.
common=(--backends 'w4a16,w4a8' --router ids --budget 0.1 --clocks)
flags="--layouts ep16,tp8ep4 --tokens $tokens --routing uniform ${common[*]}"
skip=
[ "${MXMOE_SESSION_TESTS:-1}" = 0 ] && skip=1
MXMOE_GPU_SKIP_TESTS=$skip MXMOE_GPU_BENCH="$flags" bash scripts/gpu_check.sh \
  > build-gpu/session.txt 2>&1
rc=$?
# Steps 2 and 3 need two targets gpu_check builds only with the tests (or not at all).
ninja -C build-gpu test_gpu_glue_kernels bench_chain_floor > build-gpu/session_build.log 2>&1 ||
  echo "build of test_gpu_glue_kernels / bench_chain_floor FAILED (build-gpu/session_build.log)"
bin=build-gpu/tools/mxmoe/mxmoe
glue=build-gpu/tests/gpu/test_gpu_glue_kernels
if [ -x "$bin" ] && [ -x "$glue" ]; then
  rm -f "$LOG/build.log" "$LOG/ctest.log"
  {
    MXMOE_DECODE_TRACE=1 "$bin" bench --layouts ep16,tp8ep4 --tokens 1,8,64 --router gpu,ids \
      --backends w4a16 --routing uniform --no-baselines --budget 0.1 --clocks
    "$glue" --gtest_also_run_disabled_tests --gtest_filter='*RouteAlone*'
    nvidia-smi -q -d POWER
  } > "$LOG/router.txt" 2>&1
  echo "router: rc $? (router.txt)"
fi
if [ -n "$h200" ] && [ -x "$bin" ]; then
  {
    timeout 240 "$bin" bench --layouts full --tokens 1,8,64,512,4096,8192,16384 \
      --routing uniform --baseline-cap-gb 64 "${common[@]}"
    timeout 120 "$bin" bench --layouts ep16,tp8ep4,full --tokens 1,64,4096,16384 \
      --routing skewed --no-baselines "${common[@]}"
  } > "$LOG/matrix.txt" 2>&1
  echo "matrix: rc $? (matrix.txt)"
fi
if [ -x build-gpu/tests/gpu/bench_chain_floor ]; then
  timeout 120 build-gpu/tests/gpu/bench_chain_floor
  echo "bench_chain_floor: rc $?"
fi
echo "step 1 (gpu_check): rc $rc"
sed -n '/---- summary/,$p' build-gpu/session.txt | cut -c1-140
exit "$rc"
