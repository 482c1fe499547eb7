// src/cuda/runtime/prepare.cpp: prepare_weights / destroy_weights (mxmoe/moe.h).
//
// Per owned expert, on the host: check every scale byte (255 = NaN is refused), fuse w1/w3 into
// w13 (weight_layout.h), prepack w13 and w2 into the kernels' order (sm90::prepack_mxfp4), then
// copy to the device. Experts are independent, so host threads split them (real layers hold up
// to 896 x 17.5 MB); each thread reuses its own staging buffers.
// Limitations: synchronous; pageable copies (prepare runs once, at load time).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mxmoe/moe.h"
#include "mxmoe/weight_layout.h"
#include "runtime/arch.h"
#include "runtime/prepared.h"
#include "sm90/grouped_gemm.h"

namespace mxmoe {
namespace {

std::string cuda_msg(const std::string& what, cudaError_t e) {
  return "mxmoe: " + what + ": " + cudaGetErrorString(e);
}

// Returns an empty string, or a message naming the expert and tensor.
std::string check_view(const Mxfp4View& v, int rows, int k, int expert, const char* name) {
  const std::string where = "expert " + std::to_string(expert) + " " + name;
  if (!v.packed || !v.scales) return where + ": missing data";
  if (v.rows != rows || v.k != k)
    return where + ": shape [" + std::to_string(v.rows) + ", " + std::to_string(v.k) +
           "], expected [" + std::to_string(rows) + ", " + std::to_string(k) + "]";
  const size_t n = v.scale_bytes();
  for (size_t i = 0; i < n; ++i)
    if (v.scales[i] == 255)
      return where + ": NaN scale byte 255 at row " + std::to_string(i / (k / 32)) +
             ", block " + std::to_string(i % (k / 32));
  return std::string();
}

void free_all(PreparedWeights* w) {
  if (!w) return;
  int prev = -1;
  cudaGetDevice(&prev);
  cudaSetDevice(w->device);
  cudaFree(w->w13_packed);
  cudaFree(w->w13_scales);
  cudaFree(w->w2_packed);
  cudaFree(w->w2_scales);
  if (prev >= 0) cudaSetDevice(prev);
  delete w;
}

}  // namespace

const char* backend_name(Backend b) { return b == Backend::kW4A16 ? "w4a16" : "w4a8"; }
bool backend_from_name(const std::string& s, Backend* out) {
  if (s == "w4a16") { *out = Backend::kW4A16; return true; }
  if (s == "w4a8") { *out = Backend::kW4A8; return true; }
  return false;
}

void destroy_weights(PreparedWeights* w) { free_all(w); }

PreparedInfo prepared_info(const PreparedWeights* w) {
  PreparedInfo i;
  if (!w) return i;
  i.hidden = w->hidden;
  i.intermediate = w->intermediate;
  i.num_experts_total = w->num_experts_total;
  i.expert_start = w->expert_start;
  i.expert_count = w->expert_count;
  i.device = w->device;
  i.cc_major = w->cc_major;
  i.cc_minor = w->cc_minor;
  i.weight_bytes = w->weight_bytes;
  return i;
}

Status prepare_weights_raw(const Mxfp4View* w1, const Mxfp4View* w3, const Mxfp4View* w2,
                           int num_experts_total, const PrepareOptions& opt,
                           PreparedWeights** out) {
  if (!out) return Status::Fail("prepare_weights: out is null");
  *out = nullptr;
  if (!w1 || !w3 || !w2) return Status::Fail("prepare_weights: null expert view arrays");
  const int count = opt.expert_count;
  if (count < 1) return Status::Fail("prepare_weights: expert_count must be >= 1");
  if (opt.expert_start < 0 || opt.expert_start + count > num_experts_total)
    return Status::Fail("prepare_weights: expert range [" + std::to_string(opt.expert_start) +
                        ", " + std::to_string(opt.expert_start + count) + ") outside 0.." +
                        std::to_string(num_experts_total));
  const int I = w1[0].rows, H = w1[0].k;
  if (H <= 0 || I <= 0 || H % 64 || I % 64)
    return Status::Fail("prepare_weights: latent width " + std::to_string(H) +
                        " and intermediate " + std::to_string(I) +
                        " must be positive multiples of 64");

  int device = opt.device;
  if (device < 0) {
    if (cudaError_t e = cudaGetDevice(&device); e != cudaSuccess)
      return Status::Fail(cuda_msg("no CUDA device", e));
  }
  int major = 0, minor = 0;
  if (Status s = runtime::device_capability(device, &major, &minor); !s.ok()) return s;
  if (Status s = runtime::check_architecture(major, minor); !s.ok()) return s;

  // Validate everything before touching the device.
  for (int i = 0; i < count; ++i) {
    const int e = opt.expert_start + i;
    std::string m = check_view(w1[i], I, H, e, "w1");
    if (m.empty()) m = check_view(w3[i], I, H, e, "w3");
    if (m.empty()) m = check_view(w2[i], H, I, e, "w2");
    if (!m.empty()) return Status::Fail("prepare_weights: " + m);
  }

  int prev = -1;
  cudaGetDevice(&prev);
  if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess)
    return Status::Fail(cuda_msg("cannot use CUDA device " + std::to_string(device), e));
  auto* w = new PreparedWeights;
  w->device = device;
  w->cc_major = major;
  w->cc_minor = minor;
  w->hidden = H;
  w->intermediate = I;
  w->num_experts_total = num_experts_total;
  w->expert_start = opt.expert_start;
  w->expert_count = count;
  w->backend = opt.backend;
  cudaDeviceGetAttribute(&w->num_sms, cudaDevAttrMultiProcessorCount, device);

  const size_t p13 = sm90::prepacked_packed_bytes(2 * I, H);
  const size_t s13 = sm90::prepacked_scale_bytes(2 * I, H);
  const size_t p2 = sm90::prepacked_packed_bytes(H, I);
  const size_t s2 = sm90::prepacked_scale_bytes(H, I);
  w->weight_bytes = (p13 + s13 + p2 + s2) * count;
  cudaError_t err = cudaMalloc(&w->w13_packed, p13 * count);
  if (err == cudaSuccess) err = cudaMalloc(&w->w13_scales, s13 * count);
  if (err == cudaSuccess) err = cudaMalloc(&w->w2_packed, p2 * count);
  if (err == cudaSuccess) err = cudaMalloc(&w->w2_scales, s2 * count);
  if (err != cudaSuccess) {
    const std::string msg = cuda_msg(
        "prepare_weights: cannot allocate " + std::to_string(w->weight_bytes >> 20) +
            " MiB of weights", err);
    free_all(w);
    if (prev >= 0) cudaSetDevice(prev);
    return Status::Fail(msg);
  }

  std::atomic<int> next{0};
  std::mutex mu;
  std::string failure;
  auto worker = [&]() {
    cudaSetDevice(device);  // the current device is per host thread
    std::vector<uint8_t> fp(static_cast<size_t>(2) * I * H / 2), fs(static_cast<size_t>(2) * I * H / 32);
    std::vector<uint8_t> pp(std::max(p13, p2)), ps(std::max(s13, s2));
    for (int i = next++; i < count; i = next++) {
      try {
        fuse_w13(w1[i], w3[i], fp.data(), fs.data());
        sm90::prepack_mxfp4(fp.data(), fs.data(), 2 * I, H, pp.data(), ps.data());
        cudaError_t e = cudaMemcpy(w->w13_packed + p13 * i, pp.data(), p13, cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
          e = cudaMemcpy(w->w13_scales + s13 * i, ps.data(), s13, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) {
          sm90::prepack_mxfp4(w2[i].packed, w2[i].scales, H, I, pp.data(), ps.data());
          e = cudaMemcpy(w->w2_packed + p2 * i, pp.data(), p2, cudaMemcpyHostToDevice);
        }
        if (e == cudaSuccess)
          e = cudaMemcpy(w->w2_scales + s2 * i, ps.data(), s2, cudaMemcpyHostToDevice);
        if (e != cudaSuccess) throw Error(cuda_msg("upload of expert " +
                                                   std::to_string(opt.expert_start + i), e));
      } catch (const std::exception& ex) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = ex.what();
        next = count;
      }
    }
  };
  const int nthreads = static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min(nthreads, count); ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  if (prev >= 0) cudaSetDevice(prev);
  if (!failure.empty()) {
    free_all(w);
    return Status::Fail("prepare_weights: " + failure);
  }
  *out = w;
  return Status::Ok();
}

Status prepare_weights(const MoeLayer& layer, const PrepareOptions& opt, PreparedWeights** out) {
  const int total = static_cast<int>(layer.experts.size());
  if (total != layer.cfg.num_experts)
    return Status::Fail("prepare_weights: layer holds " + std::to_string(total) +
                        " experts, config says " + std::to_string(layer.cfg.num_experts));
  PrepareOptions o = opt;
  if (o.expert_count < 0) o.expert_count = total - o.expert_start;
  if (o.expert_start < 0 || o.expert_count < 1 || o.expert_start + o.expert_count > total)
    return Status::Fail("prepare_weights: expert range start " + std::to_string(opt.expert_start) +
                        " count " + std::to_string(opt.expert_count) + " outside the layer's " +
                        std::to_string(total) + " experts");
  std::vector<Mxfp4View> w1(o.expert_count), w3(o.expert_count), w2(o.expert_count);
  for (int i = 0; i < o.expert_count; ++i) {
    const ExpertView& ev = layer.experts[o.expert_start + i];
    w1[i] = ev.w1;
    w3[i] = ev.w3;
    w2[i] = ev.w2;
  }
  return prepare_weights_raw(w1.data(), w3.data(), w2.data(), total, o, out);
}

}  // namespace mxmoe
