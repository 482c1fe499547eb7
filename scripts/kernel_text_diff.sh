#!/usr/bin/env bash
# scripts/kernel_text_diff.sh: which kernels a change recompiles to different machine code, without
# a GPU. Builds sm_90a cubins of the given CUDA sources from the working tree and from a git REF
# (the build's flags), hashes every kernel's .text section and lists the kernels whose code
# differs, is new or is gone. A refactor, or a change that only adds an opt-in kernel, should
# list no existing kernel; the check is byte identity of the SASS, so it proves unchanged
# behaviour and timing for every kernel it calls "same" (a changed parameter list alone, with
# the same code, counts as "same": kernels are matched by name with the parameters stripped).
#
#   bash scripts/kernel_text_diff.sh REF [src/cuda/sm90/decode_gemm.cu ...]
# Default sources: every src/cuda/sm90/*.cu and src/cuda/smxx/*.cu. Needs nvcc, readelf, git.
# KDIFF_MAP: a sed -E script applied to the working tree's kernel names first, for a change that
# renames kernels (a template parameter added: KDIFF_MAP='s/(Lb[01]E)Lb0E$/\1/' maps
# kernel<S, kGemm1, false> onto the REF's kernel<S, kGemm1>).
# Work files go to build-kdiff/ (ignored). Exit status 0 when no existing kernel changed or went
# away, 1 else.
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ref=${1:?usage: $0 REF [sources...]}
shift
srcs=("$@")
[ ${#srcs[@]} -gt 0 ] || srcs=(src/cuda/sm90/*.cu src/cuda/smxx/*.cu)
. scripts/lib/cubin.sh
W=$ROOT/build-kdiff
rm -rf "$W" && mkdir -p "$W/ref" "$W/tree" "$W/out"
git archive "$ref" src include | tar -x -C "$W/ref" || exit 2

# hashes DIR SRC OUT: "name hash" per kernel of SRC compiled from tree DIR.
hashes() {
  local dir=$1 src=$2 out=$3 cubin
  cubin=$W/out/$(echo "$dir$src" | tr '/.' '__').cubin
  compile_cubin "$dir" "$src" "$cubin" || return 1
  readelf -SW "$cubin" 2>/dev/null |
    awk '{for (i = 1; i <= NF; ++i) if ($i ~ /^\.text\./) { print $i, $(i + 3), $(i + 4) } }' |
    while read -r name off size; do
      h=$(dd if="$cubin" bs=1 skip=$((16#$off)) count=$((16#$size)) 2>/dev/null | md5sum)
      # kernel name without its parameter list (the mangled name's tail after the template args)
      echo "${name#.text.} ${h%% *}"
    done | sed -E 's/EEvNS[0-9]_[0-9]+[A-Za-z]+E.* / /; s/_GLOBAL__N__[0-9a-f]+_/_GLOBAL__N__/' |
    sort > "$out"  # (anonymous namespaces are named after the file's path: dropped)
}

status=0
for src in "${srcs[@]}"; do
  [ -f "$W/ref/$src" ] || { echo "new file: $src"; continue; }
  n=$(echo "$src" | tr '/.' '__')
  hashes "$W/ref" "$src" "$W/$n.ref" && hashes "$ROOT" "$src" "$W/$n.raw" || { status=1; continue; }
  paste -d' ' <(cut -d' ' -f1 "$W/$n.raw" | sed -E "${KDIFF_MAP:-}") <(cut -d' ' -f2 "$W/$n.raw") |
    sort > "$W/$n.tree"
  same=$(join "$W/$n.ref" "$W/$n.tree" | awk '$2 == $3' | wc -l)
  changed=$(join "$W/$n.ref" "$W/$n.tree" | awk '$2 != $3 {print $1}')
  gone=$(join -v1 "$W/$n.ref" "$W/$n.tree" | awk '{print $1}')
  added=$(join -v2 "$W/$n.ref" "$W/$n.tree" | awk '{print $1}')
  echo "$src: $same same, $(echo -n "$changed" | grep -c .) changed, $(echo -n "$gone" | grep -c .) gone, $(echo -n "$added" | grep -c .) new"
  for k in $changed; do echo "  changed: $k"; done
  for k in $gone; do echo "  gone:    $k"; done
  for k in $added; do echo "  new:     $k"; done
  [ -z "$changed$gone" ] || status=1
done
exit $status
