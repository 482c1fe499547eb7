# scripts/ab_tables.sh: sourced by the timing A/B scripts (gpu_ab_ws.sh, ab_trees.sh), the one
# place that reads the two outputs they tabulate.
# gemm_only_rows FILE: "tile_n layout T gemm1 gemm1+mx gemm2" (us) per BENCH line of the
# GEMM-only bench (tests/gpu/sm90_bench_grouped_gemm.cpp).
gemm_only_rows() {
  local re='s/^BENCH \([A-Z0-9x]*\) .*T= *\([0-9]*\) .*tile_n=\([0-9]*\).*gemm1 *\([0-9.]*\) us.*'
  re+='gemm1+mx *\([0-9.]*\) us | gemm2 *\([0-9.]*\) us.*/\3 \1 \2 \4 \5 \6/p'
  sed -n "$re" "$1"
}
# e2e_row FILE: "layout/T/backend median_us" of every mxmoe-backend row of an `mxmoe bench`
# table, on one line.
e2e_row() {
  grep -E '^(ep16|tp8ep4) ' "$1" | awk '{printf "%s/%s/%s %s  ", $1, $2, $6, $9}'
}
