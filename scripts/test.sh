#!/usr/bin/env bash
# scripts/test.sh: builds everything and runs every test, on a fresh Debian machine of the
# project's kind (2 cores, CUDA toolkit, no GPU) or on the GPU machine.
#   - installs what the build needs (scripts/deps.sh; apt-get, so run as root on a fresh machine);
#   - configures with CUDA ON whenever nvcc is found (the CUDA code must compile in CI too), Release,
#     Ninja, -j2; the build directory is $MXMOE_BUILD_DIR (default build/);
#   - runs ctest: label `cpu` tests everywhere, label `gpu` tests skip loudly without a GPU.
#   - then the Python package's tests (python/ci.sh: installs torch from PyPI if missing, builds
#     the extension's CPU ops, runs pytest; CUDA tests skip loudly). MXMOE_SKIP_PYTHON=1 skips it.
# Extra arguments go to ctest (e.g. `scripts/test.sh -L cpu`).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
# The CUDA toolkit's usual home is not always on PATH in a fresh shell.
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
build="${MXMOE_BUILD_DIR:-build}"
jobs="${MXMOE_JOBS:-2}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release
ninja -C "$build" -j"$jobs"
ctest --test-dir "$build" --output-on-failure -j"$jobs" "$@"
if [ "${MXMOE_SKIP_PYTHON:-0}" != 1 ]; then
  bash python/ci.sh
fi
