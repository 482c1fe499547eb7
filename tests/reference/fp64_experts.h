// tests/reference/fp64_experts.h: the routed experts as a plain fp64 loop, token by token and slot
// by slot, written from the semantics in reference.h (not from its code).
//
// Two flavours:
//  - kMirror: rounds at exactly the reference's rounding points and nowhere else: GEMM1 outputs to
//    fp32, SiTU through formats.h's fp32 situ_glu (itself checked against the double formula in
//    test_formats_codecs), then Q2; GEMM2 outputs to fp32 and the weighted sum in fp32, slot by
//    slot (product rounded, then sum rounded), as reference.h specifies. A fp32-vs-fp64 SiTU
//    difference of a few ulps would otherwise flip a BF16 or E4M3 rounding now and then, and one
//    flip moves the result by far more than the accumulation error the comparison is meant to
//    bound. Every dot product is still a plain fp64 loop, so the two agree to the last bit unless
//    a fp64 sum lands within reordering error of a fp32 rounding boundary (~2^-29 per value).
//  - kPure: everything in double with std::tanh / std::exp; Q1 and Q2 are applied to the double
//    values. Differs from the reference only through such rare rounding flips.
#pragma once

#include <vector>

#include "fixture.h"
#include "mxmoe/reference.h"

namespace fixture {

enum class Path { kMirror, kPure };

struct Fp64Experts {
  const mxmoe::MoeLayer& layer;

  explicit Fp64Experts(const mxmoe::MoeLayer& l) : layer(l) {}

  std::vector<double> quant(const std::vector<double>& v, mxmoe::ActMode mode) const {
    if (mode == mxmoe::ActMode::kMxfp8) return mxfp8_round(v);
    std::vector<double> r(v.size());
    for (size_t i = 0; i < v.size(); ++i) r[i] = bf16_round(v[i]);
    return r;
  }

  // One expert on one (unquantized) latent row.
  std::vector<double> expert(int e, const std::vector<double>& x, mxmoe::ActMode mode, double beta,
                             double lbeta, Path path) {
    const int I = layer.cfg.moe_intermediate_size;
    const mxmoe::ExpertView& ex = layer.experts[e];
    const std::vector<double> xq = quant(x, mode);
    const std::vector<double> g = matvec(ex.w1, xq), u = matvec(ex.w3, xq);
    std::vector<double> h(I);
    for (int i = 0; i < I; ++i)
      h[i] = path == Path::kMirror
                 ? mxmoe::situ_glu(static_cast<float>(g[i]), static_cast<float>(u[i]),
                                   static_cast<float>(beta), static_cast<float>(lbeta))
                 : situ_double(g[i], u[i], beta, lbeta);
    std::vector<double> y = matvec(ex.w2, quant(h, mode));
    if (path == Path::kMirror)
      for (auto& v : y) v = static_cast<float>(v);
    return y;
  }

  // out[T, H] over owned experts; ids -1 or outside [start, start + count) add nothing.
  std::vector<double> run(const std::vector<float>& x, int T, const std::vector<int32_t>& ids,
                          const std::vector<float>& wts, int k, mxmoe::ActMode mode,
                          const mxmoe::SituParams& situ, int start, int count, Path path) {
    const int H = layer.cfg.routed_expert_hidden_size;
    std::vector<double> out(static_cast<size_t>(T) * H, 0.0);
    for (int t = 0; t < T; ++t) {
      const std::vector<double> xt(x.begin() + static_cast<size_t>(t) * H,
                                   x.begin() + static_cast<size_t>(t + 1) * H);
      for (int j = 0; j < k; ++j) {
        const int e = ids[static_cast<size_t>(t) * k + j];
        if (e < start || e >= start + count) continue;  // also drops -1
        const double beta = situ.per_expert_beta ? situ.per_expert_beta[e] : situ.beta;
        const double lb =
            situ.per_expert_linear_beta ? situ.per_expert_linear_beta[e] : situ.linear_beta;
        const std::vector<double> y = expert(e, xt, mode, beta, lb, path);
        const double w = wts[static_cast<size_t>(t) * k + j];
        for (int c = 0; c < H; ++c) {
          double& o = out[static_cast<size_t>(t) * H + c];
          if (path == Path::kMirror) {
            // w and y are fp32 values: the double product is exact, the cast its one rounding.
            const float p = static_cast<float>(w * y[c]);
            o = static_cast<float>(static_cast<float>(o) + p);
          } else {
            o += w * y[c];
          }
        }
      }
    }
    return out;
  }
};

}  // namespace fixture
