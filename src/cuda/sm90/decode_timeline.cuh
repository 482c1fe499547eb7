// src/cuda/sm90/decode_timeline.cuh: an opt-in per-CTA timeline of the bulk-ring decode kernel,
// for questions no kernel-level timing answers (which SMs a GEMM's CTAs got, when they started
// and left while the previous GEMM still ran: bench/NOTES.md D round 21, the early GEMM2).
//
// Built only with the compile definition MXMOE_DECODE_TIMELINE (cmake -DMXMOE_DECODE_TIMELINE=ON,
// a diagnostic build): thread 0 of each CTA stamps %globaltimer (ns) at entry, after its wait for
// the chain's earlier kernels, when its first stage landed, when its last mainloop ended (the
// split-K reduction and the epilogue follow) and at exit, and its SM id, into
// g_decode_timeline[GEMM][CTA]
// (read back by decode_timeline_read, decode_gemm.h). In every other build timeline_stamp is
// empty and the kernels compile to the code they have without it (scripts/kernel_text_diff.sh).
#pragma once

#include <cstdint>

#include "sm90/decode_gemm.h"  // kTimelineCtas, TimelineEvent: the layout the host reads
#include "smxx/cta_timeline.h"

namespace mxmoe::sm90::decode {

#ifdef MXMOE_DECODE_TIMELINE
// One per translation unit (no separate compilation): decode_gemm.cu, which launches the kernels,
// reads its own.
static __device__ cta_timeline::Records<kTimelineCtas> g_decode_timeline[2];

__device__ __forceinline__ void timeline_stamp(bool gemm1, TimelineEvent event) {
  cta_timeline::stamp(g_decode_timeline[gemm1 ? 0 : 1], blockIdx.x, event);
}
#else
__device__ __forceinline__ void timeline_stamp(bool, TimelineEvent) {}
#endif

}  // namespace mxmoe::sm90::decode
