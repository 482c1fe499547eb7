# scripts/lib/cubin.sh (sourced): one CUDA source compiled to an sm_90a cubin with the build's
# device flags, for the tools that read kernels' machine code without a GPU (kernel_text_diff.sh,
# kernel_sass.sh).
NVCC=${NVCC:-nvcc}
command -v "$NVCC" >/dev/null || NVCC=/usr/local/cuda/bin/nvcc

# compile_cubin TREE SRC CUBIN: SRC (a path inside TREE) compiled against TREE's headers; the
# compiler's messages go to CUBIN.log. Returns nvcc's status.
compile_cubin() {
  local tree=$1 src=$2 cubin=$3
  "$NVCC" -I"$tree/src/cuda" -I"$tree/include" -O3 -DNDEBUG -arch=sm_90a -cubin \
    --expt-relaxed-constexpr -std=c++17 ${CUBIN_FLAGS:-} -x cu "$tree/$src" -o "$cubin" \
    2> "$cubin.log" || {
    echo "compile failed: $tree/$src (see $cubin.log)" >&2
    return 1
  }
}
