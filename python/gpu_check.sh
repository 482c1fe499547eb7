#!/usr/bin/env bash
# python/gpu_check.sh: the Python package on the H200 (torch 2.11 + CUDA 13.0 installed there,
# no network): builds the extension WITH the CUDA ops against that torch (CMake, no pip), runs
# the whole pytest suite (CUDA tests included) and prints a short summary LAST.
#   bash python/gpu_check.sh        from the repo root; carry [".deps", "python/.wheels"]
# .deps/json (scripts/deps.sh --carry) serves nlohmann-json if it is not installed there;
# python/.wheels (python/ci.sh fills it) serves pytest if it is not installed there.
# Logs: $OUT (the device tool's folder) or python/build/gpu-logs. Env: MXMOE_JOBS (default 16).
set -uo pipefail
cd "$(dirname "$0")"
LOG=${OUT:-$PWD/build/gpu-logs}
mkdir -p "$LOG"
PY=${PYTHON:-python3}
t0=$(date +%s)
declare -a SUMMARY
note() { SUMMARY+=("$1"); echo "== $1"; }
finish() { printf '%s\n' "---- mxmoe python summary ----" "${SUMMARY[@]}"; exit "$1"; }

# The H200 image's g++ (/opt/gcc/bin/g++) is a wrapper that runs g++-real with -B/opt/gcc/...:
# it linked libstdc++'s code into the extension itself (the nm check below), and that private copy
# crashed in iostream code on the first error message (its locale facets are not those of the
# process's libstdc++, which torch loads). Prefer a g++ that links libstdc++ dynamically, as torch
# does: MXMOE_TORCH_CXX, else the distribution's (seen working: /usr/bin/g++-13, 2026-11-29).
for c in "${MXMOE_TORCH_CXX:-}" /usr/bin/g++-13 /usr/bin/g++; do
  if [ -n "$c" ] && [ -x "$c" ]; then export CXX=$c CUDAHOSTCXX=$c; break; fi
done
note "compiler: ${CXX:-g++} ($(${CXX:-g++} --version | head -1))"
note "torch: $($PY -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "device", torch.cuda.get_device_name(0) if torch.cuda.is_available() else "none")' 2>&1 | tail -1)"

rm -rf build/gpu  # a fresh configure: the compiler above must be the one CMake caches
if MXMOE_JOBS=${MXMOE_JOBS:-16} $PY mxmoe_build.py --cuda 1 --inplace \
    --build-dir "$PWD/build/gpu" > "$LOG/torch_build.log" 2>&1; then
  note "build: $(grep '^mxmoe_build: ' "$LOG/torch_build.log" | tail -1) ($(( $(date +%s) - t0 ))s)"
else
  grep -E "error|Error|FAILED" "$LOG/torch_build.log" | head -20
  note "build: FAILED (torch_build.log)"; finish 1
fi

SO=mxmoe/torch/libmxmoe_torch.so
if nm -C "$SO" 2>/dev/null | grep -q " [TtWw] std::basic_ostream<char, std::char_traits<char> >& std::basic_ostream<char, std::char_traits<char> >::_M_insert<long>"; then
  note "build: FAILED: $SO carries its own static libstdc++ (set CXX to a g++ that links it dynamically)"
  finish 1
fi

if ! $PY -c "import pytest" 2>/dev/null; then
  if [ -d .wheels ]; then
    $PY -m pip install -q --no-index --find-links .wheels pytest > "$LOG/pip.log" 2>&1 \
      || note "pytest: install from python/.wheels failed (pip.log)"
  fi
fi
if ! $PY -c "import pytest" 2>/dev/null; then
  note "pytest: NOT available (carry python/.wheels, filled by python/ci.sh)"; finish 1
fi

# -s: the tests print their NRMSE / cosine lines; -rs: every skip with its reason.
$PY -m pytest -q -s -rs -p no:cacheprovider tests > "$LOG/pytest.log" 2>&1
rc=$?
grep -E "^\[torch-gpu\]|NRMSE" "$LOG/pytest.log" > "$LOG/metrics.txt" || true
tail -40 "$LOG/pytest.log"
note "pytest: $(grep -E '(passed|failed|error|skipped)' "$LOG/pytest.log" | tail -1) (rc $rc, $(( $(date +%s) - t0 ))s)"
worst=$(grep "^\[torch-gpu\]" "$LOG/metrics.txt" | awk '{for(i=1;i<=NF;i++){if($i=="NRMSE")n=$(i+1); if($i=="cosine")c=$(i+1)}; if(n>wn)wn=n; if(wc==""||c<wc)wc=c} END{if(NR) printf "%d GPU comparisons, worst NRMSE %s, worst cosine %s", NR, wn, wc}')
note "gpu vs cpu reference: ${worst:-no GPU comparison lines (were the CUDA tests skipped?)}"
grep -q "CUDA tests SKIPPED" "$LOG/pytest.log" && note "WARNING: CUDA tests were skipped"
finish $rc
