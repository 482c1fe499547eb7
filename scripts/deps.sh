#!/usr/bin/env bash
# Installs what the build and tests need on a fresh Debian machine of the project's kind
# (cmake, ninja, GoogleTest sources, nlohmann-json, clang for the fuzzers), and, with --carry,
# copies the header-only / source dependencies into .deps/ so that a GPU run, whose machine has no
# package registry, can carry them (GoogleTest sources, nlohmann-json headers).
set -euo pipefail
cd "$(dirname "$0")/.."
need=()
command -v cmake >/dev/null || need+=(cmake)
command -v ninja >/dev/null || need+=(ninja-build)
command -v g++ >/dev/null || need+=(g++)
[ -f /usr/src/googletest/CMakeLists.txt ] || need+=(googletest)
[ -f /usr/include/nlohmann/json.hpp ] || need+=(nlohmann-json3-dev)
command -v clang++ >/dev/null || need+=(clang)
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
