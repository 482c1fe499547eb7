// matmul.cpp: the CPU reference's matrix products, y[T, N] = x[T, K] . W[N, K]^T, for MXFP4 and
// BF16 weights.
//
// NOTES: every operand is an exact fp32 value (dequantized MX and BF16 values are), so each
// product is exact in fp64 (24 + 24 < 53 significant bits); the sum runs in fp64 and rounds to
// fp32 once. Eight partial sums (k mod 8, see dot) give the CPU independent vector chains; the
// order is fixed, so results never depend on the thread count or the CPU. A weight row is
// dequantized once per call into a per-thread buffer and reused for every token: threads split the
// output rows.
#include <cstring>
#include <string>
#include <vector>

#include "mxmoe/mx_quant.h"
#include "mxmoe/reference.h"
#include "parallel.h"

namespace mxmoe {
namespace {

// 4-wide fp64 lanes (lane l sums k = l mod 4) in two accumulators (k mod 8 < 4 and >= 4), added
// in a fixed order at the end. GCC vector extensions: SSE2 pairs by default, one AVX2 register in
// the avx2 clone; IEEE mul and add either way (no FMA), so both clones give the same bits.
typedef float v4f __attribute__((vector_size(16)));
typedef double v4d __attribute__((vector_size(32)));

__attribute__((target_clones("avx2", "default"))) double dot(const float* a, const float* b,
                                                             int K) {
  v4d acc0 = {0, 0, 0, 0}, acc1 = {0, 0, 0, 0};
  int k = 0;
  for (; k + 8 <= K; k += 8) {
    v4f a0, b0, a1, b1;
    std::memcpy(&a0, a + k, 16);
    std::memcpy(&b0, b + k, 16);
    std::memcpy(&a1, a + k + 4, 16);
    std::memcpy(&b1, b + k + 4, 16);
    acc0 += __builtin_convertvector(a0, v4d) * __builtin_convertvector(b0, v4d);
    acc1 += __builtin_convertvector(a1, v4d) * __builtin_convertvector(b1, v4d);
  }
  double tail = 0;
  for (; k < K; ++k) tail += static_cast<double>(a[k]) * b[k];
  const v4d acc = acc0 + acc1;
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + tail;
}

// row(n, buf) writes weight row n as fp32 into buf[K].
template <class RowFn>
void matmul_rows(int N, int K, const float* x, int T, float* y, RowFn row) {
  if (T <= 0 || N <= 0) return;
  ref::parallel_for(N, int64_t{N} * K * T, [&](int n0, int n1) {
    std::vector<float> w(static_cast<size_t>(K));
    for (int n = n0; n < n1; ++n) {
      row(n, w.data());
      for (int t = 0; t < T; ++t)
        y[static_cast<size_t>(t) * N + n] =
            static_cast<float>(dot(w.data(), x + static_cast<size_t>(t) * K, K));
    }
  });
}

}  // namespace

void mx_matmul_nt(const Mxfp4View& w, const float* x, int T, float* y) {
  if (w.rows < 0 || w.k < 0 || w.k % kMxBlock != 0)
    throw Error("mx_matmul_nt: bad MXFP4 matrix shape [" + std::to_string(w.rows) + ", " +
                std::to_string(w.k) + "]");
  if (w.rows > 0 && (!w.packed || !w.scales)) throw Error("mx_matmul_nt: MXFP4 matrix has no data");
  const size_t pb = static_cast<size_t>(w.k) / 2, sb = static_cast<size_t>(w.k) / kMxBlock;
  matmul_rows(w.rows, w.k, x, T, y, [&](int n, float* buf) {
    try {
      dequantize_mxfp4_row(w.packed + n * pb, w.scales + n * sb, w.k, buf);
    } catch (const Error& e) {
      throw Error("weight row " + std::to_string(n) + ": " + e.what());
    }
  });
}

void bf16_matmul_nt(const Bf16View& w, const float* x, int T, float* y) {
  if (w.rows < 0 || w.cols < 0) throw Error("bf16_matmul_nt: bad BF16 matrix shape");
  if (w.rows > 0 && !w.data) throw Error("bf16_matmul_nt: BF16 matrix has no data");
  matmul_rows(w.rows, w.cols, x, T, y, [&](int n, float* buf) {
    const uint16_t* r = w.data + static_cast<size_t>(n) * w.cols;
    for (int k = 0; k < w.cols; ++k) buf[k] = bf16_to_float(r[k]);
  });
}

}  // namespace mxmoe
