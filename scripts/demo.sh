#!/usr/bin/env bash
# scripts/demo.sh: mxmoe's main job, end to end, on a fresh Debian machine of the project's kind
# (2 cores, CUDA toolkit, no GPU needed).
#   1. installs what the build needs (scripts/deps.sh; apt-get, so run as root on a fresh machine);
#   2. configures and builds the `mxmoe` CLI (Release, Ninja, -j2; CUDA only when a GPU is present,
#      since the CPU path needs no kernels);
#   3. `mxmoe gen`: one Kimi-K3 MoE layer with the REAL widths (hidden 7168, latent 3584,
#      intermediate 3072, top-16, 2 shared experts) but 64 routed experts instead of 896, so that
#      it writes ~1.4 GiB and runs in about a minute (896 experts would write ~16 GiB);
#   4. `mxmoe gen-input` for both scopes, `mxmoe info`;
#   5. `mxmoe run --device cpu` for scope experts and block in both activation modes (mxfp8, bf16),
#      and on a GPU machine also `--device cuda` with both backends;
#   6. prints the timings and a checksum of every output.
# Environment: MXMOE_DEMO_DIR (default out/demo), MXMOE_DEMO_EXPERTS (default 64),
# MXMOE_DEMO_TOKENS (default 8), MXMOE_BUILD_DIR (default build-demo).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh
if ! command -v nvcc >/dev/null && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
fi
build="${MXMOE_BUILD_DIR:-build-demo}"
demo="${MXMOE_DEMO_DIR:-out/demo}"
experts="${MXMOE_DEMO_EXPERTS:-64}"
tokens="${MXMOE_DEMO_TOKENS:-8}"
cuda=OFF
if command -v nvcc >/dev/null && nvidia-smi -L >/dev/null 2>&1; then cuda=ON; fi

echo "== build (CUDA $cuda) into $build" >&2
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMXMOE_BUILD_TESTS=OFF \
  -DMXMOE_ENABLE_CUDA="$cuda" >/dev/null
ninja -C "$build" -j2 mxmoe
mxmoe="$build/tools/mxmoe/mxmoe"

rm -rf "$demo"
mkdir -p "$demo"
echo "== mxmoe gen: a Kimi-K3-shaped layer (real widths, $experts experts)" >&2
"$mxmoe" gen --out "$demo/model" --experts "$experts"
"$mxmoe" gen-input --model "$demo/model" --tokens "$tokens" --scope experts \
  --out "$demo/in_experts.safetensors"
"$mxmoe" gen-input --model "$demo/model" --tokens "$tokens" --scope block \
  --out "$demo/in_block.safetensors"
echo "== mxmoe info" >&2
"$mxmoe" info --model "$demo/model"

summary=()
run() {  # run SCOPE ACT DEVICE
  local out="$demo/out_$1_$2_$3.safetensors" line
  echo "== mxmoe run --scope $1 --act $2 --device $3" >&2
  line=$("$mxmoe" run --model "$demo/model" --layer 1 --input "$demo/in_$1.safetensors" \
    --output "$out" --scope "$1" --act "$2" --device "$3")
  echo "$line"
  summary+=("$(printf '%-8s %-6s %-5s %s  sha256 %s' "$1" "$2" "$3" "$line" \
    "$(sha256sum "$out" | cut -c1-16)")")
}
for scope in experts block; do
  for act in mxfp8 bf16; do
    run "$scope" "$act" cpu
    # The CUDA path covers the routed experts; scope block runs on the CPU only for now.
    if [ "$cuda" = ON ] && [ "$scope" = experts ]; then run "$scope" "$act" cuda; fi
  done
done

echo
echo "== summary: $tokens tokens, layer 1, $experts experts, real Kimi-K3 widths"
printf '%s\n' "${summary[@]}"
