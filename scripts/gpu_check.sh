#!/usr/bin/env bash
# scripts/gpu_check.sh: the one script for the lent H200: configure (CUDA on, carried .deps),
# build the GPU targets, run every GPU test (label gpu: each GoogleTest binary once, the rest
# through ctest), generate a small real-width checkpoint and run `mxmoe check` on it (full layer
# and an EP slice), then print a short summary table LAST.
#
# Run on the device as:  bash scripts/gpu_check.sh          (carry [".deps"])
# Logs go to $OUT (the device tool's folder that comes back, at most 8 files), else to
# build-gpu/logs: build, gtest (every GoogleTest binary's output, concatenated), ctest, metrics,
# check_full, check_ep, bench.log/.csv. The side logs (gpu.txt, configure, gen, one file per
# GoogleTest binary) stay in build-gpu/logs on the device; a failing step copies its own to $OUT.
# Environment: MXMOE_GPU_JOBS (ninja -j, default 16), MXMOE_GPU_TESTS (a ctest -R regex to run
# a subset through ctest, one process per test), MXMOE_GPU_CTEST=1 (the whole suite that way),
# MXMOE_TEST_TIMEOUT (seconds per ctest test, default 300), MXMOE_BIN_TIMEOUT (seconds per
# GoogleTest binary, default 480), MXMOE_GPU_BENCH (flags for an `mxmoe bench` run after the
# tests; its table is printed last), MXMOE_GPU_MICRO=1 (also build and run the FP8 wgmma, the
# decode weight-stream and the chain-floor microbenchmarks: wgmma_depth.txt, decode_streams.txt,
# chain_floor.txt),
# MXMOE_GPU_TIMELINE=1 (also a timeline build: the GEMM-only decode chain's and the whole
# run_moe graph's per-CTA timelines: timeline.txt), MXMOE_GPU_SKIP_TESTS=1 (short of device
# time, and only where no kernel changed since the GPU tests last passed on a device: build
# mxmoe alone, run neither the GPU tests nor mxmoe check; the verdict then reads NO TESTS, never
# PASS), MXMOE_GPU_BINS (a subset of the GoogleTest binaries, space or comma separated: only
# those are built and run) and MXMOE_GPU_FILTER (a --gtest_filter for every binary run): a
# subset in seconds, where ctest's one process per case (MXMOE_GPU_TESTS) took 275 s for 416
# decode / MoE cases; the summary line names the subset, so it never reads as the whole suite.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=$ROOT/build-gpu
LOG=${OUT:-$B/logs}
SIDE=$B/logs
mkdir -p "$LOG" "$SIDE"
JOBS=${MXMOE_GPU_JOBS:-16}
t0=$(date +%s)
declare -a SUMMARY
note() { SUMMARY+=("$1"); echo "== $1"; }
elapsed() { echo $(( $(date +%s) - t0 ))s; }

nvidia-smi --query-gpu=name,compute_cap,memory.total,driver_version --format=csv,noheader \
  > "$SIDE/gpu.txt" 2>&1 || true
note "gpu: $(head -1 "$SIDE/gpu.txt")"

. scripts/lib/gpu_build.sh
if ! gpu_configure "$ROOT" "$B" "$SIDE/configure.log"; then
  cp "$SIDE/configure.log" "$LOG/" 2>/dev/null
  note "configure: FAILED (configure.log)"
  printf '%s\n' "---- summary ----" "${SUMMARY[@]}"; exit 1
fi
grep -q "CUDA kernels ON" "$SIDE/configure.log" || note "configure: WARNING CUDA kernels OFF"

skip_tests=${MXMOE_GPU_SKIP_TESTS:-}
targets=(mxmoe)
# (a file, not a pipe into grep -q: with pipefail, grep's early exit would fail the pipeline)
ninja -C "$B" -t targets all > "$B/targets.txt" 2>/dev/null
# Every GPU test executable declared in tests/gpu/CMakeLists.txt, plus the bench.
gpu_tests=$(sed -n 's/^ *mxmoe_add_test(\([A-Za-z0-9_]*\).*/\1/p' tests/gpu/CMakeLists.txt)
gpu_gtest_bins=$(sed -n 's/^ *mxmoe_add_test(\([A-Za-z0-9_]*\) LABEL gpu.*/\1/p' tests/gpu/CMakeLists.txt)
subset=""
if [ -n "${MXMOE_GPU_BINS:-}" ]; then
  gpu_tests=${MXMOE_GPU_BINS//,/ }
  gpu_gtest_bins=$gpu_tests
  subset=" [binaries: $gpu_tests]"
fi
gtest_args=()
if [ -n "${MXMOE_GPU_FILTER:-}" ]; then
  gtest_args=(--gtest_filter="$MXMOE_GPU_FILTER")
  subset="$subset [filter: $MXMOE_GPU_FILTER]"
fi
if [ -z "$skip_tests" ]; then
  for t in $gpu_tests mxmoe_bench_cli; do
    grep -q "^$t:" "$B/targets.txt" && targets+=("$t")
  done
fi
if ! gpu_build "$B" "$LOG/build.log" "$JOBS" "${targets[@]}"; then
  note "build: FAILED (build.log) $(elapsed)"
  printf '%s\n' "---- summary ----" "${SUMMARY[@]}"; exit 1
fi
spills=$(grep -c "bytes spill" "$LOG/build.log" || true)
note "build: ok (${targets[*]}), spill warnings: $spills, $(elapsed)"

metric_re="^\[metrics\]\|^\[route\]\|^\[determinism\]\|^\[arch\]\|^\[issue-bar\]"
tests_rc=0 check_rc=0 bars_failed=0
if [ -n "$skip_tests" ]; then
  note "gpu tests: NOT RUN (MXMOE_GPU_SKIP_TESTS); mxmoe check: NOT RUN"
elif [ -n "${MXMOE_GPU_TESTS:-}" ] || [ -n "${MXMOE_GPU_CTEST:-}" ]; then
  # A subset (ctest -R), or every test in its own process (MXMOE_GPU_CTEST=1).
  ctest_args=(--test-dir "$B" -L gpu --output-on-failure --timeout "${MXMOE_TEST_TIMEOUT:-300}")
  [ -n "${MXMOE_GPU_TESTS:-}" ] && ctest_args+=(-R "$MXMOE_GPU_TESTS")
  ctest "${ctest_args[@]}" > "$LOG/ctest.log" 2>&1
  tests_rc=$?
  # ctest --output-on-failure hides passing tests' output: collect the metric lines from the
  # per-test logs ctest keeps.
  grep -h "$metric_re" "$B/Testing/Temporary/LastTest.log" > "$LOG/metrics.txt" 2>/dev/null || true
  tests_line=$(grep -E "tests passed|tests failed" "$LOG/ctest.log" | tail -1)
  skipped=$(grep -c "Skipped\|NOT run" "$LOG/ctest.log" || true)
  note "gpu tests: ${tests_line:-no ctest summary} (rc $tests_rc), skip lines: $skipped, $(elapsed)"
  grep -E "\*\*\*Failed|Timeout|Exception" "$LOG/ctest.log" | head -10 | sed 's/^/   /'
  bars_failed=$(grep -c "Failure" "$B/Testing/Temporary/LastTest.log" 2>/dev/null || true)
else
  # The whole suite: each GoogleTest binary once (ctest runs one process per test case, and on
  # the device ~0.35 s of each of the ~520 cases was process and CUDA start-up: 354 s in all,
  # thirty-second session), then the GPU tests that are not GoogleTest cases (names without a
  # dot: bench_smoke) through ctest. Same tests, same pass criteria; a binary that dies without
  # GoogleTest's summary counts as failed.
  : > "$LOG/metrics.txt"
  : > "$LOG/gtest.log"
  tests_rc=0 passed=0 failed=0 skipped=0 bars_failed=0 bins=0
  for t in $gpu_gtest_bins; do
    exe="$B/tests/gpu/$t"
    if [ ! -x "$exe" ]; then echo "   $t: not built"; tests_rc=1; continue; fi
    bins=$((bins + 1))
    glog=$SIDE/gtest_$t.log
    timeout "${MXMOE_BIN_TIMEOUT:-480}" "$exe" "${gtest_args[@]}" > "$glog" 2>&1
    r=$?
    { echo "######## $t (rc $r)"; cat "$glog"; } >> "$LOG/gtest.log"
    n_ok=$(sed -n 's/^\[  PASSED  \] \([0-9]*\) tests\?\.$/\1/p' "$glog" | tail -1)
    n_fail=$(sed -n 's/^\[  FAILED  \] \([0-9]*\) tests\?, listed below:$/\1/p' "$glog" | tail -1)
    n_skip=$(sed -n 's/^\[  SKIPPED \] \([0-9]*\) tests\?, listed below:$/\1/p' "$glog" | tail -1)
    passed=$((passed + ${n_ok:-0})) failed=$((failed + ${n_fail:-0})) skipped=$((skipped + ${n_skip:-0}))
    grep -h "$metric_re" "$glog" >> "$LOG/metrics.txt"
    bars_failed=$((bars_failed + $(grep -c "Failure" "$glog" || true)))
    if [ "$r" != 0 ] || [ -z "$n_ok" ]; then
      tests_rc=1
      echo "   $t: rc $r$([ -z "$n_ok" ] && echo ", no GoogleTest summary (crashed or timed out)")"
      grep "^\[  FAILED  \] [A-Za-z]" "$glog" | sort -u | head -10 | sed 's/^/   /'
    fi
  done
  ctest --test-dir "$B" -L gpu -R '^[^.]+$' --output-on-failure \
    --timeout "${MXMOE_TEST_TIMEOUT:-900}" > "$LOG/ctest.log" 2>&1 || tests_rc=1
  other=$(grep -E "tests passed|tests failed" "$LOG/ctest.log" | tail -1)
  note "gpu tests$subset: $passed passed, $failed failed, $skipped skipped in $bins GoogleTest binaries (rc $tests_rc); other GPU ctest tests: ${other:-none}, $(elapsed)"
fi

CK=/tmp/mxmoe_ckpt
rm -rf "$CK"
if [ -n "$skip_tests" ]; then
  :
elif "$B/tools/mxmoe/mxmoe" gen --out "$CK" --experts 32 --quiet > "$SIDE/gen.log" 2>&1; then
  "$B/tools/mxmoe/mxmoe" check --model "$CK" --scope all --tokens 256 --sample 16 > "$LOG/check_full.log" 2>&1
  r1=$?
  "$B/tools/mxmoe/mxmoe" check --model "$CK" --tokens 1000 --sample 16 --ep-start 8 --ep-count 12 \
    > "$LOG/check_ep.log" 2>&1
  r2=$?
  check_rc=$(( r1 | r2 ))
  note "mxmoe check (32 experts, real widths): experts+block rc $r1, experts EP [8,20) rc $r2, $(elapsed)"
else
  cp "$SIDE/gen.log" "$LOG/" 2>/dev/null; tail -5 "$SIDE/gen.log"; note "mxmoe gen: FAILED (gen.log)"; check_rc=1
fi

# The GPU tests' metric lines, condensed: worst case per kind of comparison (all in metrics.txt).
awk '/^\[metrics\]/ {
    for (i = 1; i <= NF; ++i) { if ($i == "cosine") c = $(i + 1); if ($i == "NRMSE") n = $(i + 1) }
    sub("%", "", n)
    kind = "same-mode (bar cos>=0.99999, NRMSE<=0.5%)"
    if ($0 ~ /\(CPU mxfp8\)/) kind = "CPU mxfp8 vs CPU bf16 (the format itself)"
    else if ($0 ~ / w4a8 / && $0 ~ /vs ref bf16 \(mxfp8 input\)/) kind = "GPU w4a8 vs CPU bf16, same MXFP8 input (issue bar 0.9996 / 2.8%)"
    else if ($0 ~ / w4a8 / && $0 ~ /vs ref bf16/) kind = "GPU w4a8 vs CPU bf16, raw input (info)"
    cnt[kind]++
    if (!(kind in wc) || c + 0 < wc[kind]) wc[kind] = c + 0
    if (!(kind in wn) || n + 0 > wn[kind]) wn[kind] = n + 0
  }
  END { for (k in cnt) printf "  %-66s %3d cases: worst cosine %.7f, worst NRMSE %.4f%%\n", k, cnt[k], wc[k], wn[k] }' \
  "$LOG/metrics.txt" > "$B/metrics_summary.txt" 2>/dev/null
if [ -z "$skip_tests" ]; then
  echo
  echo "---- mxmoe check ----"
  cat "$LOG/check_full.log" "$LOG/check_ep.log" 2>/dev/null | grep -v "^mxmoe check: \(load\|CPU\|GPU\)"
  echo "---- GPU test metrics (worst per kind; full list in metrics.txt) ----"
  cat "$B/metrics_summary.txt"
  grep -h "^\[determinism\]" "$LOG/metrics.txt" | sed 's/^/  /'
  echo "  graph replays equal to direct runs and within the same-mode bar: $(grep -c "graph replay" "$LOG/metrics.txt") checks (test_gpu_moe_graph)"
fi
# Optional: the end-to-end benchmark, its table printed last (MXMOE_GPU_BENCH holds the flags,
# e.g. "--layouts ep16,tp8ep4 --tokens 1,64,4096,16384 --no-baselines --budget 0.3").
bench_rc=0
if [ -n "${MXMOE_GPU_BENCH:-}" ]; then
  # shellcheck disable=SC2086  (the flags are meant to split)
  "$B/tools/mxmoe/mxmoe" bench $MXMOE_GPU_BENCH --csv "$LOG/bench.csv" > "$LOG/bench.log" 2>&1
  bench_rc=$?
  note "mxmoe bench $MXMOE_GPU_BENCH: rc $bench_rc (bench.log, bench.csv), $(elapsed)"
fi
# Optional microbenchmarks (MXMOE_GPU_MICRO=1), built on request only: the FP8 wgmma / MX
# promotion one (bench/NOTES.md F round 3), the decode weight streams (D round 9) and the decode
# chain's structure with no math (D round 30).
if [ -n "${MXMOE_GPU_MICRO:-}" ]; then
  for m in bench_wgmma_fp8_depth:wgmma_depth.txt bench_decode_streams:decode_streams.txt \
           bench_chain_floor:chain_floor.txt; do
    t=${m%%:*} f=${m##*:}
    if ninja -C "$B" "$t" >> "$LOG/build.log" 2>&1; then
      "$B/tests/gpu/$t" > "$LOG/$f" 2>&1
      note "$t: rc $? ($f), $(elapsed)"
    else
      note "$t: build FAILED (build.log)"
    fi
  done
fi
# Optional (MXMOE_GPU_TIMELINE=1): a second build with the per-CTA timeline of the decode GEMMs,
# the prologue and the combine (cmake -DMXMOE_DECODE_TIMELINE=ON, build-gpu-tl), its GEMM-only
# chain timeline at EP16 / TP8xEP4 T=1/2/4 (Sm90DecodeBench.DISABLED_ChainTimeline, bench/NOTES.md
# D round 21: TIMELINE lines) and the whole run_moe graph's at T=1/2/8
# (MoeChainBench.DISABLED_ChainTimeline, D round 36: CHAIN lines): timeline.txt.
if [ -n "${MXMOE_GPU_TIMELINE:-}" ]; then
  TL=$ROOT/build-gpu-tl
  if gpu_configure "$ROOT" "$TL" "$SIDE/configure_tl.log" -DMXMOE_DECODE_TIMELINE=ON &&
     gpu_build "$TL" "$LOG/build_tl.log" "$JOBS" test_sm90_decode_gemm test_gpu_moe_decode_spec
  then
    tl_rc=0
    : > "$LOG/timeline.txt"
    for tl_bin in test_sm90_decode_gemm test_gpu_moe_decode_spec; do
      "$TL/tests/gpu/$tl_bin" --gtest_also_run_disabled_tests \
        --gtest_filter='*DISABLED_ChainTimeline*' >> "$LOG/timeline.txt" 2>&1 || tl_rc=1
    done
    tl_lines=$(grep -c '^TIMELINE\|^CHAIN' "$LOG/timeline.txt")
    note "decode timeline: rc $tl_rc ($tl_lines lines, timeline.txt), $(elapsed)"
  else
    note "decode timeline: build FAILED (build-gpu/logs/configure_tl.log, build_tl.log)"
  fi
fi
echo "---- summary ----"
printf '%s\n' "${SUMMARY[@]}"
echo "failure lines in test logs: $bars_failed"
echo "mxmoe check rows marked FAIL: $(cat "$LOG"/check_*.log 2>/dev/null | grep -c " FAIL$")"
rc=$(( tests_rc != 0 || check_rc != 0 || bench_rc != 0 ))
verdict() {
  if [ $rc != 0 ]; then echo FAIL; elif [ -n "$skip_tests" ]; then echo "NO TESTS"
  elif [ -n "$subset" ] || [ -n "${MXMOE_GPU_TESTS:-}" ]; then echo "PASS (a subset)"
  else echo PASS; fi
}
echo "gpu_check: $(verdict) in $(elapsed)"
if [ -n "${MXMOE_GPU_TIMELINE:-}" ]; then
  echo "---- decode timeline ----"
  grep "^TIMELINE\|^CHAIN" "$LOG/timeline.txt" 2>/dev/null | cut -c1-240
fi
if [ -n "${MXMOE_GPU_BENCH:-}" ]; then
  # From the table's first line to the targets under it (the full table is ~60 rows).
  echo "---- mxmoe bench ----"
  sed -n '/^mxmoe bench on/,$p' "$LOG/bench.log" | grep -v "^note:" | tail -80
  # The table is long: repeat the verdict and the test counts below it, so the output's last
  # lines say whether the run passed (the first H100 run of the per-binary suite lost them).
  printf '%s\n' "${SUMMARY[@]}" | grep "^gpu tests"
  echo "gpu_check: $(verdict) in $(elapsed)"
fi
exit $rc
