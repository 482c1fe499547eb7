#!/usr/bin/env bash
# scripts/kernel_sass.sh: what a kernel compiles to, read without a GPU. Builds the sm_90a cubin
# of one CUDA source (the build's device flags, scripts/lib/cubin.sh) and prints, per kernel
# whose demangled name matches REGEX: registers, stack bytes (spills, local arrays), and its
# SASS instructions (static, not executed, counts) by kind: global loads / stores, shared
# memory, async copies, tensor-core ops, MUFU, shuffles and votes, barriers, spill traffic,
# calls, branches and convergence, the rest. With --ref REF the same counts of the source at
# git REF are printed above each kernel's, so a change's effect on the machine code is read, not
# guessed; --dump DIR writes each listed kernel's SASS to DIR/<n>.sass (names in
# DIR/index.txt) with every instruction's control bits decoded (stall, scoreboards set and
# waited for), for reading what the counts point at (which first use waits for which loads,
# where a call sits); --loops adds a line per innermost loop of each kernel (its body's
# instructions by kind: what a mainloop step costs).
#
#   bash scripts/kernel_sass.sh [--ref REF] [--loops] [--dump DIR] SRC [REGEX]
#   e.g. bash scripts/kernel_sass.sh --ref HEAD~ src/cuda/smxx/route.cu
#
# Needs nvcc, c++filt, and cuobjdump (the toolkit's, or scripts/deps.sh --sass's in .deps/sass).
# Work files go to build-kdiff/sass/ (ignored).
set -uo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
ref="" dump="" show_loops=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ref) ref=${2:?--ref needs a git ref}; shift 2 ;;
    --dump) dump=${2:?--dump needs a folder}; shift 2 ;;
    --loops) show_loops=1; shift ;;
    -h|--help) sed -n '2,15p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) break ;;
  esac
done
src=${1:?usage: $0 [--ref REF] [--loops] [--dump DIR] SRC [REGEX]}
regex=${2:-.}
[ -f "$src" ] || { echo "kernel_sass: no such source: $src" >&2; exit 2; }
. scripts/lib/cubin.sh
CUOBJDUMP=$(command -v cuobjdump || true)
[ -n "$CUOBJDUMP" ] || CUOBJDUMP=$ROOT/.deps/sass/bin/cuobjdump
[ -x "$CUOBJDUMP" ] || {
  echo "kernel_sass: cuobjdump not found; fetch it with: bash scripts/deps.sh --sass" >&2
  exit 2
}
W=$ROOT/build-kdiff/sass
rm -rf "$W" && mkdir -p "$W/ref"
[ -z "$ref" ] || git archive "$ref" src include | tar -x -C "$W/ref" || exit 2

# listing TREE TAG: TAG.sass (the cubin's SASS) and TAG.res (registers per kernel).
listing() {
  local tree=$1 tag=$2
  compile_cubin "$tree" "$src" "$W/$tag.cubin" || return 1
  "$CUOBJDUMP" -sass "$W/$tag.cubin" > "$W/$tag.sass" &&
    "$CUOBJDUMP" -res-usage "$W/$tag.cubin" > "$W/$tag.res"
}

# The kinds an instruction is counted under (awk; kind_of(base opcode)), shared by both listings.
KINDS="ldg stg smem async mma mufu warp sync spill call bra alu"
KIND_OF='
  function kind_of(base) {
    if (base == "LDG") return "ldg"
    if (base == "STG" || base == "RED" || base == "ATOMG" || base == "ATOM") return "stg"
    if (base ~ /^(LDS|STS|LDSM|STSM|ATOMS)$/) return "smem"
    if (base ~ /^(LDGSTS|UBLKCP|UTMALDG|UTMASTG|UTMAPF|UBLKPF|CCTL)$/) return "async"
    if (base ~ /^(HGMMA|QGMMA|IGMMA|HMMA|IMMA|QMMA)$/) return "mma"
    if (base == "MUFU") return "mufu"
    if (base == "SHFL" || base == "VOTE" || base == "REDUX" || base == "MATCH") return "warp"
    if (base ~ /^(BAR|SYNCS|DEPBAR|WARPGROUP|MEMBAR|ERRBAR|FENCE)$/) return "sync"
    if (base == "LDL" || base == "STL") return "spill"
    if (base == "CALL" || base == "RET") return "call"
    if (base ~ /^(BRA|BRX|JMP|EXIT|BPT|BSSY|BSYNC|WARPSYNC)$/) return "bra"
    return "alu"
  }
  function parse(line) {  # sets op, base and addr of one instruction line of the listing
    addr = line; sub(/^ +\/\*/, "", addr); sub(/\*\/.*/, "", addr)
    sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", line); sub(/;.*/, "", line)  # (the encoding goes too)
    sub(/^@!?U?P[0-9T] +/, "", line)
    op = line; sub(/[ ;].*/, "", op); base = op; sub(/\..*/, "", base)
    target = ""
    if (base == "BRA" && line ~ /0x[0-9a-f]+/) {
      target = line; sub(/.*0x/, "", target); sub(/[^0-9a-f].*/, "", target)
    }
  }'

# hex(h): the value of lowercase hex digits h (mawk has no strtonum).
HEX='
  function hex(h,   i, v) {
    v = 0
    for (i = 1; i <= length(h); ++i) v = 16 * v + index("0123456789abcdef", substr(h, i, 1)) - 1
    return v
  }'

# counts TAG: one line per kernel, "mangled|regs|local|total|kind counts..." from TAG.sass/.res.
counts() {
  local tag=$1
  awk "$KIND_OF"'
    FNR == 1 { file++ }
    file == 1 && /Function [^:]*:/ {  # the resource listing: " Function NAME:" then the usage line
      name = $0; sub(/^[ \t]*Function /, "", name); sub(/:[ \t]*$/, "", name); next
    }
    file == 1 && /REG:/ {
      r = $0; sub(/.*REG:/, "", r); sub(/[^0-9].*/, "", r); regs[name] = r
      l = $0; sub(/.*STACK:/, "", l); sub(/[^0-9].*/, "", l); stack[name] = l; next
    }
    file == 2 && /Function :/ { k = $3; order[++n] = k; next }
    file == 2 && /^ +\/\*[0-9a-f]+\*\// {
      parse($0)
      if (base == "NOP") next
      total[k]++
      c[k, kind_of(base)]++
    }
    END {
      split(kinds_list, kinds, " ")
      for (i = 1; i <= n; ++i) {
        k = order[i]; s = k "|" regs[k] "|" stack[k] "|" total[k]
        for (j = 1; j <= 12; ++j) s = s "|" (c[k, kinds[j]] + 0)
        print s
      }
    }' kinds_list="$KINDS" "$W/$tag.res" "$W/$tag.sass"
}

# loops SASS: the kernel's innermost loops (a backward branch and its target, enclosing no other
# loop; "loop") of at least LOOP_MIN (16) instructions, and the innermost loops around an MMA
# (which may hold loops of their own; "mma"), one line each: where, and the instructions of its
# body by kind. A body holds every path the loop can take (a rare branch's code counts as much
# as the common one).
loops() {
  awk "$KIND_OF$HEX"'
    /^ +\/\*[0-9a-f]+\*\// {
      parse($0); ++n; at[n] = hex(addr); kd[n] = kind_of(base); nop[n] = (base == "NOP")
      if (target != "" && hex(target) <= at[n]) { ++m; ls[m] = hex(target); le[m] = at[n] }
    }
    function has_mma(s, e,   x) {
      for (x = 1; x <= n; ++x) if (at[x] >= s && at[x] <= e && kd[x] == "mma") return 1
      return 0
    }
    function n_in(s, e,   x, t) {
      t = 0
      for (x = 1; x <= n; ++x) t += (at[x] >= s && at[x] <= e && !nop[x])
      return t
    }
    END {
      split(kinds_list, kinds, " ")
      for (i = 1; i <= m; ++i) mm[i] = has_mma(ls[i], le[i])
      for (i = 1; i <= m; ++i) {
        inner = 1; inner_mma = mm[i]  # no loop inside it / none with an MMA inside it
        for (j = 1; j <= m; ++j)
          if (j != i && ls[j] >= ls[i] && le[j] <= le[i] && (ls[j] != ls[i] || le[j] != le[i])) {
            inner = 0
            if (mm[j]) inner_mma = 0
          }
        if (!(inner || inner_mma) || seen[ls[i], le[i]]++) continue
        if (n_in(ls[i], le[i]) < min_n) continue  # retry loops of a barrier wait, and the like
        delete c; tot = 0
        for (x = 1; x <= n; ++x)
          if (at[x] >= ls[i] && at[x] <= le[i] && !nop[x]) { tot++; c[kd[x]]++ }
        printf "  %-4s %05x-%05x %5s", inner ? "loop" : "mma", ls[i], le[i], tot
        for (j = 1; j <= 12; ++j) printf " %5s", c[kinds[j]] + 0
        print ""
      }
    }' kinds_list="$KINDS" min_n="${LOOP_MIN:-16}"
}

# annotate: a kernel's listing, one line per instruction with its scheduling control bits decoded
# from the encoding's high word (bits 41-57: stall cycles, yield, the scoreboard the instruction
# sets when its result is ready (w) or its operands are read (r), and the scoreboards it waits
# for first (W)): "addr  S<stall> <y> w<n> r<n> W<list>  instruction". Which loads share a
# scoreboard, and which first use waits for which loads, is read here.
annotate() {
  awk "$HEX"'
    function bits(v, lo, n) { return int(v / 2 ^ lo) % 2 ^ n }
    /Function :/ { print; next }
    /^ +\/\*[0-9a-f]+\*\// {
      pending = $0; next
    }
    pending != "" && /^ +\/\* 0x[0-9a-f]+ \*\// {
      w = $0; sub(/^ +\/\* 0x/, "", w); sub(/ .*/, "", w)
      v = hex(substr(w, 1, 6))  # bits 40-63 of the high word
      addr = pending; sub(/^ +\/\*/, "", addr); sub(/\*\/.*/, "", addr)
      ins = pending; sub(/^ +\/\*[0-9a-f]+\*\/ +/, "", ins); sub(/ *\/\*.*/, "", ins)
      wr = bits(v, 6, 3); rd = bits(v, 9, 3); wt = bits(v, 12, 6); list = ""
      for (b = 0; b < 6; ++b) if (bits(wt, b, 1)) list = list b
      printf "%6s  S%-2d %s w%s r%s W%-6s %s\n", addr, bits(v, 1, 4), bits(v, 5, 1) ? "y" : ".",
        wr == 7 ? "-" : wr, rd == 7 ? "-" : rd, list == "" ? "-" : list, ins
      pending = ""
    }'
}

short() {  # demangled name without the namespaces and the parameter list
  c++filt | sed -E 's/mxmoe::(smxx::|sm90::|detail::)?//g; s/\(anonymous namespace\):://g;
    s/^void //; s/\(.*\)$//'
}

listing "$ROOT" tree || exit 1
counts tree > "$W/tree.counts"
if [ -n "$ref" ]; then
  listing "$W/ref" ref || exit 1
  counts ref > "$W/ref.counts"
  cut -d'|' -f1 "$W/ref.counts" | short > "$W/ref.names"  # kernels are matched by short name:
fi                                 # the mangled one carries the file's hash and the parameters
[ -z "$dump" ] || { mkdir -p "$dump" && : > "$dump/index.txt"; }

printf '%-4s %5s %5s %6s %5s %5s %5s %5s %5s %5s %5s %5s %5s %5s %5s %6s\n' \
  "" regs stack instr ldg stg smem async mma mufu warp sync spill call bra alu
n=0
while IFS='|' read -r mangled rest; do
  name=$(echo "$mangled" | short)
  echo "$name" | grep -Eq -- "$regex" || continue
  n=$((n + 1))
  echo "[$n] $name" | cut -c1-160
  if [ -n "$ref" ]; then
    old=$(grep -n -F -x -- "$name" "$W/ref.names" | head -n 1 | cut -d: -f1)
    [ -z "$old" ] || old=$(sed -n "${old}p" "$W/ref.counts" | cut -d'|' -f2-)
    if [ -z "$old" ]; then
      echo "  ref  (no kernel of this name at $ref)"
    else
      echo "$old" | tr '|' ' ' | awk '{printf "  ref "; for (i = 1; i <= NF; ++i)
        printf (i == 3 || i == NF) ? " %6s" : " %5s", $i; print ""}'
    fi
  fi
  echo "$rest" | tr '|' ' ' | awk '{printf "  now "; for (i = 1; i <= NF; ++i)
    printf (i == 3 || i == NF) ? " %6s" : " %5s", $i; print ""}'
  if [ "$show_loops" = 1 ]; then
    awk -v k="$mangled" '/Function :/ { on = ($3 == k) } on' "$W/tree.sass" | loops
  fi
  if [ -n "$dump" ]; then
    awk -v k="$mangled" '/Function :/ { on = ($3 == k) } on' "$W/tree.sass" | annotate \
      > "$dump/$n.sass"
    echo "$n $name" >> "$dump/index.txt"
  fi
done < "$W/tree.counts"
[ "$n" -gt 0 ] || { echo "kernel_sass: no kernel of $src matches '$regex'" >&2; exit 1; }
