// src/cuda/runtime/prepare.cpp: prepare_weights / destroy_weights (mxmoe/moe.h).
//
// Per owned expert, on the host: check every scale byte (255 = NaN is refused), fuse w1/w3 into
// w13 (weight_layout.h), prepack w13 and w2 into the kernels' order (sm90::prepack_mxfp4), then
// copy to the device. For the w4a8 backend also fold w13 and w2 exactly into E4M3 with per-row
// exponents (sm90/fp8_fold.h; prepared.h says how much memory) for the FP8 prefill GEMMs; the
// rare extra folds of rows outside the window are gathered after all experts and uploaded once.
// Experts are independent, so host threads split them (real layers hold up to 896 x 17.5 MB);
// each thread reuses its own staging buffers.
// Also here: use_w4a8_fp8 / launch_w4a8_fp8_gemms (prepared.h), the FP8 path run_moe calls.
// Limitations: synchronous; pageable copies (prepare runs once, at load time).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "mxmoe/moe.h"
#include "mxmoe/weight_layout.h"
#include "runtime/arch.h"
#include "runtime/prepared.h"
#include "sm90/fp8_fold.h"
#include "sm90/fp8_gemm.h"
#include "sm90/grouped_gemm.h"
#include "smxx/quantize_mxfp8_codes.h"

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
      return where + ": NaN scale byte 255 at row " + std::to_string(i / (k / 32)) + ", block " +
             std::to_string(i % (k / 32));
  return std::string();
}

void free_fp8(Fp8DeviceWeights* f) {
  cudaFree(f->w);
  cudaFree(f->row_exp);
  cudaFree(f->extra_begin);
  cudaFree(f->extra_w);
  cudaFree(f->extra_exp);
  *f = Fp8DeviceWeights{};
}

// MXMOE_W4A8_FP8=on / off overrides PrepareOptions::fp8_prefill_weights (A/B measurements);
// 0 when unset. Read once.
int fp8_path_override() {
  static const int v = [] {
    const char* e = std::getenv("MXMOE_W4A8_FP8");
    if (e && std::strcmp(e, "on") == 0) return 1;
    if (e && std::strcmp(e, "off") == 0) return -1;
    return 0;
  }();
  return v;
}

// The small parts of one expert's fold that are gathered after all experts (the fold-0 codes and
// exponents go to the device directly).
struct FoldMeta {
  std::vector<int32_t> tile_extra, extra_exp;
  std::vector<uint8_t> extra_w;
  int64_t rows_split = 0;
};

// Uploads the extra folds and the per-tile prefix of one folded weight set.
cudaError_t upload_fold_meta(const std::vector<FoldMeta>& meta, Fp8DeviceWeights* f) {
  std::vector<int32_t> begin{0};
  std::vector<uint8_t> ew;
  std::vector<int32_t> ee;
  for (const FoldMeta& m : meta) {
    for (int32_t t : m.tile_extra) begin.push_back(begin.back() + t);
    ew.insert(ew.end(), m.extra_w.begin(), m.extra_w.end());
    ee.insert(ee.end(), m.extra_exp.begin(), m.extra_exp.end());
  }
  cudaError_t e = cudaMalloc(&f->extra_begin, begin.size() * 4);
  if (e == cudaSuccess)
    e = cudaMemcpy(f->extra_begin, begin.data(), begin.size() * 4, cudaMemcpyHostToDevice);
  if (e == cudaSuccess && !ew.empty()) {
    e = cudaMalloc(&f->extra_w, ew.size());
    if (e == cudaSuccess) e = cudaMemcpy(f->extra_w, ew.data(), ew.size(), cudaMemcpyHostToDevice);
    if (e == cudaSuccess) e = cudaMalloc(&f->extra_exp, ee.size() * 4);
    if (e == cudaSuccess)
      e = cudaMemcpy(f->extra_exp, ee.data(), ee.size() * 4, cudaMemcpyHostToDevice);
  }
  return e;
}

// Best effort (a destructor path: nothing to report to): frees on w's device, then restores the
// caller's current device if it could be read.
void free_all(PreparedWeights* w) {
  if (!w) return;
  int prev = -1;
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
  cudaSetDevice(w->device);
  cudaFree(w->w13_packed);
  cudaFree(w->w13_scales);
  cudaFree(w->w2_packed);
  cudaFree(w->w2_scales);
  free_fp8(&w->fp8_w13);
  free_fp8(&w->fp8_w2);
  if (prev >= 0) cudaSetDevice(prev);
  delete w;
}

}  // namespace

const char* backend_name(Backend b) { return b == Backend::kW4A16 ? "w4a16" : "w4a8"; }
bool backend_from_name(const std::string& s, Backend* out) {
  if (s == "w4a16") {
    *out = Backend::kW4A16;
    return true;
  }
  if (s == "w4a8") {
    *out = Backend::kW4A8;
    return true;
  }
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
  i.fp8_weight_bytes = w->fp8_bytes;
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

  int prev = -1;  // the caller's current device, restored before returning (when it was read)
  if (cudaGetDevice(&prev) != cudaSuccess) prev = -1;
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
  if (cudaError_t e = cudaDeviceGetAttribute(&w->num_sms, cudaDevAttrMultiProcessorCount, device);
      e != cudaSuccess || w->num_sms < 1) {
    delete w;
    if (prev >= 0) cudaSetDevice(prev);
    return Status::Fail(
        cuda_msg("cannot read the SM count of CUDA device " + std::to_string(device),
                 e != cudaSuccess ? e : cudaErrorInvalidDevice));
  }

  const size_t p13 = sm90::prepacked_packed_bytes(2 * I, H);
  const size_t s13 = sm90::prepacked_scale_bytes(2 * I, H);
  const size_t p2 = sm90::prepacked_packed_bytes(H, I);
  const size_t s2 = sm90::prepacked_scale_bytes(H, I);
  w->weight_bytes = (p13 + s13 + p2 + s2) * count;
  const int fp8_override = fp8_path_override();
  const bool want_fold = fp8_override != 0 ? fp8_override > 0 : opt.fp8_prefill_weights;
  const bool fold = opt.backend == Backend::kW4A8 && want_fold && H % sm90::kFoldTileK == 0 &&
                    I % sm90::kFoldTileK == 0;
  const size_t f13 = static_cast<size_t>(2) * I * H, f2 = static_cast<size_t>(H) * I;
  cudaError_t err = cudaMalloc(&w->w13_packed, p13 * count);
  if (err == cudaSuccess) err = cudaMalloc(&w->w13_scales, s13 * count);
  if (err == cudaSuccess) err = cudaMalloc(&w->w2_packed, p2 * count);
  if (err == cudaSuccess) err = cudaMalloc(&w->w2_scales, s2 * count);
  if (fold) {
    w->fp8_bytes = (f13 + f2) * count + static_cast<size_t>(2 * I + H) * count * 4;
    if (err == cudaSuccess) err = cudaMalloc(&w->fp8_w13.w, f13 * count);
    if (err == cudaSuccess)
      err = cudaMalloc(&w->fp8_w13.row_exp, static_cast<size_t>(2) * I * count * 4);
    if (err == cudaSuccess) err = cudaMalloc(&w->fp8_w2.w, f2 * count);
    if (err == cudaSuccess)
      err = cudaMalloc(&w->fp8_w2.row_exp, static_cast<size_t>(H) * count * 4);
  }
  if (err != cudaSuccess) {
    const std::string msg = cuda_msg(
        "prepare_weights: cannot allocate " +
            std::to_string((w->weight_bytes + w->fp8_bytes) >> 20) + " MiB of weights" +
            (fold ? " (incl. the FP8 W4A8 copy; PrepareOptions::fp8_prefill_weights = false "
                    "skips it)"
                  : ""),
        err);
    free_all(w);
    if (prev >= 0) cudaSetDevice(prev);
    return Status::Fail(msg);
  }

  std::atomic<int> next{0};
  std::atomic<bool> big13{false}, big2{false};  // some scale above 2^1 (sm90::mxfp4_scales_small)
  std::mutex mu;
  std::string failure;
  std::vector<FoldMeta> meta13(fold ? count : 0), meta2(fold ? count : 0);
  auto worker = [&]() {
    // The current device is per host thread.
    if (cudaError_t e = cudaSetDevice(device); e != cudaSuccess) {
      std::lock_guard<std::mutex> lock(mu);
      if (failure.empty())
        failure = cuda_msg("cannot use CUDA device " + std::to_string(device), e);
      next = count;
      return;
    }
    std::vector<uint8_t> fp(static_cast<size_t>(2) * I * H / 2),
        fs(static_cast<size_t>(2) * I * H / 32);
    std::vector<uint8_t> pp(std::max(p13, p2)), ps(std::max(s13, s2));
    sm90::Fp8FoldedMatrix folded;
    // Folds one matrix and uploads its fold-0 codes and exponents (expert i of the set).
    auto fold_one = [&](const uint8_t* packed, const uint8_t* scales, int rows, int k,
                        Fp8DeviceWeights* dst, FoldMeta* meta, int i) {
      sm90::fold_mxfp4_to_e4m3(packed, scales, rows, k, &folded);
      const size_t n = static_cast<size_t>(rows) * k;
      cudaError_t e = cudaMemcpy(dst->w + n * i, folded.w.data(), n, cudaMemcpyHostToDevice);
      if (e == cudaSuccess)
        e = cudaMemcpy(dst->row_exp + static_cast<size_t>(rows) * i, folded.row_exp.data(),
                       static_cast<size_t>(rows) * 4, cudaMemcpyHostToDevice);
      if (e != cudaSuccess)
        throw Error(cuda_msg(
            "upload of the FP8 fold of expert " + std::to_string(opt.expert_start + i), e));
      meta->tile_extra = folded.tile_extra;
      meta->extra_w = folded.extra_w;
      meta->extra_exp = folded.extra_exp;
      meta->rows_split = folded.rows_split;
    };
    for (int i = next++; i < count; i = next++) {
      try {
        fuse_w13(w1[i], w3[i], fp.data(), fs.data());
        if (fold) {
          fold_one(fp.data(), fs.data(), 2 * I, H, &w->fp8_w13, &meta13[i], i);
          fold_one(w2[i].packed, w2[i].scales, H, I, &w->fp8_w2, &meta2[i], i);
        }
        sm90::prepack_mxfp4(fp.data(), fs.data(), 2 * I, H, pp.data(), ps.data());
        if (!sm90::mxfp4_scales_small(ps.data(), s13)) big13 = true;
        cudaError_t e = cudaMemcpy(w->w13_packed + p13 * i, pp.data(), p13, cudaMemcpyHostToDevice);
        if (e == cudaSuccess)
          e = cudaMemcpy(w->w13_scales + s13 * i, ps.data(), s13, cudaMemcpyHostToDevice);
        if (e == cudaSuccess) {
          sm90::prepack_mxfp4(w2[i].packed, w2[i].scales, H, I, pp.data(), ps.data());
          if (!sm90::mxfp4_scales_small(ps.data(), s2)) big2 = true;
          e = cudaMemcpy(w->w2_packed + p2 * i, pp.data(), p2, cudaMemcpyHostToDevice);
        }
        if (e == cudaSuccess)
          e = cudaMemcpy(w->w2_scales + s2 * i, ps.data(), s2, cudaMemcpyHostToDevice);
        if (e != cudaSuccess)
          throw Error(cuda_msg("upload of expert " + std::to_string(opt.expert_start + i), e));
      } catch (const std::exception& ex) {
        std::lock_guard<std::mutex> lock(mu);
        if (failure.empty()) failure = ex.what();
        next = count;
      }
    }
  };
  const int nthreads =
      static_cast<int>(std::max(1u, std::min(16u, std::thread::hardware_concurrency())));
  std::vector<std::thread> pool;
  for (int t = 0; t < std::min(nthreads, count); ++t) pool.emplace_back(worker);
  for (auto& t : pool) t.join();
  w->w13_small_scales = !big13;
  w->w2_small_scales = !big2;
  if (failure.empty() && fold) {
    cudaError_t e = upload_fold_meta(meta13, &w->fp8_w13);
    if (e == cudaSuccess) e = upload_fold_meta(meta2, &w->fp8_w2);
    if (e != cudaSuccess) failure = cuda_msg("upload of the FP8 extra folds", e);
    for (const FoldMeta& m : meta13) w->fp8_rows_split += m.rows_split;
    for (const FoldMeta& m : meta2) w->fp8_rows_split += m.rows_split;
    w->has_fp8 = failure.empty();
  }
  if (prev >= 0) cudaSetDevice(prev);
  if (!failure.empty()) {
    free_all(w);
    return Status::Fail("prepare_weights: " + failure);
  }
  *out = w;
  return Status::Ok();
}

bool use_w4a8_fp8(const PreparedWeights* w, Backend backend, int num_tokens, int top_k) {
  if (!w || !w->has_fp8 || backend != Backend::kW4A8) return false;
  // Expected rows per expert: T * k over ALL experts (each rank sees its share of the picks).
  const int64_t pairs = static_cast<int64_t>(num_tokens) * top_k;
  return pairs >= static_cast<int64_t>(kFp8MinRowsPerExpert) * w->num_experts_total;
}

cudaError_t launch_w4a8_fp8_gemms(const PreparedWeights* w, const void* hidden, bool hidden_f32,
                                  int64_t hidden_stride, int num_tokens, int top_k,
                                  const int32_t* expert_offsets, const int32_t* x_row,
                                  const float* row_weight, const float* beta,
                                  const float* linear_beta, void* xq_area, void* h_area, float* y,
                                  const int32_t* out_token, float* out, int64_t out_stride,
                                  cudaStream_t stream, const char** failed) {
  const int T = num_tokens, H = w->hidden, I = w->intermediate;
  const size_t P = static_cast<size_t>(T) * top_k;
  uint8_t* x_codes = static_cast<uint8_t*>(xq_area);
  uint8_t* x_scales = x_codes + static_cast<size_t>(T) * H;
  uint8_t* h_codes = static_cast<uint8_t*>(h_area);
  uint8_t* h_scales = h_codes + P * I;
  *failed = "quantize_mxfp8_codes";
  cudaError_t e = smxx::launch_quantize_mxfp8_codes(hidden, hidden_f32, hidden_stride, T, H,
                                                    x_codes, x_scales, stream);
  if (e != cudaSuccess) return e;
  auto view = [](const Fp8DeviceWeights& f) {
    sm90::Fp8WeightsView v;
    v.w = f.w;
    v.row_exp = f.row_exp;
    v.extra_begin = f.extra_begin;
    v.extra_w = f.extra_w;
    v.extra_exp = f.extra_exp;
    return v;
  };
  sm90::GroupedProblem gp;
  gp.num_experts = w->expert_count;
  gp.expert_offsets = expert_offsets;
  gp.max_rows = static_cast<int>(P);
  sm90::Fp8Gemm1Params g1;
  g1.w = view(w->fp8_w13);
  g1.I = I;
  g1.K = H;
  g1.x_codes = x_codes;
  g1.x_scales = x_scales;
  g1.x_row = x_row;
  g1.beta = beta;
  g1.linear_beta = linear_beta;
  g1.h_codes = h_codes;
  g1.h_scales = h_scales;
  g1.g = gp;
  *failed = "sm90 fp8 gemm1";
  e = sm90::launch_fp8_gemm1(g1, w->num_sms, stream);
  if (e != cudaSuccess) return e;
  sm90::Fp8Gemm2Params g2;
  g2.w = view(w->fp8_w2);
  g2.H = H;
  g2.I = I;
  g2.h_codes = h_codes;
  g2.h_scales = h_scales;
  g2.row_weight = row_weight;
  g2.y = y;
  g2.out_token = out_token;
  g2.out = out;
  g2.out_stride = out_stride;
  g2.g = gp;
  *failed = "sm90 fp8 gemm2";
  return sm90::launch_fp8_gemm2(g2, w->num_sms, stream);
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
