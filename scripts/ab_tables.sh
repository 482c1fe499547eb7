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
# env_ab_rows DIR: one line per case of the `mxmoe bench --csv` files DIR/{a,b,c}.SEED.PASS.csv
# (gpu_ab_env.sh; c only with a third variant): "layout T routing backend router seed used |
# A medians | B medians | B-A [| C medians | C-A]" (us, differences of the means), sorted; first
# a count of rows whose output check is not ok.
env_ab_rows() {
  awk -F, '
    FNR == 1 { n = split(FILENAME, f, "/"); split(f[n], q, "."); v = q[1]; seed = q[2]; next }
    {
      k = $1 " " $2 " " $6 " " $7 " " $8 " " seed
      used[k] = $10
      if ($22 != "ok") bad++
      t[v, k] = t[v, k] sprintf(" %.1f", $11); s[v, k] += $11; m[v, k]++
    }
    END {
      print "rows whose output check is not ok: " bad + 0
      for (k in used) {
        if (!m["a", k] || !m["b", k]) continue
        a = s["a", k] / m["a", k]
        line = sprintf("%s used %s | A%s | B%s | B-A %+.2f", k, used[k], t["a", k], t["b", k],
                       s["b", k] / m["b", k] - a)
        if (m["c", k])
          line = line sprintf(" | C%s | C-A %+.2f", t["c", k], s["c", k] / m["c", k] - a)
        print line | "sort -k1,1 -k2,2n -k3 -k4 -k5 -k6"
      }
    }' "$1"/[abc].*.csv
}
