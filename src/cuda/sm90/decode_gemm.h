// src/cuda/sm90/decode_gemm.h: host side of the SM90 decode grouped GEMM (decode_gemm_kernel.cuh),
// internal to sm90/. grouped_gemm.cu's launch_gemm1 / launch_gemm2 hand it the problem first.
//
// Split-K is chosen from host-known bounds only (max_rows, num_experts, M, K, SM count and the
// kernel's occupancy), never from device data, so every launch is CUDA-graph capturable.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "sm90/grouped_gemm.h"
#include "smxx/cta_timeline.h"

namespace mxmoe::sm90 {

struct KernelArgs;  // grouped_gemm_kernel.cuh

constexpr int kDecodeMaxExperts = 1024;  // the decode kernel's per-CTA tile prefix capacity
// The kernels keep each expert's begin and rows in 16 bits of shared memory (a wider table cost
// a CTA per SM at split 4: bench/NOTES.md D round 11), so max_rows is bounded; decode sizes
// (T * k <= ~1024) are far below it.
constexpr int kDecodeMaxRows = 65535;
// kGemmAuto sends 16-token tiles here when the mean rows per expert (rows_hint / num_experts) is
// at most kDecodeMaxMeanRows. On the H200 (bench/NOTES.md D, GEMM-only, EP16) the decode kernel
// took 276 us at T=64 (tiled kernel 345), 422 at T=256 (519) and 458 at T=512 (mean 9.1 rows;
// tiled 16-token tiles 520): it wins while most experts fit one 16-token tile.
constexpr bool kDecodeByDefault = true;
constexpr int kDecodeMaxMeanRows = 12;
// Two mainloops (bench/NOTES.md D round 5): the register-streamed one (decode_gemm_kernel.cuh)
// and, for at most kDecodeBulkMaxRows expected rows or at most one row per
// kDecodeBulkExpertsPerRow experts, the bulk-copy ring (decode_bulk_kernel.cuh). End to end on
// the H200 (w4a16, us, ring / register): EP16 T=1 33.3 / 42.0, T=4 56.5 / 65.7, T=8 94.1 / 93.8,
// T=16 132.5 / 124.9; TP8xEP4 T=1 27.9 / 40.7, T=4 44.3 / 50.6, T=8 57.9 / 67.6, T=16 92.4 /
// 85.2. The kernels alone time alike at T=1 (ncu), so the ring's gain is in the PDL chain.
constexpr int kDecodeBulkRing = 1;
constexpr int kDecodeRegStream = 2;
constexpr int kDecodeBulkMaxRows = 4;
constexpr int kDecodeBulkExpertsPerRow = 4;
// The ring also takes short K (at most kDecodeBulkMaxSteps 64-wide steps, TP8xEP4's GEMM2 with
// K = 384): its producer warp runs ahead into the next tile, where the register mainloop waits
// on each tile's first weights. GEMM-only on the H200 (same run, us, ring / register), TP8xEP4
// GEMM2: T=1 8.6 / 9.5, T=16 30.2 / 33.2, T=64 73.0 / 81.5, T=224 102.5 / 115.3; the long-K
// GEMMs (KT 48-56) stay faster on the register mainloop (EP16 T=64 GEMM2 89.0 / 98.6).
constexpr int kDecodeBulkMaxSteps = 8;
// With the kSmall kernels the ring also takes up to kDecodeSmallBulkMeanRowsX2 / 2 rows per
// expert on average. GEMM-only on the H200 (same run, us, ring / register): EP16 T=16 (0.29 rows
// per expert) GEMM1 59.6 / 64.7, GEMM2 32.9 / 41.7; T=64 (1.14) 138.3 / 137.4, 70.0 / 75.1; T=256
// (4.6) 220.1 / 202.2, 111.9 / 108.7. End to end on an H100 (thirtieth session, w4a16 us, rule
// before -> after): EP16 T=16 113.6 -> 111.3, T=32 179.1 -> 175.2, T=64 278.8 -> 268.4; TP8xEP4
// T=32 113.4 -> 106.8, T=64 155.5 -> 151.0; T=8 and T=96-128 (1.7-2.3 rows) unchanged; on the
// H200 EP16 T=64 231.4 -> 218.4 (two sessions' tables). Beyond 1.5 rows the ring is mixed and not
// monotonic in rows (H200, TP8xEP4: +7% at T=96, -7% at T=128, +6% at T=256; bench/NOTES.md).
constexpr int kDecodeSmallBulkMeanRowsX2 = 3;
// Except GEMM1 with long K from kDecodeGemm1RegMinMeanRows rows per expert on average, which
// takes the register mainloop (D round 32, thirty-seventh session, H200, same call). GEMM-only,
// EP16 T=64 (1.14 rows; us, ring / register): GEMM1 137.5 / 131.1, GEMM2 70.2 / 72.0. End to
// end, both GEMMs forced onto the register mainloop against the rule (w4a16, two passes): EP16
// T=48 193.2 / 191.5, T=64 216.5 / 208.6, T=80 246.7 / 244.3; T=16-32 the ring wins (91.3 /
// 94.8, 141.8 / 143.8). TP8xEP4 GEMM1 ties at T=64 (76.5 / 76.6). This rule against the one
// before, end to end in three H100 A/Bs (each in one call, w4a16 / w4a8): EP16 T=64 -0.4..-1.7%
// / -0.4..-2.6%, T=80 -0.1..-1.0% / -0.5..-1.4%, T=56 (one row per expert, two A/Bs) +0.7..+1.2%
// / -0.1..+1.1%, TP8xEP4 T=56-80 within +1.3 / -1.4% (forcing both GEMMs onto the register
// mainloop had lost 0.5-0.8% at EP16 T=64-80). Not yet timed end to end on an H200.
constexpr int kDecodeGemm1RegMinMeanRows = 1;
// Test / timing knob: force a mainloop for later launches (0 = the rule above); the process
// starts from MXMOE_DECODE_MAINLOOP (1 or 2) when set, for end-to-end A/B timings.
void decode_set_mainloop(int m);
// On by default (bench/NOTES.md D rounds 25-27, twenty-ninth session): launches with small_scales
// (prepare found no weight scale above 2^1) take kernels compiled without the per-fragment
// big-scale test (kSmall: one basic block per step, two multiplier registers instead of four, the
// register mainloop's token rows from a per-tile table of row addresses). End to end on the
// H200: EP16 T=16 108.1 -> 96.4 us, T=64 243.8 -> 231.9, T=512 408.1 -> 347.1; TP8xEP4 T=64
// 147.2 -> 135.6. Other weights keep the kernels with the test. Same values bit for bit.
// MXMOE_DECODE_SMALL=0 starts the process with it off (A/B timings); decode_set_small for tests.
void decode_set_small(bool on);
bool decode_small();

// The grouping known before the wait. At T = 1 the chain's kernels run one after another, each
// far below the DRAM rate (bench/NOTES.md, twenty-first session: prologue 7.7, GEMM1 13, GEMM2
// 10 us under ncu), and a GEMM's CTAs, launched early under PDL, sit in pdl::wait() until the
// prologue is done although their weights depend on nothing it writes, only on which expert
// each tile is. With the caller's ids (GroupedProblem::route_ids) a CTA builds its tile list
// from the ids (tile_prefix.cuh, build_tile_prefix_from_ids) before the wait, and may issue its
// first tile's weight loads there too (preload: the ring's first stages, or the register
// mainloop's first kDepth steps); only the activation rows wait. Same tiles, same sums:
// bit-identical outputs.
// Why reading the ids before the wait is safe: every kernel of run_moe's chain waits before it
// triggers its dependents (smxx/pdl.cuh), so a kernel of the chain starts only after everything
// before the chain has completed; the ids are written before it (GroupedProblem::route_ids).
// GEMM1's early trigger of GEMM2 (DecodeSpec::trigger), once its tile list is known: always;
// only when split (so its ranks > 0 leave their SMs before rank 0 has reduced); only when split
// and every cluster has at most one tile (the grid's clusters >= its tiles).
constexpr int kTriggerAlways = 1;
constexpr int kTriggerSplit = 2;
constexpr int kTriggerSplitOneTile = 3;
struct DecodeSpec {
  const int32_t* ids = nullptr;  // null: the tile list from the offsets, after the wait
  int pairs = 0;
  int expert_start = 0;
  const int* ids_ready = nullptr;  // non-null: read ids once this is set (route_ids_ready)
  int preload = 0;                 // the first tile's weights requested before the wait
  int trigger = 0;                 // GEMM1 on the bulk ring: kTrigger*, else 0
  int balance = 0;  // the bulk ring: every working cluster as many tiles (decode_balance_applies)
  // GEMM1 on its own inputs (own.x non-null): the token rows straight from the caller's x, row
  // p's token found in the ids (the glue's stable grouping: the pairs of an expert in pair
  // order, token = pair / top_k), and the SiTU parameters by the glue's own rule
  // (smxx/situ_fill.cuh). Nothing it reads is written by the chain, so it waits for the previous
  // kernel only before it exits (GEMM2's wait on it then covers the glue's outputs too).
  Gemm1OwnInputs own;
};
// Diagnostic builds only (MXMOE_DECODE_TIMELINE, decode_timeline.cuh; else
// cudaErrorNotSupported): the bulk-ring kernels' per-CTA stamps, out = [GEMM1, GEMM2][CTA]
// [entry ns, waited ns, exit ns, SM id, data ns, math ns] (kTimelineCtas CTAs each; 0: not
// stamped), as the last
// launches left them; decode_timeline_reset zeroes them on `stream` (before the launches to read).
namespace decode {
constexpr int kTimelineCtas = 2048;  // CTAs recorded per GEMM (blockIdx.x beyond: not recorded)
// The record layout (smxx/cta_timeline.h, shared with the glue kernels): kTlData: thread 0's
// first stage landed (its first full-barrier wait returned); kTlMath: its last tile's mainloop
// done (what follows is the split-K reduction and the epilogue).
using namespace ::mxmoe::cta_timeline;  // TimelineEvent, kTl*
}  // namespace decode
cudaError_t decode_timeline_read(std::vector<uint64_t>* out);
cudaError_t decode_timeline_reset(cudaStream_t stream);
// MXMOE_DECODE_TRACE (set: on, read once per process): each decode launch's choices (mainloop,
// spec, trigger, split, expected tiles, clusters) to stderr whenever they change.
// MXMOE_DECODE_SPLIT1 / MXMOE_DECODE_SPLIT2 (1, 2 or 4; read once per process): force GEMM1's /
// GEMM2's K split instead of decode_split_k's choice, for same-binary A/Bs.
// MXMOE_DECODE_SPEC (read once per process; decode_set_spec for tests): a bit set, 0 off,
// default kDecodeSpecSmall (below):
// - kDecodeSpecTiles: both decode GEMMs take their tile list from route_ids before the wait;
// - kDecodeSpecPreload (implies Tiles): the first tile's weights requested before the wait;
// - kDecodeSpecEarlyGemm2: GEMM1 on the bulk ring triggers GEMM2 once it knows its tiles (after
//   its wait), so GEMM2's CTAs start on the SMs that GEMM1's split-K ranks > 0 leave while its
//   rank-0 CTAs reduce and store (the register mainloop's GEMM1 keeps its late trigger:
//   bench/NOTES.md D round 8); kDecodeSpecEarlyGemm2Split: the same, only when GEMM1 is split
//   (with or without the ids); kDecodeSpecEarlyGemm2OneTile: only when split and each cluster
//   has at most one tile;
// - kDecodeSpecOwnInputs (implies Tiles): GEMM1 on the bulk ring, when given its own inputs
//   (Gemm1Params::own: W4A16 on the caller's BF16 rows), runs beside the glue instead of after.
// Kernels of split 8 (only when forced) never take the ids.
constexpr int kDecodeSpecOff = 0;
constexpr int kDecodeSpecTiles = 1;
constexpr int kDecodeSpecPreload = 2;
constexpr int kDecodeSpecEarlyGemm2 = 4;
constexpr int kDecodeSpecOwnInputs = 8;
constexpr int kDecodeSpecEarlyGemm2OneTile = 16;
constexpr int kDecodeSpecEarlyGemm2Split = 32;
constexpr int kDecodeSpecAll = 15;  // every bit but the narrower triggers and the rule
// The rule, and the default: the own-inputs window below where it applies, else Tiles |
// EarlyGemm2 where the layer's expected GEMM2 weight stream (the experts the rows hint reaches x
// H x I / 2 bytes) is at most kDecodeSpecSmallBytes, else nothing. Measured on the H200
// (bench/NOTES.md D rounds 21-22; Kimi-K3's routed experts are H = 3584 wide, 5.25 MiB of GEMM2
// weights per EP16 expert, 0.66 MiB per TP8xEP4 one): the pair saves 1-2.5 us where that stream
// is ~5.5 MB or less (EP16 T=1, TP8xEP4 T=1/2), is neutral at TP8xEP4's 11 MB (T=4) and costs
// 1-4 us at EP16's 11-22 MB (T=2/4); the tile list from the ids alone costs 0.5-2 us (it adds to
// GEMM2's start unless GEMM1's early trigger hides it), so outside the rule neither runs.
constexpr int kDecodeSpecSmall = 64;
constexpr int kDecodeSpecDefault = kDecodeSpecSmall;
constexpr int64_t kDecodeSpecSmallBytes = int64_t{8} << 20;
// The rule's own-inputs window: where the glue offers GEMM1 its own inputs
// (GroupedProblem::gemm1_own_offered), the rule runs Tiles | EarlyGemm2 | OwnInputs instead for
// kDecodeOwnMinRows..kDecodeOwnMaxRows expected pair rows and kDecodeOwnMinPairs..
// kDecodeOwnMaxPairs ids. GEMM1 then streams its weights without waiting for the prologue's
// grouping CTA, whose time grows with the ids it scans (3-7 us after an L2 flush). Measured end
// to end on an H100 (bench/NOTES.md D round 39, us): TP8xEP4 T=3 -0.7, T=4-8 -2.7..-3.5, EP16 T=8
// -2.4. Outside: fewer ids leave little to hide (TP8xEP4 T=2 +0.35, the full layer's T=1 +3.3
// with its trigger over 176 MB of GEMM1 weights), fewer rows lost (EP16 T=5/6 +4: the trigger
// over a long GEMM1), and 256 ids (T=16 at top-16) lost in both layouts (the pre-wait tile list).
constexpr int kDecodeOwnMinRows = 8;
constexpr int kDecodeOwnMaxRows = 32;
constexpr int kDecodeOwnMinPairs = 48;
constexpr int kDecodeOwnMaxPairs = 128;
bool decode_spec_own(int rows, int pairs);
void decode_set_spec(int mode);
int decode_spec();  // the mode now in force (tests restore it)
// kDecodeSpecSmall's test: the expected GEMM2 weight stream of a layer with num_experts local
// experts of H x I, rows expected pair rows (the rows hint), is at most kDecodeSpecSmallBytes.
bool decode_spec_small(int num_experts, int rows, int64_t H, int64_t I);
// Whether the decode GEMMs, under the mode in force, take ids that come without own inputs (the
// GPU router's, written by the chain's first kernel: GroupedProblem::route_ids_ready) for the
// same layer and rows. The glue sets up the ids' ready flag only then: elsewhere the flag's
// fences sit on the prologue's critical path and buy nothing (EP16 / TP8xEP4 T=64 +0.7..+0.8 us
// on an H100 with the flag set everywhere, level with it set only here: bench/NOTES.md,
// forty-ninth and fiftieth sessions. T=8's ~1 us with the flag allowed, where both arms launch
// the same kernels, is benchmark order: level when T=8 runs alone, fifty-first session).
bool decode_spec_takes_ids(int num_experts, int rows, int64_t H, int64_t I);

// The K split (1, 2 or 4 CTAs of a cluster per tile; 8 only when forced) for m_tiles 64-row
// weight tiles, KT 64-wide K steps, at most max_rows pair rows over num_experts experts, when
// slots[i] CTAs of split 2^i fit on the device at once: 1 when the tiles fill the slots, else
// the smallest split of the least predicted time, (waves of clusters) x (K steps per CTA) + a
// fixed reduction cost, with 3/4 of the slots usable by clusters.
int decode_split_k(int m_tiles, int KT, int max_rows, int num_experts, const int (&slots)[4]);

// GEMM1's short second round (bench/NOTES.md D rounds 40-43). Once a GEMM's tiles pass one round of
// CTAs, the few tiles of the last round stream nearly alone, at one CTA's rate, and the chain waits
// for them (EP16: 96 GEMM1 tiles per expert, 660 split-1 slots hold 6 experts; a 7th cost 13 us
// where a copy-rate expert costs ~6.5). The host has only the rows hint, but the bulk ring's
// clusters learn the real tile count before their first tile, and under balance, when it passes the
// grid, only as many clusters work as finish it in the same number of rounds with equal shares
// (decode_tile_stride below; the rest exit at once, their SMs free for the next kernel). Each tile
// is still computed whole by one cluster, so the output is the same bit for bit. Measured end to
// end on an H100 (same binary and call, us, both backends, two seeds): ep16 T=7 -8.3..-9.3, T=8
// -2.7..-3.5, T=12 -3.2..-4.3, T=16 -1.6..-8.5, T=17 -0.3..-11.8, T=32 -2.5..-4.1; tp8ep4 T=17-18
// -2.3..-4.6, T=32 -1.1..-2.4; untouched draws level (+-0.2). It lost only where TP8xEP4's short-K
// GEMM2 (6 steps per tile, 4-5 rounds) was balanced: T=12 and T=16 +0.35..+0.83. So the rule
// (kDecodeBalanceLongK, the default) balances the GEMMs of more than kDecodeBulkMaxSteps K steps
// per tile; on by default after a second call (D round 44: off against the rule, ep16 T=7
// +6.9..+7.6, T=12 +2.4..+3.4, T=17 up to +10.5, tp8ep4 T=17 +3.2..+4.1; the rule's worst loss,
// ep16 T=17 at 16 experts, 0.4-1.9 us). MXMOE_DECODE_BALANCE (read once per process: 0 off, 1 the
// rule, 2 every GEMM) and decode_set_balance (tests) choose.
// The register mainloop has no balance: tried there (D round 45), it lost at EP16 T=128-256
// (+4..+10 us) and TP8xEP4 T=256 (+3..+5.5), and gained only 0.3-2.6 at TP8xEP4 T=64-128.
// A host-side rule was timed against it in the same call and removed: GEMM1 to split 2 where the
// hint's rows likely pass a round (an occupancy DP) gained less (ep16 T=7 -5.0..-5.7 us) and lost
// up to 3.2 us at TP8xEP4 T=16, whose draws fit one round (D rounds 42-43).
constexpr int kDecodeBalanceOff = 0;
constexpr int kDecodeBalanceLongK = 1;
constexpr int kDecodeBalanceAlways = 2;
constexpr int kDecodeBalanceDefault = kDecodeBalanceLongK;
// Whether a bulk-ring GEMM of reduction length K balances its tiles under `mode`.
bool decode_balance_applies(int mode, int K);
// The stride of a cluster's walk over `total` tiles (tile cid, cid + stride, ...; clusters from
// stride on have none): nclu, or with `balance` (DecodeSpec::balance) the fewest clusters that
// finish the tiles in the same number of rounds, so the working clusters' tile counts differ by
// at most one: 672 tiles on 660 clusters run as 336 x 2, not 660 + 12. (The kernels call it;
// constexpr, so the host checks it too.)
constexpr int decode_tile_stride(int total, int nclu, int balance) {
  if (balance == 0 || total <= nclu) return nclu;
  const int rounds = (total + nclu - 1) / nclu;
  return (total + rounds - 1) / rounds;
}
static_assert(decode_tile_stride(672, 660, 1) == 336 && decode_tile_stride(672, 660, 0) == 660 &&
                  decode_tile_stride(660, 660, 1) == 660 && decode_tile_stride(1441, 660, 1) == 481,
              "balanced strides");
void decode_set_balance(int mode);
int decode_balance();

// When problem g is the decode kernel's (g.kernel == kGemmDecode, or kGemmAuto with a 16-token
// tile, kDecodeByDefault and a mean of at most kDecodeMaxMeanRows rows per expert), launches it
// and returns true with *err = the launch result (cudaErrorInvalidValue for a bad kernel or
// split_k value, or, when forced, a tile_n other than 0 / 16, more than kDecodeMaxExperts
// experts, max_rows above kDecodeMaxRows or w_scales not 16-byte aligned); false leaves the
// problem to the tiled kernel.
// own (GEMM1 only, optional): the inputs GEMM1 may read in place of the glue's
// (kDecodeSpecOwnInputs).
template <bool kGemm1>
bool try_launch_decode_gemm(const KernelArgs& a, const GroupedProblem& g, int num_sms,
                            cudaStream_t stream, cudaError_t* err,
                            const Gemm1OwnInputs* own = nullptr);

}  // namespace mxmoe::sm90
