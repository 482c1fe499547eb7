// tests/gpu/glue_test_util.h: inputs and device buffers shared by the glue-kernel tests
// (test_glue_kernels.cpp), the fused-prologue tests (test_glue_prologue.cpp) and the glue
// benches (bench_glue_chain.cpp), which build into one binary, test_gpu_glue_kernels.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "gpu_test_util.h"
#include "mxmoe/formats.h"
#include "smxx/glue.h"

namespace mxmoe::test {

// Input rows with varied block magnitudes: zeros, tiny (E4M3 subnormals after scaling), huge.
inline std::vector<float> varied_rows(int T, int H, uint64_t seed) {
  Rng r(seed);
  std::vector<float> x(static_cast<size_t>(T) * H);
  for (int t = 0; t < T; ++t)
    for (int b = 0; b < H / 32; ++b) {
      const int kind = r.below(8);
      const float scale = kind == 0   ? 0.0f
                          : kind == 1 ? 1e-30f
                          : kind == 2 ? 3e4f
                                      : std::ldexp(1.0f, r.below(20) - 10);
      for (int i = 0; i < 32; ++i) {
        float v = r.normal() * scale;
        if (kind == 3 && i == 5) v = 0.0f;       // a zero inside a block
        if (kind == 4 && i == 7) v = v * 1e-6f;  // far below the block's amax: E4M3 subnormal / 0
        x[static_cast<size_t>(t) * H + b * 32 + i] = v;
      }
    }
  return x;
}

// Rows x[T][H] as the strided host images a caller's non-contiguous activations would be (row
// stride >= H), f32 and BF16, NaN in the gaps (padded_rows).
struct StridedRows {
  std::vector<float> f32;
  std::vector<uint16_t> bf16;
};
inline StridedRows strided_rows(const std::vector<float>& x, int T, int H, int64_t stride) {
  std::vector<uint16_t> bits(x.size());
  for (size_t i = 0; i < x.size(); ++i) bits[i] = float_to_bf16(x[i]);
  return {padded_rows(x.data(), T, H, stride, static_cast<float>(NAN)),
          padded_rows(bits.data(), T, H, stride, kBf16Nan)};
}

// The grouping's device outputs and scratch for P pairs and El local experts, and the
// GroupArgs that point at them (ids / weights are the caller's; single_out: out_token and
// expert_has_out; situ: the SiTU fill with beta 4.0 / linear_beta 25.0 unless per-expert
// arrays are given, and h_ready).
struct GroupBuffers {
  DevBuf<int32_t> scratch, off, xrow, pos, otok, has, ready;
  DevBuf<float> roww, beta, lbeta;
  GroupBuffers(int P, int El)
      : scratch(smxx::group_scratch_ints(P, El)),
        off(El + 1),
        xrow(P),
        pos(P),
        otok(P),
        has(El),
        ready(El),
        roww(P),
        beta(El),
        lbeta(El) {}
  smxx::GroupArgs args(const int32_t* ids, const float* w, int T, int k, int start, int El,
                       bool single_out, bool situ, const float* per_beta = nullptr,
                       const float* per_linear_beta = nullptr) const {
    smxx::GroupArgs a;
    a.ids = ids;
    a.weights = w;
    a.T = T;
    a.k = k;
    a.expert_start = start;
    a.expert_count = El;
    a.scratch = scratch.get();
    a.expert_offsets = off.get();
    a.x_row = xrow.get();
    a.row_weight = roww.get();
    a.pair_pos = pos.get();
    if (single_out) {
      a.out_token = otok.get();
      a.expert_has_out = has.get();
    }
    if (situ) a.situ = situ_fill(per_beta, per_linear_beta);
    return a;
  }
  // beta 4.0 / linear_beta 25.0 unless per-expert arrays are given, into beta / lbeta / ready.
  smxx::SituFill situ_fill(const float* per_beta = nullptr,
                           const float* per_linear_beta = nullptr) const {
    smxx::SituFill f;
    f.per_expert_beta = per_beta;
    f.beta = 4.0f;
    f.per_expert_linear_beta = per_linear_beta;
    f.linear_beta = 25.0f;
    f.beta_out = beta.get();
    f.linear_beta_out = lbeta.get();
    f.h_ready = ready.get();
    return f;
  }
};

}  // namespace mxmoe::test
