#!/usr/bin/env bash
# scripts/gpu_ab_ws.sh: same-call A/Bs of the warp-specialized prefill kernel on the lent H200.
# Builds the GEMM test and the CLI, runs the grouped-GEMM correctness tests, the GEMM-only bench
# (again under MXMOE_AB_GEMM_ENV if set), the tune sweep (MXMOE_AB_TUNE=1), then `mxmoe bench`
# end to end by default and under MXMOE_AB_B / MXMOE_AB_C (default MXMOE_SM90_WS_CAP=160 / 128
# for both GEMMs). Logs to $OUT (else build-gpu/logs); a table last.
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/ab_tables.sh
. scripts/lib/gpu_build.sh
B=$PWD/build-gpu
LOG=${OUT:-$B/logs}
mkdir -p "$LOG"
gpu_configure "$PWD" "$B" "$LOG/configure.log" || exit 1
# shellcheck disable=SC2086  # MXMOE_AB_TARGETS is a word list
gpu_build "$B" "$LOG/build.log" 16 test_sm90_grouped_gemm mxmoe ${MXMOE_AB_TARGETS:-} || exit 1
echo "build ok; spills: $(grep -c 'bytes spill' "$LOG/build.log")"
"$B/tests/gpu/test_sm90_grouped_gemm" > "$LOG/gemm_tests.txt" 2>&1
echo "test_sm90_grouped_gemm rc $?: $(grep -E '^\[  (PASSED|FAILED)' "$LOG/gemm_tests.txt" | tr '\n' ' ')"
grep "FAILED\|Failure" "$LOG/gemm_tests.txt" | head -10
"$B/tests/gpu/test_sm90_grouped_gemm" --gtest_also_run_disabled_tests \
  --gtest_filter='*DISABLED_WsConsumers*' > "$LOG/ws_bench.txt" 2>&1
# The same GEMM-only cases again under MXMOE_AB_GEMM_ENV (e.g. MXMOE_SM90_WS_TUNE=2,8,2048).
if [ -n "${MXMOE_AB_GEMM_ENV:-}" ]; then
  env $MXMOE_AB_GEMM_ENV "$B/tests/gpu/test_sm90_grouped_gemm" --gtest_also_run_disabled_tests \
    --gtest_filter='*DISABLED_WsConsumers*' > "$LOG/ws_bench_env.txt" 2>&1
fi
# The three-consumer kernel's skew and diagnostics at EP16 T=16384 (tune "lag,stages,flags").
if [ -n "${MXMOE_AB_TUNE:-}" ]; then
  MXMOE_SM90_WS_CAP=160 "$B/tests/gpu/test_sm90_grouped_gemm" --gtest_also_run_disabled_tests \
    --gtest_filter='*DISABLED_WarpSpecializedTune*' > "$LOG/ws_tune.txt" 2>&1
fi
bench="--layouts ${MXMOE_AB_LAYOUTS:-ep16,tp8ep4} --tokens ${MXMOE_AB_TOKENS:-4096,8192,16384} --backends w4a16,w4a8 --routing uniform --router ids --no-baselines --budget 0.1"
# a: the heuristic; b and c: the environments MXMOE_AB_B / MXMOE_AB_C (by default
# MXMOE_SM90_WS_CAP=160, also where the heuristic picks 128; and 128, the one-warpgroup kernel,
# where it picks 160).
AB_B=${MXMOE_AB_B:-MXMOE_SM90_WS_CAP=160}
AB_C=${MXMOE_AB_C:-MXMOE_SM90_WS_CAP=128}
"$B/tools/mxmoe/mxmoe" bench $bench > "$LOG/e2e_a.txt" 2>&1
env $AB_B "$B/tools/mxmoe/mxmoe" bench $bench > "$LOG/e2e_b.txt" 2>&1
env $AB_C "$B/tools/mxmoe/mxmoe" bench $bench > "$LOG/e2e_c.txt" 2>&1
echo "---- GEMM-only (us): tile_n, layout, T, gemm1, gemm1+mx, gemm2 ----"
gemm_only_rows "$LOG/ws_bench.txt"
if [ -f "$LOG/ws_bench_env.txt" ]; then
  echo "---- the same with $MXMOE_AB_GEMM_ENV ----"
  gemm_only_rows "$LOG/ws_bench_env.txt"
fi
echo "---- 3 consumers, EP16 T=16384, tune: gemm1, gemm1+mx, gemm2 ----"
[ -f "$LOG/ws_tune.txt" ] && sed -n 's/^BENCH \(EP16[^ ]*\) .*gemm1 *\([0-9.]*\) us.*gemm1+mx *\([0-9.]*\) us | gemm2 *\([0-9.]*\) us.*/\1 \2 \3 \4/p' "$LOG/ws_tune.txt"
echo "---- end to end (us): a = heuristic, b = $AB_B, c = $AB_C ----"
for f in a b c; do
  echo "[$f] $(e2e_row "$LOG/e2e_$f.txt")"
done
