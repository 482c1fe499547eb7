#!/usr/bin/env bash
# scripts/format.sh: the repository's one format (.clang-format: Google based, 100 columns) over
# its C++/CUDA sources. The tree is formatted with clang-format 14 (Debian bookworm's, which
# scripts/deps.sh installs); other major versions break lines differently, so they are refused.
#   scripts/format.sh           rewrites the files in place
#   scripts/format.sh --check   lists the files that differ and exits 1 if any (ctest
#                               format_check, label cpu, runs this)
# CLANG_FORMAT names the binary (default: clang-format on PATH).
set -euo pipefail
cd "$(dirname "$0")/.."
cf=${CLANG_FORMAT:-clang-format}
version=$("$cf" --version | sed -n 's/.*version \([0-9]*\)\..*/\1/p')
if [ "$version" != 14 ]; then
  echo "format: $cf is version ${version:-unknown}; the tree is formatted with clang-format 14" >&2
  exit 2
fi
mapfile -t files < <(find include src tests tools bench fuzz python/csrc -type f \
  \( -name '*.h' -o -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' \) | sort)
if [ "${1:-}" = --check ]; then
  bad=0
  for f in "${files[@]}"; do
    if ! "$cf" --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "format: $f differs from .clang-format (scripts/format.sh rewrites it)"
      bad=1
    fi
  done
  [ "$bad" = 0 ] && echo "format: ${#files[@]} files match .clang-format"
  exit "$bad"
fi
"$cf" -i "${files[@]}"
echo "format: ${#files[@]} files formatted"
