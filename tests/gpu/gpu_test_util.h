// tests/gpu/gpu_test_util.h: shared helpers of the GPU tests: the loud skip, device buffers,
// in-memory synthetic experts at Kimi-K3 sizes, accuracy metrics and the sampled CPU reference.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "mxmoe/moe_layer.h"
#include "mxmoe/reference.h"

namespace mxmoe::test {

// True when a CUDA device is present; *why says what is missing otherwise.
bool gpu_present(std::string* why);
// True when device 0 is compute capability 9.0.
bool gpu_is_sm90(std::string* why);

#define MXMOE_REQUIRE_GPU()                                         \
  do {                                                              \
    std::string why_;                                               \
    if (!::mxmoe::test::gpu_present(&why_))                         \
      GTEST_SKIP() << "no CUDA GPU: " << why_ << " (test NOT run)"; \
  } while (0)
#define MXMOE_REQUIRE_SM90()                                        \
  do {                                                              \
    MXMOE_REQUIRE_GPU();                                            \
    std::string why_;                                               \
    if (!::mxmoe::test::gpu_is_sm90(&why_))                         \
      GTEST_SKIP() << "no SM90 GPU: " << why_ << " (test NOT run)"; \
  } while (0)

// Median CUDA-event time in us of `timed` runs of run(s) on stream s after `warmup` untimed
// ones, each run after a write of flush_bytes at flush (an L2 flush; 0 bytes: none). run returns
// its launches' status. Every CUDA call is checked: a failure is a gtest failure naming the call,
// and the result is then -1.
float median_event_us(const std::function<cudaError_t(cudaStream_t)>& run, cudaStream_t s,
                      void* flush, size_t flush_bytes, int warmup, int timed);
// The same for one CUDA graph captured from enqueue(s) (which returns the first failing status
// of its launches), timed as graph launches.
float median_graph_us(const std::function<cudaError_t(cudaStream_t)>& enqueue, cudaStream_t s,
                      void* flush, size_t flush_bytes, int warmup, int timed);
// The median of `timed` replays of exec enqueued back to back (no host sync between them, as an
// engine's step follows the last), each behind a write of flush_bytes at flush (0: warm), timed
// by events around the graph launch alone; -1 (and a gtest failure naming the call) on a failure.
float median_pipelined_graph_us(cudaGraphExec_t exec, cudaStream_t s, void* flush,
                                size_t flush_bytes, int timed);

#define CUDA_OK(expr)                                                      \
  do {                                                                     \
    cudaError_t e_ = (expr);                                               \
    ASSERT_EQ(e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(e_); \
  } while (0)

// A device allocation freed on destruction.
template <typename T>
class DevBuf {
 public:
  DevBuf() = default;
  // A failed allocation leaves get() null and ok() false (the constructors cannot return it).
  explicit DevBuf(size_t n) { (void)alloc(n); }
  // A copy of h (get() stays null when the allocation or the copy fails).
  explicit DevBuf(const std::vector<T>& h) {
    if (upload(h) != cudaSuccess) (void)alloc(0);
  }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  // Results are [[nodiscard]]: every CUDA call of a test is checked (CUDA_OK).
  [[nodiscard]] cudaError_t alloc(size_t n) {
    cudaFree(p_);
    p_ = nullptr;
    n_ = n;
    if (n == 0) return cudaSuccess;
    const cudaError_t e = cudaMalloc(&p_, n * sizeof(T));
    if (e != cudaSuccess) p_ = nullptr;
    return e;
  }
  T* get() const { return p_; }
  size_t size() const { return n_; }
  bool ok() const { return p_ != nullptr || n_ == 0; }
  // Copies h to the start of the buffer (grown first when h is longer).
  [[nodiscard]] cudaError_t upload(const std::vector<T>& h) {
    if (h.size() > n_) {
      if (const cudaError_t e = alloc(h.size()); e != cudaSuccess) return e;
    }
    if (h.empty()) return cudaSuccess;
    if (!p_) return cudaErrorMemoryAllocation;
    return cudaMemcpy(p_, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice);
  }
  // The whole buffer into *h (resized to size()).
  [[nodiscard]] cudaError_t download(std::vector<T>* h) const { return download(h, n_); }
  // The first n elements into *h (resized to n; n > size() is an error).
  [[nodiscard]] cudaError_t download(std::vector<T>* h, size_t n) const {
    if (n > n_) return cudaErrorInvalidValue;
    h->resize(n);
    return n == 0 ? cudaSuccess : cudaMemcpy(h->data(), p_, n * sizeof(T), cudaMemcpyDeviceToHost);
  }

 private:
  T* p_ = nullptr;
  size_t n_ = 0;
};

// Deterministic fast generator (splitmix64).
struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed * 0x9E3779B97F4A7C15ull + 1) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  double uniform() { return (next() >> 11) * (1.0 / 9007199254740992.0); }
  int below(int n) { return static_cast<int>(next() % static_cast<uint64_t>(n)); }
  float normal();
};

// BF16 quiet NaN: the poison for BF16 padding.
constexpr uint16_t kBf16Nan = 0x7FC0;

// Rows x[T][H] laid out with a row stride of `stride` >= H elements, as a caller's
// non-contiguous activations would be, the gaps filled with `pad` (NaN: a kernel that reads past
// a row's H values poisons its output and shows it).
template <typename V>
std::vector<V> padded_rows(const V* x, int T, int H, int64_t stride, V pad) {
  std::vector<V> img(static_cast<size_t>(T) * stride, pad);
  for (int t = 0; t < T; ++t)
    std::copy(x + static_cast<size_t>(t) * H, x + static_cast<size_t>(t + 1) * H,
              img.begin() + t * stride);
  return img;
}

// A MoE layer held in memory: E_total experts, of which [own_start, own_start + own_count) have
// their own random weights (random E2M1 codes, scale bytes 119 +- 2 per 32-block, like QAT
// weights); the others share one dummy expert that nothing reads (EP: not owned).
struct SyntheticLayer {
  MoeLayer layer;
  int own_start = 0, own_count = 0;
  std::vector<std::vector<uint8_t>> bytes;  // backing storage
  SituParams situ;
};
std::unique_ptr<SyntheticLayer> make_layer(int E_total, int H, int I, int top_k, int own_start,
                                           int own_count, uint64_t seed);

struct Metrics {
  double cosine = 0, nrmse = 0, max_abs = 0;
  size_t nonfinite = 0;
};
// got vs ref over the same elements. nrmse = ||got - ref|| / ||ref||.
Metrics compare(const float* got, const float* ref, size_t n);
std::string describe(const Metrics& m);
// Prints "[case] vs [what]: cosine ... NRMSE ... max abs ..." and records it for the summary.
void report(const std::string& name, const std::string& against, const Metrics& m);

// The CPU reference for selected token rows only (large M is sampled), in parallel over rows.
// x fp32 [T, H]; ids / weights [T, k]; returns [rows.size(), H].
std::vector<float> reference_rows(const MoeLayer& layer, const std::vector<float>& x, int H,
                                  const std::vector<int32_t>& ids,
                                  const std::vector<float>& weights, int k,
                                  const std::vector<int>& rows, ActMode mode,
                                  const SituParams& situ, const ExpertRange& range);

// Rows to check for T tokens: all when T <= max_rows, else a fixed-seed sample that includes the
// first and last row.
std::vector<int> sample_rows(int T, int max_rows, uint64_t seed);

// BF16 bits of N(0, 1) * scale values and their exact fp32 values.
void random_bf16(int n, uint64_t seed, float scale, std::vector<uint16_t>* bits,
                 std::vector<float>* values);

}  // namespace mxmoe::test
