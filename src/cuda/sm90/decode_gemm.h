// src/cuda/sm90/decode_gemm.h: host side of the SM90 decode grouped GEMM (decode_gemm_kernel.cuh),
// internal to sm90/. grouped_gemm.cu's launch_gemm1 / launch_gemm2 hand it the problem first.
//
// Split-K is chosen from host-known bounds only (max_rows, num_experts, M, K, SM count and the
// kernel's occupancy), never from device data, so every launch is CUDA-graph capturable.
#pragma once

#include <cuda_runtime.h>

#include "sm90/grouped_gemm.h"

namespace mxmoe::sm90 {

struct KernelArgs;  // grouped_gemm_kernel.cuh

constexpr int kDecodeMaxExperts = 1024;  // the decode kernel's per-CTA tile prefix capacity
// kGemmAuto sends 16-token tiles here when the mean rows per expert (max_rows / num_experts) is
// at most kDecodeMaxMeanRows: on the H200 the decode kernel was 1.9x faster at EP16 T=1, 1.35x
// at T=4, 4% faster at T=256 (mean 4.6) and 7% slower at T=512 (mean 9.1) than the tiled kernel
// (bench/NOTES.md D).
constexpr bool kDecodeByDefault = true;
constexpr int kDecodeMaxMeanRows = 8;
// 64-K steps per ring stage (one bulk copy each for weights and scales, one per token row): 2
// measured best (T=64 EP16 366 us vs 443 with 1 and 400 with 4, whose 147 registers allow only
// 2 CTAs per SM).
constexpr int kDecodeStageSteps = 2;
// Timing / test knob: force 1, 2 or 4 steps per stage for later launches (0 = the default).
void decode_set_stage_steps(int ks);

// The K split (1, 2 or 4 CTAs of a cluster per tile; 8 only when forced) for m_tiles 64-row
// weight tiles, KT 64-wide K steps, at most max_rows pair rows over num_experts experts, when
// slots[i] CTAs of split 2^i fit on the device at once: 1 when the tiles fill the slots, else
// the smallest split of the least predicted time, (waves of clusters) x (K steps per CTA) + a
// fixed reduction cost, with 3/4 of the slots usable by clusters.
int decode_split_k(int m_tiles, int KT, int max_rows, int num_experts, const int (&slots)[4]);

// When problem g is the decode kernel's (g.kernel == kGemmDecode, or kGemmAuto with a 16-token
// tile, kDecodeByDefault and a mean of at most kDecodeMaxMeanRows rows per expert), launches it
// and returns true with *err = the launch result (cudaErrorInvalidValue for a bad kernel or
// split_k value, or, when forced, a tile_n other than 0 / 16, more than kDecodeMaxExperts
// experts or w_scales not 16-byte aligned); false leaves the problem to the tiled kernel.
template <bool kGemm1>
bool try_launch_decode_gemm(const KernelArgs& a, const GroupedProblem& g, int num_sms,
                            cudaStream_t stream, cudaError_t* err);

}  // namespace mxmoe::sm90
