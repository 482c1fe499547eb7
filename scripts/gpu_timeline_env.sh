#!/usr/bin/env bash
# scripts/gpu_timeline_env.sh: where each variant of an environment knob spends a decode step,
# kernel by kernel, on the lent GPU in one call (bench/NOTES.md D round 46): a timeline build
# (cmake -DMXMOE_DECODE_TIMELINE=ON, build-gpu-tl) of test_gpu_moe_decode_spec, then the whole
# run_moe graph's chain timeline (MoeChainBench.DISABLED_ChainTimeline, the rule alone, flushed)
# once per variant, each in its own process (the decode knobs are read once per process).
#   MXMOE_TL_VARIANTS  the variants' environments, ';'-separated (required), e.g.
#                      "MXMOE_DECODE_BALANCE=0;MXMOE_DECODE_BALANCE=1"
#   MXMOE_TL_TOKENS    MXMOE_CHAIN_TOKENS for every variant (default "EP16:16,17;TP8xEP4:17")
# Run on the device as:  MXMOE_TL_VARIANTS=... bash scripts/gpu_timeline_env.sh  (carry .deps)
# Logs to $OUT (else build-gpu-tl/logs): configure.log, build.log, tl_N.txt per variant; last,
# the graph medians and the GEMMs' exit stamps (min/median/max over CTAs, us from the chain's
# first entry) of every case, variant by variant. Exit status 1 when a variant fails or times no
# case (no GPU, or the test skipped).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
. scripts/lib/gpu_build.sh
TL=$PWD/build-gpu-tl
LOG=${OUT:-$TL/logs}
mkdir -p "$LOG"
VARIANTS=${MXMOE_TL_VARIANTS:?set MXMOE_TL_VARIANTS: NAME=VALUE lists, ';'-separated}
TOKENS=${MXMOE_TL_TOKENS:-EP16:16,17;TP8xEP4:17}
t0=$(date +%s)
gpu_configure "$PWD" "$TL" "$LOG/configure.log" -DMXMOE_DECODE_TIMELINE=ON || exit 1
gpu_build "$TL" "$LOG/build.log" 16 test_gpu_moe_decode_spec || exit 1
echo "build ok $(( $(date +%s) - t0 ))s"
rc=0
n=0
IFS=';' read -r -a envs <<< "$VARIANTS"
for v in "${envs[@]}"; do
  # shellcheck disable=SC2086  # the variant is a word list of NAME=VALUE
  env $v MXMOE_CHAIN_RULE_ONLY=1 MXMOE_CHAIN_TOKENS="$TOKENS" \
    "$TL/tests/gpu/test_gpu_moe_decode_spec" --gtest_also_run_disabled_tests \
    --gtest_filter='*DISABLED_ChainTimeline*' > "$LOG/tl_$n.txt" 2>&1
  r=$?
  cases=$(grep -c '^CHAIN [^ ]' "$LOG/tl_$n.txt")
  # (No case timed, e.g. no GPU or not a timeline build: the test skips; that is no result.)
  [ $r -ne 0 ] || [ "$cases" -eq 0 ] && rc=1
  echo "variant $n ($v): rc $r, $cases cases," \
    "$(( $(date +%s) - t0 ))s"
  n=$((n + 1))
done
n=0
for v in "${envs[@]}"; do
  echo "---- variant $n: $v"
  grep -E '^CHAIN [^ ]|^CHAIN   GEMM' "$LOG/tl_$n.txt" |
    sed -E 's/; stamps in us.*//; s/\| (entry|waited|data) [^|]*//g'
  n=$((n + 1))
done
exit $rc
