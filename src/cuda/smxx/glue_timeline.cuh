// src/cuda/smxx/glue_timeline.cuh: the glue kernels' per-CTA timeline (glue.h, diagnostics), for
// reading a whole decode chain on one clock with the decode GEMMs' stamps (bench/NOTES.md D round
// 36: where the real chain's time goes at T = 1).
//
// Included by each glue translation unit that stamps (prologue.cu, combine.cu): each gets its
// own records (a static __device__ variable per TU) and reads them back through the two helpers
// below. Outside MXMOE_DECODE_TIMELINE builds glue_stamp is empty and the kernels compile to the
// code they have without it (scripts/kernel_text_diff.sh).
#pragma once

#include <vector>

#include "smxx/cta_timeline.h"
#include "smxx/glue.h"  // kGlueTimelineCtas

namespace mxmoe::smxx {
namespace {

using cta_timeline::TimelineEvent;

#ifdef MXMOE_DECODE_TIMELINE
__device__ cta_timeline::Records<kGlueTimelineCtas> g_glue_timeline;

__device__ __forceinline__ void glue_stamp(unsigned cta, TimelineEvent event) {
  cta_timeline::stamp(g_glue_timeline, cta, event);
}
cudaError_t glue_timeline_read_tu(std::vector<uint64_t>* out) {
  return cta_timeline::read(g_glue_timeline, out);
}
cudaError_t glue_timeline_reset_tu(cudaStream_t stream) {
  return cta_timeline::reset(g_glue_timeline, stream);
}
#else
__device__ __forceinline__ void glue_stamp(unsigned, TimelineEvent) {}
cudaError_t glue_timeline_read_tu(std::vector<uint64_t>* out) {
  out->clear();
  return cudaErrorNotSupported;
}
cudaError_t glue_timeline_reset_tu(cudaStream_t) { return cudaErrorNotSupported; }
#endif

}  // namespace
}  // namespace mxmoe::smxx
