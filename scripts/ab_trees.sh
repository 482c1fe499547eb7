#!/usr/bin/env bash
# scripts/ab_trees.sh: same-call timing A/Bs of whole source trees on the lent H200 (call-to-call
# spread is ~1.5-4%, so only numbers from one call are compared).
#
# Here (with git):  bash scripts/ab_trees.sh prepare NAME=REF ...
#   extracts each git REF into build-ab/NAME (ignored; carry [".deps", "build-ab"]).
# Device:           bash scripts/ab_trees.sh run VARIANT ...
#   VARIANT = NAME or NAME@VAR=VALUE[+VAR=VALUE...] (values may hold commas, e.g.
#   MXMOE_SM90_WS_TUNE=2,8,0); NAME "." is the working tree. Builds every tree named once (in
#   parallel), runs the grouped-GEMM tests of the working tree (not with AB_GEMM=0), then the
#   GEMM-only bench (`*DISABLED_WsConsumers*`) and `mxmoe bench` for the variants in turn,
#   twice (a b a b), each run under `timeout` (a deadlocked variant costs its timeout, not the
#   call), and prints a table last. Environment: AB_TOKENS (default 4096,8192,16384),
#   AB_LAYOUTS (ep16,tp8ep4), AB_TIMEOUT (seconds per run, default 90), AB_GEMM=0 (end to end
#   only, no GEMM-only runs), AB_ROUTER (the bench's --router, default ids), AB_TARGETS (ninja
#   targets built per tree, default "test_sm90_grouped_gemm mxmoe"), AB_CMAKE_<NAME> (extra
#   CMake arguments for tree NAME, e.g. AB_CMAKE_t=-DMXMOE_DECODE_TIMELINE=ON for a tree prepared
#   as t=HEAD: a compile-time A/B). Logs go to $OUT (else build-ab/logs).
set -uo pipefail
cd "$(dirname "$0")/.."
. scripts/ab_tables.sh
ROOT=$PWD
mode=${1:-}
shift || true

if [ "$mode" = prepare ]; then
  for spec in "$@"; do
    name=${spec%%=*} ref=${spec#*=}
    rm -rf "build-ab/$name" && mkdir -p "build-ab/$name"
    git archive "$ref" | tar -x -C "build-ab/$name" || exit 1
    echo "build-ab/$name <- $(git rev-parse --short "$ref")"
  done
  exit 0
fi
[ "$mode" = run ] || { echo "usage: $0 prepare NAME=REF ... | run VARIANT ..." >&2; exit 2; }

LOG=${OUT:-$ROOT/build-ab/logs}
mkdir -p "$LOG"
TMO=${AB_TIMEOUT:-90}
# Every tree builds against the working tree's carried .deps (the archived trees have none).
. "$ROOT/scripts/lib/gpu_build.sh"
gpu_deps "$ROOT"
src_of() { [ "$1" = . ] && echo "$ROOT" || echo "$ROOT/build-ab/$1"; }
bin_of() { [ "$1" = . ] && echo "$ROOT/build-gpu" || echo "$ROOT/build-ab/build-$1"; }

names=()
for v in "$@"; do
  n=${v%%@*}
  [[ " ${names[*]:-} " == *" $n "* ]] || names+=("$n")
done
jobs=$(( 16 / ${#names[@]} ))
[ "$jobs" -ge 2 ] || jobs=2
t0=$(date +%s)
for n in "${names[@]}"; do
  extra_var="AB_CMAKE_${n//[^A-Za-z0-9_]/_}"
  read -r -a extra <<< "${!extra_var:-}"
  (cmake -S "$(src_of "$n")" -B "$(bin_of "$n")" -G Ninja -DCMAKE_BUILD_TYPE=Release \
     -DMXMOE_ENABLE_CUDA=ON "${GPU_DEPS[@]}" ${extra[@]+"${extra[@]}"} \
     > "$LOG/cfg_${n//./wt}.log" 2>&1 &&
   ninja -C "$(bin_of "$n")" -j"$jobs" ${AB_TARGETS:-test_sm90_grouped_gemm mxmoe} \
     > "$LOG/build_${n//./wt}.log" 2>&1
   echo "build $n rc $?") &
done
wait
echo "builds $(( $(date +%s) - t0 ))s"
if [[ " ${names[*]} " == *" . "* ]] && [ "${AB_GEMM:-1}" != 0 ]; then
  timeout 300 "$ROOT/build-gpu/tests/gpu/test_sm90_grouped_gemm" > "$LOG/tests_wt.txt" 2>&1
  echo "working tree grouped-GEMM tests rc $?: $(grep -E '^\[  (PASSED|FAILED)' \
    "$LOG/tests_wt.txt" | tr '\n' ' ')"
fi

bench="--layouts ${AB_LAYOUTS:-ep16,tp8ep4} --tokens ${AB_TOKENS:-4096,8192,16384}"
bench+=" --backends w4a16,w4a8 --routing uniform --router ${AB_ROUTER:-ids}"
bench+=" --no-baselines --budget 0.1"
tag_of() { echo "$(echo "$1" | tr -c 'A-Za-z0-9_\n' '_')_$2"; }  # $1 variant, $2 pass: log name
run_variant() {  # $1 variant, $2 pass
  local n=${1%%@*} envs="" tag
  [[ "$1" == *@* ]] && envs=${1#*@}
  tag=$(tag_of "$1" "$2")
  local b
  b=$(bin_of "$n")
  if [ "${AB_GEMM:-1}" != 0 ]; then
    timeout "$TMO" env ${envs//+/ } "$b/tests/gpu/test_sm90_grouped_gemm" \
      --gtest_also_run_disabled_tests --gtest_filter='*DISABLED_WsConsumers*' \
      > "$LOG/ws_$tag.txt" 2>&1 || echo "ws $1 pass $2: rc $?"
  fi
  timeout "$TMO" env ${envs//+/ } "$b/tools/mxmoe/mxmoe" bench $bench \
    > "$LOG/e2e_$tag.txt" 2>&1 || echo "e2e $1 pass $2: rc $?"
}
for pass in 1 2; do
  for v in "$@"; do run_variant "$v" "$pass"; done
done

for pass in 1 2; do
  [ "${AB_GEMM:-1}" != 0 ] || break
  for v in "$@"; do
    tag=$(tag_of "$v" "$pass")
    echo "---- GEMM-only [$v] pass $pass: tile_n layout T gemm1 gemm1+mx gemm2 (us)"
    gemm_only_rows "$LOG/ws_$tag.txt"
  done
done
echo "---- end to end (us), layout/T/backend median"
for pass in 1 2; do
  for v in "$@"; do
    tag=$(tag_of "$v" "$pass")
    echo "[$v] $(e2e_row "$LOG/e2e_$tag.txt")"
  done
done
echo "ab_trees total $(( $(date +%s) - t0 ))s"
