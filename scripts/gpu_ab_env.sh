#!/usr/bin/env bash
# scripts/gpu_ab_env.sh: a same-binary A/B of environment knobs end to end, on the lent GPU, in
# one call: builds the CLI and the decode GEMM test, runs the decode host / split-K tests, then
# `mxmoe bench` under MXMOE_AB_A (default: no knob) and MXMOE_AB_B in turn, for every seed and
# pass, and prints one line per case last (the distinct experts each draw used beside both
# variants' medians: a decode row's time steps with them, bench/NOTES.md D round 41).
#   MXMOE_AB_B      the B variant's environment, e.g. "MXMOE_DECODE_BALANCE=0" (required)
#   MXMOE_AB_A      the A variant's environment (default empty: the rule)
#   MXMOE_AB_C      a third variant's environment (default none), e.g. MXMOE_DECODE_BALANCE=1
#   MXMOE_AB_BENCH  the bench flags (default: uniform caller ids, 100 reps, ep16 and tp8ep4 at
#                   T = 1 and 8, no baselines)
#   MXMOE_AB_SEEDS  the bench seeds (default "1234 77"); MXMOE_AB_PASSES (default 2)
#   MXMOE_AB_TESTS  a --gtest_filter for test_sm90_decode_gemm (default the host, split-K and
#                   real-width cases; empty: no tests)
# Run on the device as:  MXMOE_AB_B=... bash scripts/gpu_ab_env.sh   (carry [".deps"])
# Logs to $OUT (else build-gpu/logs): build.log, decode_tests.txt, ab_env.txt.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/ab_tables.sh
. scripts/lib/gpu_build.sh
B=$PWD/build-gpu
LOG=${OUT:-$B/logs}
CSV=$B/ab_env
mkdir -p "$LOG"
rm -rf "$CSV" && mkdir -p "$CSV"
B_ENV=${MXMOE_AB_B:?set MXMOE_AB_B to the B variant environment, e.g. MXMOE_DECODE_BALANCE=0}
A_ENV=${MXMOE_AB_A:-}
C_ENV=${MXMOE_AB_C:-}
VARIANTS="a b"
[ -n "$C_ENV" ] && VARIANTS="a b c"
DEFAULT_BENCH="--routing uniform --router ids --no-baselines --reps 100 --layouts ep16,tp8ep4"
BENCH=${MXMOE_AB_BENCH:-$DEFAULT_BENCH --tokens 1,8}
SEEDS=${MXMOE_AB_SEEDS:-1234 77}
PASSES=${MXMOE_AB_PASSES:-2}
TESTS=${MXMOE_AB_TESTS-*Host*:*SplitK*:*RealWidth*}
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1
gpu_configure "$PWD" "$B" "$LOG/configure.log" || exit 1
gpu_build "$B" "$LOG/build.log" 16 mxmoe test_sm90_decode_gemm || exit 1
echo "build ok $(( $(date +%s) - t0 ))s"
tests_rc=0
if [ -n "$TESTS" ]; then
  "$B/tests/gpu/test_sm90_decode_gemm" --gtest_filter="$TESTS" > "$LOG/decode_tests.txt" 2>&1
  tests_rc=$?
  echo "test_sm90_decode_gemm [$TESTS] rc $tests_rc:" \
    "$(grep -E '^\[  (PASSED|FAILED)' "$LOG/decode_tests.txt" | tr '\n' ' ')"
fi
bench_rc=0
for pass in $(seq 1 "$PASSES"); do
  for seed in $SEEDS; do
    for v in $VARIANTS; do
      envs=$A_ENV
      [ $v = b ] && envs=$B_ENV
      [ $v = c ] && envs=$C_ENV
      # shellcheck disable=SC2086  # the flags and the environment are word lists
      env $envs "$B/tools/mxmoe/mxmoe" bench $BENCH --seed "$seed" --csv "$CSV/$v.$seed.$pass.csv" \
        > "$CSV/$v.$seed.$pass.log" 2>&1 || { bench_rc=1; tail -3 "$CSV/$v.$seed.$pass.log"; }
    done
  done
  echo "pass $pass done $(( $(date +%s) - t0 ))s"
done
{
  echo "A: ${A_ENV:-(no knob)}  B: $B_ENV${C_ENV:+  C: $C_ENV}  bench: $BENCH  seeds: $SEEDS" \
    " passes: $PASSES"
  env_ab_rows "$CSV"
} > "$LOG/ab_env.txt"
cat "$LOG/ab_env.txt"
exit $(( tests_rc != 0 || bench_rc != 0 ))
