// bench/device_util.h: checked CUDA / cuBLAS calls, an owning device buffer, and the small device
// kernels the benchmark needs (fill.cu): random fills and the ahead-of-time MXFP4 dequantization
// for the cuBLAS baselines.
//
// Every failing call throws mxmoe::Error with one line naming the call, the library's message and
// the source line, so a failed device run says what broke without a debugger.
#pragma once

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace mxmoe::bench {

[[noreturn]] void throw_cuda(const char* call, cudaError_t e, const char* file, int line);
[[noreturn]] void throw_cublas(const char* call, cublasStatus_t s, const char* file, int line);

#define BENCH_CUDA(call)                                                                          \
  do {                                                                                            \
    const cudaError_t bench_e_ = (call);                                                          \
    if (bench_e_ != cudaSuccess) ::mxmoe::bench::throw_cuda(#call, bench_e_, __FILE__, __LINE__); \
  } while (0)
#define BENCH_CUBLAS(call)                                               \
  do {                                                                   \
    const cublasStatus_t bench_s_ = (call);                              \
    if (bench_s_ != CUBLAS_STATUS_SUCCESS)                               \
      ::mxmoe::bench::throw_cublas(#call, bench_s_, __FILE__, __LINE__); \
  } while (0)

// Owning device allocation (move-only). `what` names it in the out-of-memory message.
class DevBuf {
 public:
  DevBuf() = default;
  DevBuf(size_t bytes, const char* what);
  ~DevBuf();
  DevBuf(DevBuf&& o) noexcept : p_(o.p_), n_(o.n_) {
    o.p_ = nullptr;
    o.n_ = 0;
  }
  DevBuf& operator=(DevBuf&& o) noexcept;
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p_);
  }
  void* get() const { return p_; }
  size_t bytes() const { return n_; }

 private:
  void* p_ = nullptr;
  size_t n_ = 0;
};

// ---- fill.cu ---- (launch errors are checked by the callers with cudaGetLastError)
// bf16 / e4m3 values: a hash of (seed, index) mapped to a roughly uniform value in
// [-amplitude, amplitude); e4m3 codes stay finite.
void fill_bf16(uint16_t* p, size_t n, uint64_t seed, float amplitude, cudaStream_t s);
void fill_e4m3(uint8_t* p, size_t n, uint64_t seed, float amplitude, cudaStream_t s);
void fill_f32(float* p, size_t n, float value, cudaStream_t s);
// The bandwidth ceiling's copy: 16-byte loads and stores, a few in flight per thread, over a grid
// that fills every SM (bytes % 16 == 0). Copy engines (cudaMemcpyAsync device to device, which
// a graph runs as a memcpy node) reach only ~2.7 TB/s on an H200; SM loads reach ~4.2.
void copy_kernel(void* dst, const void* src, size_t bytes, int num_sms, cudaStream_t s);

// Dequantizes one MXFP4 matrix [rows, k] (packed [rows, k/2], scales [rows, k/32]) ahead of time:
//  - to BF16 [rows, k] (exact: e2m1 * 2^(s-127) fits BF16 for every scale the bench generates);
//  - to E4M3 [rows, k] plus a per-row fp32 factor 2^(max_s - 127): element = e2m1 * 2^(s - max_s),
//    exact while the row's scale spread is <= 8 binades (E4M3 subnormals reach 2^-9 and the
//    smallest nonzero e2m1 is 0.5), which the bench's 119 +- 3 scales satisfy.
void dequant_mxfp4_bf16(const uint8_t* packed, const uint8_t* scales, int rows, int k,
                        uint16_t* out, cudaStream_t s);
void dequant_mxfp4_e4m3(const uint8_t* packed, const uint8_t* scales, int rows, int k, uint8_t* out,
                        float* row_scale, cudaStream_t s);

// The batched FP8 baseline's scales, applied to its unscaled BF16 output y [rows, cols] in place:
// y[r][c] *= w_scale[row_expert[r] * cols + (per_col ? c : 0)] * x_scale[r]. With the bench's
// power-of-two weight factors and unit activation scales this is exact (no second rounding).
void scale_bf16_rows(uint16_t* y, size_t rows, int cols, const int32_t* row_expert,
                     const float* w_scale, bool per_col, const float* x_scale, cudaStream_t s);

}  // namespace mxmoe::bench
