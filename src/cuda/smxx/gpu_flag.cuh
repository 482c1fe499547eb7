// src/cuda/smxx/gpu_flag.cuh: publishing a ready flag at GPU scope, the writer's half of the
// prologue's route_ids_ready handshake (the readers spin with ld.acquire.gpu:
// sm90/decode_tile.cuh, wait_ids_ready).
//
// Why a release store and not __threadfence() + atomicExch: __threadfence() is fence.sc.gpu
// (MEMBAR.SC.GPU), sequentially consistent, which the handshake does not need; a release only has
// to order the writer's earlier stores (and, being cumulative, the CTA's stores it observed
// through the barrier before it) ahead of the flag. fence.sc cost ~340 ns after the router's
// stores on an H100 (bench_route_phases, bench/NOTES.md G round 13); the release is measured
// beside it in the same program.
#pragma once

#include <cstdint>

namespace mxmoe::smxx {

// Stores v to *flag with release semantics at GPU scope (sm_70+).
__device__ __forceinline__ void flag_release_gpu(int32_t* flag, int32_t v) {
  asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(flag), "r"(v) : "memory");
}

}  // namespace mxmoe::smxx
