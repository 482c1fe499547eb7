#!/usr/bin/env bash
# scripts/gpu_profile.sh: Nsight Compute on the prefill GEMMs, for the lent H200, after
# scripts/gpu_check.sh has built build-gpu/ in the same call. Profiles one launch each of the
# warp-specialized GEMM1 (EP16, 16384 tokens) and GEMM2 (EP16 and TP8xEP4, 16384 tokens) from
# `*DISABLED_Prefill16384*` and writes, to $OUT (else build-gpu/logs):
#   <name>.txt      the SpeedOfLight / WarpStateStats / scheduler / memory sections
#   <name>.csv.gz   the SASS with per-instruction stall samples (rank by "Warp Stall Sampling")
# and the SASS of grouped_gemm.cu (grouped_gemm.sass.gz). Clocks are left alone
# (--clock-control none), so durations match the bench's.
set -uo pipefail
cd "$(dirname "$0")/.."
B=$PWD/build-gpu
LOG=${OUT:-$B/logs}
mkdir -p "$LOG"
T=$B/tests/gpu/test_sm90_grouped_gemm
filter='--gtest_also_run_disabled_tests --gtest_filter=*DISABLED_Prefill16384*'
obj=$(find "$B" -name 'grouped_gemm.cu.o' | head -1)
[ -n "$obj" ] && cuobjdump --dump-sass "$obj" | gzip > "$LOG/grouped_gemm.sass.gz"
# name : kernel regex : launches to skip (EP16 GEMM1, three consumers: the second launch;
# EP16 GEMM2: the second; TP8xEP4 GEMM2: EP16 has 19 launches of the plain GEMM2 (warm-up +
# 18), so the 21st is TP8xEP4's second). MXMOE_PROFILE_SPECS replaces the list.
specs=${MXMOE_PROFILE_SPECS:-"g1_ep16:grouped_gemm_ws_kernelILi3ELb1ELb0:1 g2_ep16:grouped_gemm_ws_kernelILi3ELb0ELb0:1 g2_tp8:grouped_gemm_ws_kernelILi3ELb0ELb0:20"}
for spec in $specs; do
  IFS=: read -r name regex skip <<< "$spec"
  ncu --clock-control none --kernel-name-base mangled -k "regex:$regex" --launch-skip "$skip" -c 1 \
    --section SpeedOfLight --section WarpStateStats --section SchedulerStats \
    --section MemoryWorkloadAnalysis --section LaunchStats --section SourceCounters \
    -o "$B/$name" -f $T $filter > "$LOG/$name.ncu.log" 2>&1
  echo "ncu $name: rc $?"
  ncu -i "$B/$name.ncu-rep" --page details > "$LOG/$name.txt" 2>&1
  ncu -i "$B/$name.ncu-rep" --page source --csv --print-source sass 2>/dev/null | gzip > "$LOG/$name.csv.gz"
  grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Compute \(SM\) Throughput|L2 Cache Throughput|DRAM Throughput" "$LOG/$name.txt" | head -8
done
