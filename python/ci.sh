#!/usr/bin/env bash
# python/ci.sh: the Python package's CI: installs what it needs from PyPI (torch, pytest,
# safetensors, numpy; a CUDA torch wheel from PyPI is ~3.5 GB with its nvidia-* deps, installed
# once per machine), builds the extension with pip against the installed torch (CPU ops only
# unless MXMOE_TORCH_CUDA=1/auto: the CUDA kernels take long to build on 2 cores and no GPU is
# here), then runs pytest. CUDA tests skip loudly without a GPU.
#   bash python/ci.sh            (env: MXMOE_TORCH_VERSION, default 2.11.0 = the H200's torch)
# Also stages pytest's wheels in python/.wheels/ for the GPU machine (gpu_check.sh, no network).
set -euo pipefail
cd "$(dirname "$0")"
t0=$(date +%s)
PY=${PYTHON:-python3}
TORCH_VERSION=${MXMOE_TORCH_VERSION:-2.11.0}
need=()
$PY -c "import torch" 2>/dev/null || need+=("torch==$TORCH_VERSION")
for m in pytest safetensors numpy; do $PY -c "import $m" 2>/dev/null || need+=("$m"); done
$PY -c "import setuptools, wheel" 2>/dev/null || need+=(setuptools wheel)
if [ ${#need[@]} -gt 0 ]; then
  echo "ci: pip install ${need[*]}" >&2
  $PY -m pip install -q "${need[@]}"
fi
[ -d .wheels ] || $PY -m pip download -q -d .wheels pytest >/dev/null 2>&1 || true
echo "ci: deps ready ($(( $(date +%s) - t0 ))s)" >&2

# pip builds through setup.py -> mxmoe_build.py (CMake); a fixed build dir keeps rebuilds
# incremental on the same machine.
export MXMOE_TORCH_CUDA=${MXMOE_TORCH_CUDA:-0}
export MXMOE_BUILD_DIR=${MXMOE_BUILD_DIR:-$PWD/build/ci}
$PY -m pip install -q --no-build-isolation --no-deps . 2>&1 | tail -20
echo "ci: built and installed ($(( $(date +%s) - t0 ))s)" >&2

# Run from outside python/ so that the INSTALLED package is the one under test.
cd tests
$PY - <<'PYEOF'
import sys
sys.path = [p for p in sys.path if not p.rstrip("/").endswith("/python")]
import mxmoe.torch as mt, os
print("ci: testing installed mxmoe at", os.path.dirname(mt.__file__),
      "CUDA ops:", mt.has_cuda_ops())
PYEOF
MXMOE_TEST_INSTALLED=1 $PY -m pytest -q -rs -p no:cacheprovider .
echo "ci: done ($(( $(date +%s) - t0 ))s)" >&2
