// src/cuda/smxx/cta_timeline.h: the record layout of the opt-in per-CTA timelines (diagnostic
// builds, cmake -DMXMOE_DECODE_TIMELINE=ON), shared by the decode GEMMs (sm90/decode_timeline.cuh)
// and the glue kernels around them (smxx/glue.h: the prologue and the combine), so that one run
// of the whole chain can be read on one clock (%globaltimer, ns).
//
// Each kernel keeps its records in a __device__ array of its own translation unit (no separate
// compilation): [CTA][kTlFields] 64-bit words, 0 where a CTA or an event was not stamped. The
// device part below (nvcc only) writes one stamp and reads a TU's array back; in builds without
// MXMOE_DECODE_TIMELINE no kernel calls it, and the kernels compile to the code they have without
// it (scripts/kernel_text_diff.sh).
#pragma once

#include <cstdint>

namespace mxmoe::cta_timeline {

// kTlData / kTlMath: two phases inside a kernel, its own (the decode GEMMs: first stage landed,
// last mainloop done; the prologue's CTA 0: ids counted, offsets written).
enum TimelineEvent : int {
  kTlStart = 0,
  kTlWaited = 1,
  kTlExit = 2,
  kTlSm = 3,
  kTlData = 4,
  kTlMath = 5,
  kTlFields = 6
};

}  // namespace mxmoe::cta_timeline

#if defined(__CUDACC__)
#include <cuda_runtime.h>

#include <vector>

namespace mxmoe::cta_timeline {

// Thread 0 of the calling CTA writes the time of `event` into rec (and its SM id at kTlStart).
// (Kernels stamp through their Records, below.)
__device__ __forceinline__ void stamp(unsigned long long* rec, TimelineEvent event) {
  if (threadIdx.x != 0) return;
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  rec[event] = t;
  if (event == kTlStart) {
    unsigned sm;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(sm));
    rec[kTlSm] = sm;
  }
}

// A kernel's records for its first kCtas CTAs (a __device__ variable of one translation unit).
template <int kCtas>
struct Records {
  unsigned long long cta[kCtas][kTlFields];
};
template <int kCtas>
__device__ __forceinline__ void stamp(Records<kCtas>& records, unsigned cta, TimelineEvent event) {
  if (cta < static_cast<unsigned>(kCtas)) stamp(records.cta[cta], event);
}

// Host side, called from the translation unit that defines `records` (its host shadow names
// the device variable there: one Records, or an array of them).
template <class Records>
cudaError_t read(const Records& records, std::vector<uint64_t>* out) {
  out->assign(sizeof(Records) / sizeof(uint64_t), 0);
  return cudaMemcpyFromSymbol(out->data(), records, sizeof(Records));
}
template <class Records>
cudaError_t reset(const Records& records, cudaStream_t stream) {
  void* p = nullptr;
  const cudaError_t e = cudaGetSymbolAddress(&p, records);
  return e != cudaSuccess ? e : cudaMemsetAsync(p, 0, sizeof(Records), stream);
}

}  // namespace mxmoe::cta_timeline
#endif
