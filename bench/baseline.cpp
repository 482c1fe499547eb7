// bench/baseline.cpp: cuBLAS baselines on pre-dequantized weights, per expert and grouped (see
// baseline.h).
#include "baseline.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "mxmoe/common.h"
#include "mxmoe/formats.h"

namespace mxmoe::bench {

double baseline_bf16_weight_bytes(const Layout& l) {
  return 3.0 * kLatent * l.intermediate * 2.0 * l.experts_local;
}

Baselines::Baselines(const Layout& l, const WeightPool& pool, Blas& blas, Fp8Gemm* fp8,
                     int64_t max_pairs, cudaStream_t s)
    : l_(l), blas_(blas), fp8_(fp8), max_pairs_(max_pairs) {
  const size_t E = l.experts_local, I = l.intermediate, K = kLatent, P = max_pairs;
  w13b_ = DevBuf(E * 2 * I * K * 2, "baseline BF16 w13");
  w2b_ = DevBuf(E * K * I * 2, "baseline BF16 w2");
  w13f_ = DevBuf(E * 2 * I * K, "baseline FP8 w13");
  s13_ = DevBuf(E * 2 * I * 4, "baseline FP8 w13 row scales");
  w2f_ = DevBuf(E * K * I, "baseline FP8 w2");
  s2_ = DevBuf(E * K * 4, "baseline FP8 w2 row scales");
  xb_ = DevBuf(P * K * 2, "baseline BF16 X");
  ab_ = DevBuf(P * I * 2, "baseline BF16 A");
  hb_ = DevBuf(P * 2 * I * 2, "baseline H");
  yb_ = DevBuf(P * K * 2, "baseline Y");
  xf_ = DevBuf(P * K, "baseline FP8 X");
  af_ = DevBuf(P * I, "baseline FP8 A");
  ones_ = DevBuf(P * 4, "baseline FP8 activation scales");
  ptrs_ = DevBuf(2 * 3 * E * sizeof(void*), "baseline grouped GEMM pointers");
  ptrs8_ = DevBuf(2 * 3 * E * sizeof(void*), "baseline grouped FP8 GEMM pointers");
  row_expert_ = DevBuf(P * 4, "baseline grouped FP8 row experts");
  hg_ = DevBuf(P * 2 * I * 2, "baseline grouped H");
  yg_ = DevBuf(P * K * 2, "baseline grouped Y");

  // The raw MXFP4 pool on the device, then one dequantization per local expert.
  const size_t pk = I * K / 2, sc = I * K / 32;  // bytes of one projection's packed / scales
  DevBuf raw(kWeightPool * 3 * (pk + sc), "baseline MXFP4 staging");
  uint8_t* r = raw.as<uint8_t>();
  auto at = [&](int p, int which, bool scales) {  // which: 0 w1, 1 w3, 2 w2
    return r + (static_cast<size_t>(p) * 3 + which) * (pk + sc) + (scales ? pk : 0);
  };
  for (int p = 0; p < kWeightPool; ++p) {
    const Mxfp4View* v[3] = {&pool.w1(p), &pool.w3(p), &pool.w2(p)};
    for (int w = 0; w < 3; ++w) {
      BENCH_CUDA(cudaMemcpy(at(p, w, false), v[w]->packed, pk, cudaMemcpyHostToDevice));
      BENCH_CUDA(cudaMemcpy(at(p, w, true), v[w]->scales, sc, cudaMemcpyHostToDevice));
    }
  }
  for (size_t e = 0; e < E; ++e) {
    const int p = static_cast<int>(e % kWeightPool);
    uint16_t* w13b = w13b_.as<uint16_t>() + e * 2 * I * K;
    uint8_t* w13f = w13f_.as<uint8_t>() + e * 2 * I * K;
    float* s13 = s13_.as<float>() + e * 2 * I;
    for (int w = 0; w < 2; ++w) {  // gate rows [0, I), up rows [I, 2I)
      dequant_mxfp4_bf16(at(p, w, false), at(p, w, true), I, K, w13b + w * I * K, s);
      dequant_mxfp4_e4m3(at(p, w, false), at(p, w, true), I, K, w13f + w * I * K, s13 + w * I, s);
    }
    dequant_mxfp4_bf16(at(p, 2, false), at(p, 2, true), K, I, w2b_.as<uint16_t>() + e * K * I, s);
    dequant_mxfp4_e4m3(at(p, 2, false), at(p, 2, true), K, I, w2f_.as<uint8_t>() + e * K * I,
                       s2_.as<float>() + e * K, s);
    BENCH_CUDA(cudaGetLastError());
  }
  fill_bf16(xb_.as<uint16_t>(), P * K, 21, 2.0f, s);
  fill_bf16(ab_.as<uint16_t>(), P * I, 22, 2.0f, s);
  fill_e4m3(xf_.as<uint8_t>(), P * K, 23, 2.0f, s);
  fill_e4m3(af_.as<uint8_t>(), P * I, 24, 2.0f, s);
  fill_f32(ones_.as<float>(), P, 1.0f, s);
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(s));  // `raw` is freed on return
}

bool Baselines::plan_fp8(const std::vector<int>& counts) {
  if (!fp8_) return false;
  const int I = l_.intermediate, K = kLatent;
  bool ok = true;
  for (int c : counts)
    if (c > 0) ok = fp8_->plan(2 * I, c, K) && fp8_->plan(K, c, I) && ok;
  return ok;
}

void Baselines::enqueue_bf16(const std::vector<int>& counts, cudaStream_t s) {
  const size_t I = l_.intermediate, K = kLatent;
  size_t o = 0;
  for (size_t e = 0; e < counts.size(); ++e) {
    const int c = counts[e];
    if (c == 0) continue;
    if (o + c > static_cast<size_t>(max_pairs_))
      throw Error("bench: baseline rows exceed max_pairs");
    blas_.gemm_bf16(2 * I, c, K, w13b_.as<uint16_t>() + e * 2 * I * K, xb_.as<uint16_t>() + o * K,
                    hb_.as<uint16_t>() + o * 2 * I, s);
    blas_.gemm_bf16(K, c, I, w2b_.as<uint16_t>() + e * K * I, ab_.as<uint16_t>() + o * I,
                    yb_.as<uint16_t>() + o * K, s);
    o += c;
  }
}

void Baselines::enqueue_fp8(const std::vector<int>& counts, cudaStream_t s) {
  const size_t I = l_.intermediate, K = kLatent;
  size_t o = 0;
  if (!fp8_) throw Error("bench: FP8 baseline without FP8 GEMMs");
  const float* one = ones_.as<float>();  // per-tensor mode reads only the first entry
  for (size_t e = 0; e < counts.size(); ++e) {
    const int c = counts[e];
    if (c == 0) continue;
    if (o + c > static_cast<size_t>(max_pairs_))
      throw Error("bench: baseline rows exceed max_pairs");
    fp8_->run(2 * I, c, K, w13f_.as<uint8_t>() + e * 2 * I * K, s13_.as<float>() + e * 2 * I,
              xf_.as<uint8_t>() + o * K, one, hb_.as<uint16_t>() + o * 2 * I, s);
    fp8_->run(K, c, I, w2f_.as<uint8_t>() + e * K * I, s2_.as<float>() + e * K,
              af_.as<uint8_t>() + o * I, one, yb_.as<uint16_t>() + o * K, s);
    o += c;
  }
}

namespace {

// The first element where the grouped output b strays from the per-expert output a (both BF16,
// n values) by more than what a different fp32 summation order and one BF16 rounding each can
// explain; "" when none does. All-zero or non-finite reference outputs fail too.
std::string compare_bf16(const char* what, const std::vector<uint16_t>& a,
                         const std::vector<uint16_t>& b) {
  const auto f = bf16_to_float;
  double ss = 0;
  for (uint16_t v : a) ss += static_cast<double>(f(v)) * f(v);
  const double rms = std::sqrt(ss / std::max<size_t>(a.size(), 1));
  char buf[200];
  if (!(rms > 0) || !std::isfinite(rms)) {
    std::snprintf(buf, sizeof buf, "%s: per-expert reference rms %g", what, rms);
    return buf;
  }
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = f(a[i]), y = f(b[i]);
    const double tol = std::ldexp(std::max(std::fabs(x), std::fabs(y)), -7) + 1e-3 * rms;
    if (!(std::fabs(x - y) <= tol)) {
      std::snprintf(buf, sizeof buf, "%s: element %zu grouped %.6g vs per-expert %.6g (rms %.3g)",
                    what, i, y, x, rms);
      return buf;
    }
  }
  return "";
}

std::vector<uint16_t> download_bf16(const void* p, size_t n) {
  std::vector<uint16_t> h(n);
  BENCH_CUDA(cudaMemcpy(h.data(), p, n * 2, cudaMemcpyDeviceToHost));
  return h;
}

}  // namespace

Baselines::GemmShape Baselines::gemm_shape(int gemm) const {
  const int I = l_.intermediate, K = kLatent;
  return gemm == 0 ? GemmShape{2 * I, K} : GemmShape{K, I};
}

CountGroups Baselines::groups_of(const std::vector<int>& counts) const {
  CountGroups g = group_by_count(counts);
  if (g.rows > static_cast<size_t>(max_pairs_))
    throw Error("bench: baseline rows exceed max_pairs");
  return g;
}

void Baselines::upload(const DevBuf& dst, const void* src, size_t bytes) {
  if (bytes > dst.bytes()) throw Error("bench: baseline upload exceeds its buffer");
  BENCH_CUDA(cudaMemcpy(dst.get(), src, bytes, cudaMemcpyHostToDevice));
}

std::vector<const void*> Baselines::pointers(const CountGroups& g, bool fp8) const {
  const size_t P = g.problems;
  const size_t elem = fp8 ? 1 : 2;  // bytes of a weight / activation element
  std::vector<const void*> host(2 * 3 * P);
  for (int gemm = 0; gemm < 2; ++gemm) {
    const GemmShape sh = gemm_shape(gemm);
    const size_t m = sh.m, k = sh.k, w_elems = m * k;  // w_elems: one expert's weights
    const char* w = static_cast<const char*>(gemm == 0 ? (fp8 ? w13f_ : w13b_).get()
                                                       : (fp8 ? w2f_ : w2b_).get());
    const char* x =
        static_cast<const char*>(gemm == 0 ? (fp8 ? xf_ : xb_).get() : (fp8 ? af_ : ab_).get());
    char* y = static_cast<char*>((gemm == 0 ? hg_ : yg_).get());  // BF16 outputs
    const void** out = host.data() + gemm * 3 * P;
    size_t i = 0;
    for (const CountGroups::Group& grp : g.groups)
      for (const size_t e : grp.experts) {
        out[i] = w + e * w_elems * elem;
        out[P + i] = x + g.first_row[e] * k * elem;
        out[2 * P + i] = y + g.first_row[e] * m * 2;
        ++i;
      }
  }
  return host;
}

std::string Baselines::plan_bf16_grouped(const std::vector<int>& counts, cudaStream_t s) {
  const CountGroups g = groups_of(counts);
  if (g.problems == 0) return "unsupported: no local pairs";
  const size_t P = g.problems;
  const std::vector<const void*> host = pointers(g, /*fp8=*/false);
  for (int gemm = 0; gemm < 2; ++gemm) {
    GroupedBf16& gr = grouped_[gemm];
    gr = GroupedBf16{};
    const GemmShape sh = gemm_shape(gemm);
    for (const CountGroups::Group& grp : g.groups)
      gr.add_group(sh.m, grp.count, sh.k, static_cast<int>(grp.experts.size()));
    void** dev = ptrs_.as<void*>() + gemm * 3 * P;
    gr.w = dev;
    gr.x = dev + P;
    gr.y = dev + 2 * P;
  }
  upload(ptrs_, host.data(), host.size() * sizeof(void*));
  // Both forms once, eagerly; the grouped one's outputs against the per-expert ones.
  enqueue_bf16(counts, s);
  for (const GroupedBf16& gr : grouped_) {
    const cublasStatus_t st = blas_.gemm_bf16_grouped(gr, s);
    if (st == CUBLAS_STATUS_NOT_SUPPORTED || st == CUBLAS_STATUS_ARCH_MISMATCH)
      return std::string("unsupported: cublasGemmGroupedBatchedEx: ") + cublasGetStatusString(st);
    if (st != CUBLAS_STATUS_SUCCESS)
      return std::string("FAIL: cublasGemmGroupedBatchedEx: ") + cublasGetStatusString(st);
  }
  BENCH_CUDA(cudaGetLastError());
  BENCH_CUDA(cudaStreamSynchronize(s));
  const std::string bad = compare_outputs(g.rows);
  return bad.empty() ? "" : "FAIL: grouped != per-expert: " + bad;
}

void Baselines::enqueue_bf16_grouped(cudaStream_t s) {
  for (const GroupedBf16& g : grouped_) {
    if (g.groups() == 0) throw Error("bench: grouped BF16 baseline enqueued without a plan");
    BENCH_CUBLAS(blas_.gemm_bf16_grouped(g, s));
  }
}

std::string Baselines::plan_fp8_grouped(const std::vector<int>& counts, cudaStream_t s) {
  if (!fp8_) return "unsupported: no FP8 GEMMs";
  const CountGroups g = groups_of(counts);
  if (g.problems == 0) return "unsupported: no local pairs";
  const size_t P = g.problems;
  for (int gemm = 0; gemm < 2; ++gemm) {
    std::vector<Fp8Batch>& b = batches8_[gemm];
    b.clear();
    const auto [m, k] = gemm_shape(gemm);
    size_t first = 0;
    for (const CountGroups::Group& grp : g.groups) {
      const int batch = static_cast<int>(grp.experts.size());
      if (!fp8_->plan_batched(m, grp.count, k, batch)) {
        batches8_[0].clear();
        batches8_[1].clear();
        return "unsupported: cublasLt has no pointer-array FP8 algorithm for m=" +
               std::to_string(m) + " n=" + std::to_string(grp.count) + " k=" + std::to_string(k) +
               " batch=" + std::to_string(batch);
      }
      b.push_back({m, grp.count, k, batch, first});
      first += batch;
    }
  }
  problems8_ = P;
  rows8_ = g.rows;
  const std::vector<const void*> host = pointers(g, /*fp8=*/true);
  upload(ptrs8_, host.data(), host.size() * sizeof(void*));
  upload(row_expert_, g.row_expert.data(), g.rows * 4);
  // Both forms once, eagerly. A cuBLAS error here fails the line, not the run.
  try {
    enqueue_fp8(counts, s);
    enqueue_fp8_grouped(s);
    BENCH_CUDA(cudaStreamSynchronize(s));
  } catch (const Error& e) {
    return std::string("FAIL: ") + e.what();
  }
  const std::string bad = compare_outputs(g.rows);
  return bad.empty() ? "" : "FAIL: grouped FP8 != per-expert FP8: " + bad;
}

void Baselines::enqueue_fp8_grouped(cudaStream_t s) {
  const size_t P = problems8_;
  for (int gemm = 0; gemm < 2; ++gemm) {
    if (batches8_[gemm].empty() || !fp8_)
      throw Error("bench: grouped FP8 baseline enqueued without a plan");
    void** base = ptrs8_.as<void*>() + gemm * 3 * P;
    for (const Fp8Batch& b : batches8_[gemm])
      fp8_->run_batched(b.m, b.n, b.k, b.batch, base + b.first, base + P + b.first,
                        base + 2 * P + b.first, s);
    // The scales the batched matmuls could not take: per row of W (or per tensor, as the
    // per-expert form's configuration) x per token.
    scale_bf16_rows((gemm == 0 ? hg_ : yg_).as<uint16_t>(), rows8_, gemm_shape(gemm).m,
                    row_expert_.as<int32_t>(), (gemm == 0 ? s13_ : s2_).as<float>(),
                    fp8_->config().outer_vec, ones_.as<float>(), s);
    BENCH_CUDA(cudaGetLastError());
  }
}

std::string Baselines::compare_outputs(size_t rows) const {
  const size_t I = l_.intermediate, K = kLatent;
  std::string bad = compare_bf16("GEMM1", download_bf16(hb_.get(), rows * 2 * I),
                                 download_bf16(hg_.get(), rows * 2 * I));
  if (bad.empty())
    bad = compare_bf16("GEMM2", download_bf16(yb_.get(), rows * K),
                       download_bf16(yg_.get(), rows * K));
  return bad;
}

double Baselines::bytes_bf16(const std::vector<int>& counts) const {
  const double I = l_.intermediate, K = kLatent;
  double b = 0;
  for (int c : counts)
    if (c > 0) b += 3 * K * I * 2 + c * (K * 2 + 2 * I * 2 + I * 2 + K * 2);
  return b;
}

double Baselines::bytes_fp8(const std::vector<int>& counts) const {
  const double I = l_.intermediate, K = kLatent;
  double b = 0;
  for (int c : counts)
    if (c > 0) b += 3 * K * I + (2 * I + K) * 4 + c * (K + 2 * I * 2 + I + K * 2);
  return b;
}

}  // namespace mxmoe::bench
