// tests/gpu/gpu_test_util.cpp: see gpu_test_util.h.
#include "gpu_test_util.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <set>
#include <thread>

#include "mxmoe/formats.h"

namespace mxmoe::test {

bool gpu_present(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("cudaGetDeviceCount: ") + cudaGetErrorString(e);
    return false;
  }
  if (n == 0) {
    *why = "no device visible";
    return false;
  }
  return true;
}

bool gpu_is_sm90(std::string* why) {
  int ma = 0, mi = 0;
  cudaError_t e = cudaDeviceGetAttribute(&ma, cudaDevAttrComputeCapabilityMajor, 0);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&mi, cudaDevAttrComputeCapabilityMinor, 0);
  if (e != cudaSuccess) {
    *why = std::string("cudaDeviceGetAttribute: ") + cudaGetErrorString(e);
    return false;
  }
  if (ma == 9 && mi == 0) return true;
  *why = "device 0 is sm_" + std::to_string(ma) + std::to_string(mi);
  return false;
}

namespace {
bool cuda_step(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  ADD_FAILURE() << what << ": " << cudaGetErrorString(e);
  return false;
}
}  // namespace

float median_event_us(const std::function<cudaError_t(cudaStream_t)>& run, cudaStream_t s,
                      void* flush, size_t flush_bytes, int warmup, int timed) {
  cudaEvent_t ev[2] = {nullptr, nullptr};
  struct Destroy {
    cudaEvent_t* ev;
    ~Destroy() {
      for (int i = 0; i < 2; ++i)
        if (ev[i]) cudaEventDestroy(ev[i]);
    }
  } destroy{ev};
  if (!cuda_step(cudaEventCreate(&ev[0]), "cudaEventCreate") ||
      !cuda_step(cudaEventCreate(&ev[1]), "cudaEventCreate"))
    return -1.0f;
  std::vector<float> t;
  for (int rep = 0; rep < warmup + timed; ++rep) {
    if (flush_bytes > 0 &&
        !cuda_step(cudaMemsetAsync(flush, rep & 0xFF, flush_bytes, s), "the L2 flush's memset"))
      return -1.0f;
    float ms = 0.0f;
    if (!cuda_step(cudaEventRecord(ev[0], s), "cudaEventRecord") ||
        !cuda_step(run(s), "the timed launches") ||
        !cuda_step(cudaEventRecord(ev[1], s), "cudaEventRecord") ||
        !cuda_step(cudaEventSynchronize(ev[1]), "cudaEventSynchronize") ||
        !cuda_step(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime"))
      return -1.0f;
    if (rep >= warmup) t.push_back(ms * 1000.0f);
  }
  if (t.empty()) return -1.0f;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

float median_graph_us(const std::function<cudaError_t(cudaStream_t)>& enqueue, cudaStream_t s,
                      void* flush, size_t flush_bytes, int warmup, int timed) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  struct Destroy {
    cudaGraph_t* g;
    cudaGraphExec_t* ge;
    ~Destroy() {
      if (*ge) cudaGraphExecDestroy(*ge);
      if (*g) cudaGraphDestroy(*g);
    }
  } destroy{&g, &ge};
  if (!cuda_step(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), "cudaStreamBeginCapture"))
    return -1.0f;
  const cudaError_t enqueued = enqueue(s);
  const cudaError_t ended = cudaStreamEndCapture(s, &g);
  if (!cuda_step(enqueued, "the launches under capture") ||
      !cuda_step(ended, "cudaStreamEndCapture") ||
      !cuda_step(cudaGraphInstantiate(&ge, g, 0), "cudaGraphInstantiate"))
    return -1.0f;
  return median_event_us([&](cudaStream_t st) { return cudaGraphLaunch(ge, st); }, s, flush,
                         flush_bytes, warmup, timed);
}

float median_pipelined_graph_us(cudaGraphExec_t exec, cudaStream_t s, void* flush,
                                size_t flush_bytes, int timed) {
  std::vector<cudaEvent_t> ev(2 * static_cast<size_t>(timed), nullptr);
  struct Destroy {
    std::vector<cudaEvent_t>& ev;
    ~Destroy() {
      for (auto e : ev)
        if (e) cudaEventDestroy(e);
    }
  } destroy{ev};
  for (auto& e : ev)
    if (!cuda_step(cudaEventCreate(&e), "cudaEventCreate")) return -1.0f;
  for (int i = 0; i < timed; ++i) {
    if (flush_bytes > 0 &&
        !cuda_step(cudaMemsetAsync(flush, i & 0xFF, flush_bytes, s), "the L2 flush's memset"))
      return -1.0f;
    if (!cuda_step(cudaEventRecord(ev[2 * i], s), "cudaEventRecord") ||
        !cuda_step(cudaGraphLaunch(exec, s), "cudaGraphLaunch") ||
        !cuda_step(cudaEventRecord(ev[2 * i + 1], s), "cudaEventRecord"))
      return -1.0f;
  }
  if (!cuda_step(cudaStreamSynchronize(s), "cudaStreamSynchronize")) return -1.0f;
  std::vector<float> t(timed);
  for (int i = 0; i < timed; ++i) {
    float ms = 0.0f;
    if (!cuda_step(cudaEventElapsedTime(&ms, ev[2 * i], ev[2 * i + 1]), "cudaEventElapsedTime"))
      return -1.0f;
    t[i] = ms * 1000.0f;
  }
  if (t.empty()) return -1.0f;
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

float Rng::normal() {
  // Box-Muller; u1 in (0, 1].
  const double u1 = 1.0 - uniform(), u2 = uniform();
  return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
}

namespace {

void fill_matrix(Mxfp4View* v, std::vector<uint8_t>* packed, std::vector<uint8_t>* scales, int rows,
                 int k, uint64_t seed) {
  packed->resize(static_cast<size_t>(rows) * k / 2);
  scales->resize(static_cast<size_t>(rows) * k / 32);
  Rng r(seed);
  // 8 random bytes per draw: all 16 E2M1 codes, uniformly.
  size_t i = 0;
  for (; i + 8 <= packed->size(); i += 8) {
    const uint64_t z = r.next();
    std::memcpy(packed->data() + i, &z, 8);
  }
  for (; i < packed->size(); ++i) (*packed)[i] = static_cast<uint8_t>(r.next());
  for (auto& s : *scales) s = static_cast<uint8_t>(117 + r.below(5));  // 2^-10 .. 2^-6
  v->packed = packed->data();
  v->scales = scales->data();
  v->rows = rows;
  v->k = k;
}

}  // namespace

std::unique_ptr<SyntheticLayer> make_layer(int E_total, int H, int I, int top_k, int own_start,
                                           int own_count, uint64_t seed) {
  auto s = std::make_unique<SyntheticLayer>();
  ModelConfig& c = s->layer.cfg;
  c.num_experts = E_total;
  c.routed_expert_hidden_size = H;
  c.moe_intermediate_size = I;
  c.num_experts_per_token = top_k;
  s->layer.layer = 1;
  s->own_start = own_start;
  s->own_count = own_count;
  s->situ = situ_from_config(c);
  // 6 byte vectors per owned expert + 6 for the dummy, filled in parallel.
  const int n = own_count + 1;
  s->bytes.resize(static_cast<size_t>(6) * n);
  std::vector<ExpertView> views(n);
  std::atomic<int> next{0};
  auto work = [&]() {
    for (int i = next++; i < n; i = next++) {
      auto* b = &s->bytes[static_cast<size_t>(6) * i];
      const uint64_t es = seed * 1000003ull + static_cast<uint64_t>(i) * 7919ull;
      fill_matrix(&views[i].w1, &b[0], &b[1], I, H, es + 1);
      fill_matrix(&views[i].w3, &b[2], &b[3], I, H, es + 2);
      fill_matrix(&views[i].w2, &b[4], &b[5], H, I, es + 3);
    }
  };
  std::vector<std::thread> pool;
  const int nt = std::max(1, std::min<int>(16, std::thread::hardware_concurrency()));
  for (int t = 0; t < nt; ++t) pool.emplace_back(work);
  for (auto& t : pool) t.join();
  s->layer.experts.assign(E_total, views[own_count]);
  for (int i = 0; i < own_count; ++i) s->layer.experts[own_start + i] = views[i];
  return s;
}

Metrics compare(const float* got, const float* ref, size_t n) {
  Metrics m;
  double dot = 0, gg = 0, rr = 0, ee = 0;
  for (size_t i = 0; i < n; ++i) {
    const double g = got[i], r = ref[i];
    if (!std::isfinite(g)) {
      ++m.nonfinite;
      continue;
    }
    dot += g * r;
    gg += g * g;
    rr += r * r;
    ee += (g - r) * (g - r);
    m.max_abs = std::max(m.max_abs, std::fabs(g - r));
  }
  m.cosine = (gg > 0 && rr > 0) ? dot / std::sqrt(gg * rr) : (gg == rr ? 1.0 : 0.0);
  m.nrmse = rr > 0 ? std::sqrt(ee / rr) : (ee == 0 ? 0.0 : INFINITY);
  if (m.nonfinite) m.cosine = 0, m.nrmse = INFINITY;
  return m;
}

std::string describe(const Metrics& m) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "cosine %.7f  NRMSE %.4f%%  max abs %.3g%s", m.cosine,
                m.nrmse * 100, m.max_abs,
                m.nonfinite ? ("  NONFINITE " + std::to_string(m.nonfinite)).c_str() : "");
  return buf;
}

void report(const std::string& name, const std::string& against, const Metrics& m) {
  std::printf("[metrics] %-44s vs %-22s %s\n", name.c_str(), against.c_str(), describe(m).c_str());
  std::fflush(stdout);
}

std::vector<float> reference_rows(const MoeLayer& layer, const std::vector<float>& x, int H,
                                  const std::vector<int32_t>& ids,
                                  const std::vector<float>& weights, int k,
                                  const std::vector<int>& rows, ActMode mode,
                                  const SituParams& situ, const ExpertRange& range) {
  // Gather the rows and make one call: the reference parallelizes inside.
  const size_t n = rows.size();
  std::vector<float> xs(n * H), ws(n * k), out(n * H);
  std::vector<int32_t> is(n * k);
  for (size_t i = 0; i < n; ++i) {
    const size_t t = static_cast<size_t>(rows[i]);
    std::memcpy(&xs[i * H], &x[t * H], H * sizeof(float));
    std::memcpy(&is[i * k], &ids[t * k], k * sizeof(int32_t));
    std::memcpy(&ws[i * k], &weights[t * k], k * sizeof(float));
  }
  reference_experts(layer, xs.data(), static_cast<int>(n), is.data(), ws.data(), k, mode, situ,
                    range, out.data());
  return out;
}

std::vector<int> sample_rows(int T, int max_rows, uint64_t seed) {
  std::vector<int> r;
  if (T <= max_rows) {
    for (int t = 0; t < T; ++t) r.push_back(t);
    return r;
  }
  std::set<int> s{0, T - 1};
  Rng g(seed);
  while (static_cast<int>(s.size()) < max_rows) s.insert(g.below(T));
  return std::vector<int>(s.begin(), s.end());
}

void random_bf16(int n, uint64_t seed, float scale, std::vector<uint16_t>* bits,
                 std::vector<float>* values) {
  Rng r(seed);
  bits->resize(n);
  values->resize(n);
  for (int i = 0; i < n; ++i) {
    (*bits)[i] = float_to_bf16(r.normal() * scale);
    (*values)[i] = bf16_to_float((*bits)[i]);
  }
}

}  // namespace mxmoe::test
