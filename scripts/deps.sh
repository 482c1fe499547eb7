#!/usr/bin/env bash
# Installs what the build and tests need on a fresh Debian machine of the project's kind (cmake,
# ninja, GoogleTest sources, nlohmann-json, clang for the fuzzers, clang-format for ctest's
# format_check), and, with --carry, copies the header-only / source dependencies into .deps/ so
# that a GPU run, whose machine has no package registry, can carry them (GoogleTest sources,
# nlohmann-json headers), and, with --sass, fetches NVIDIA's SASS tools (cuobjdump, nvdisasm:
# PyPI wheels, which the CUDA toolkit here lacks) into .deps/sass/bin for scripts/kernel_sass.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/src/googletest/CMakeLists.txt ] || need+=(googletest)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
command -v clang++ >/dev/null || need+=(clang)
command -v clang-format >/dev/null || need+=(clang-format)  # ctest format_check
if [ ${#need[@]} -gt 0 ]; then
  echo "deps: installing ${need[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq "${need[@]}" >/dev/null
fi
if [ "${1:-}" = "--carry" ]; then
  mkdir -p .deps/json
  rm -rf .deps/googletest .deps/json/nlohmann
  cp -r /usr/src/googletest .deps/googletest
  cp -r /usr/include/nlohmann .deps/json/nlohmann
  echo "deps: .deps/ ready to carry (googletest, nlohmann-json)" >&2
fi
if [ "${1:-}" = "--sass" ]; then
  sass_version=13.5.37  # any 13.x reads sm_90a cubins; pinned so that listings compare
  if [ ! -x .deps/sass/bin/cuobjdump ] || [ ! -x .deps/sass/bin/nvdisasm ]; then
    rm -rf .deps/sass && mkdir -p .deps/sass/wheels
    python3 -m pip download -q --no-deps -d .deps/sass/wheels \
      "nvidia-cuda-cuobjdump==$sass_version" "nvidia-cuda-nvdisasm==$sass_version"
    for w in .deps/sass/wheels/*.whl; do python3 -m zipfile -e "$w" .deps/sass/unpacked; done
    mkdir -p .deps/sass/bin
    for t in cuobjdump nvdisasm; do
      f=$(find .deps/sass/unpacked -type f -name "$t" | head -n 1)
      [ -n "$f" ] || { echo "deps: $t not found in its wheel" >&2; exit 1; }
      install -m 755 "$f" .deps/sass/bin/$t
    done
    rm -rf .deps/sass/wheels .deps/sass/unpacked
  fi
  echo "deps: SASS tools in .deps/sass/bin ($(.deps/sass/bin/cuobjdump --version | tail -n 1))" >&2
fi
