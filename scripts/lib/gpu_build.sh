# scripts/lib/gpu_build.sh (sourced): the GPU scripts' one way to configure a CUDA build against
# the carried .deps (gpu_check.sh, gpu_ab_env.sh, gpu_ab_ws.sh, gpu_timeline_env.sh; ab_trees.sh
# takes gpu_deps for its several trees), so their builds cannot drift.

# gpu_deps ROOT: sets the array GPU_DEPS to the cmake flags naming ROOT/.deps's GoogleTest and
# nlohmann-json, where carried (none: cmake finds the system's).
gpu_deps() {
  GPU_DEPS=()
  [ -d "$1/.deps/googletest" ] && GPU_DEPS+=(-DMXMOE_GTEST_DIR="$1/.deps/googletest")
  [ -d "$1/.deps/json" ] && GPU_DEPS+=(-DMXMOE_JSON_INCLUDE="$1/.deps/json")
  return 0
}

# gpu_configure ROOT BUILD LOGFILE [cmake flags...]: a Release, CUDA-on Ninja build of ROOT in
# BUILD; cmake's output to LOGFILE; on failure its last lines to stderr. Returns cmake's status.
gpu_configure() {
  local root=$1 build=$2 log=$3
  shift 3
  gpu_deps "$root"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXMOE_ENABLE_CUDA=ON \
    "${GPU_DEPS[@]}" "$@" > "$log" 2>&1 || { tail -20 "$log" >&2; return 1; }
}

# gpu_build BUILD LOGFILE JOBS TARGET...: ninja's output to LOGFILE; on failure its errors to
# stderr. Returns ninja's status.
gpu_build() {
  local build=$1 log=$2 jobs=$3
  shift 3
  ninja -C "$build" -j"$jobs" "$@" > "$log" 2>&1 ||
    { grep -E "error|FAILED" "$log" | head -20 >&2; return 1; }
}
