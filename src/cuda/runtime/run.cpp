// src/cuda/runtime/run.cpp: workspace_bytes and run_moe (mxmoe/moe.h): the dispatcher.
//
// One call enqueues, on the caller's stream:
//   [quantize (x -> BF16 / MXFP8-as-BF16); skipped for W4A16 on 16-byte BF16 rows, which GEMM1
//   reads in place] -> [route_kimi] -> group (EP filter, stable sort by expert; its scan also
//   writes the local beta arrays and zeroes the h_ready counters) -> sm90 GEMM1 (+ SiTU,
//   + requant) -> sm90 GEMM2 (x routing weight; a token that owns one local pair straight into
//   out; on the warp-specialized kernels it starts on the experts GEMM1 has finished while
//   GEMM1's last tiles run, sm90/grouped_gemm.h h_ready) -> combine (slot-ordered fp32 sum per
//   token, for the other tokens).
// At decode sizes (smxx::prologue_plan: T * k <= 4096 and the shared-memory bounds, decided
// from host sizes) everything before GEMM1 is ONE launch, smxx/prologue.cu, with bit-identical
// outputs; otherwise the separate kernels run. Every glue kernel is launched with PDL
// (smxx/pdl.cuh) and waits for its predecessor before reading. MXMOE_GLUE=separate in the
// environment forces the separate kernels (A/B measurements; read once per process).
// Every size comes from num_tokens * top_k (host values), never from device data, so the
// sequence is graph-capturable; the grouped GEMMs read the real per-expert counts on the device.
// All checks run before the first launch: a failed Status means nothing was enqueued.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "mxmoe/moe.h"
#include "runtime/arch.h"
#include "runtime/direct_stores.h"
#include "runtime/prepared.h"
#include "sm90/decode_gemm.h"
#include "sm90/grouped_gemm.h"
#include "smxx/env_knob.h"
#include "smxx/glue.h"

namespace mxmoe {
namespace {

constexpr size_t kAlign = 256;
size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// The workspace's pieces, carved in this order from one buffer.
struct Carve {
  __nv_bfloat16* xq;        // [max_tokens, H]
  int32_t* ids;             // [P]   (GPU routing)
  float* weights;           // [P]
  int32_t* scratch;         // group scratch
  int32_t* offsets;         // [E + 1]
  int32_t* x_row;           // [P]
  float* row_weight;        // [P]
  int32_t* pair_pos;        // [P]
  int32_t* out_token;       // [P]
  int32_t* expert_has_out;  // [E]
  float* beta;              // [E]
  float* linear_beta;       // [E]
  int32_t* h_ready;         // [E] GEMM1's finished tiles per expert (zeroed by the glue each call)
  int32_t* ids_ready;       // [1] the routed ids are written (GroupedProblem::route_ids_ready)
  __nv_bfloat16* h;         // [P, I]
  float* y;                 // [P, H]
  size_t total;
};

Carve carve(const PreparedWeights* w, int max_tokens, int top_k, char* base) {
  const size_t T = static_cast<size_t>(max_tokens), P = T * static_cast<size_t>(top_k);
  const size_t E = static_cast<size_t>(w->expert_count);
  const size_t H = static_cast<size_t>(w->hidden), I = static_cast<size_t>(w->intermediate);
  Carve c{};
  size_t off = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + off : nullptr;
    off += align_up(bytes);
    return p;
  };
  c.xq = reinterpret_cast<__nv_bfloat16*>(take(T * H * 2));
  c.ids = reinterpret_cast<int32_t*>(take(P * 4));
  c.weights = reinterpret_cast<float*>(take(P * 4));
  c.scratch = reinterpret_cast<int32_t*>(
      take(smxx::group_scratch_ints(static_cast<int>(P), static_cast<int>(E)) * 4));
  c.offsets = reinterpret_cast<int32_t*>(take((E + 1) * 4));
  c.x_row = reinterpret_cast<int32_t*>(take(P * 4));
  c.row_weight = reinterpret_cast<float*>(take(P * 4));
  c.pair_pos = reinterpret_cast<int32_t*>(take(P * 4));
  c.out_token = reinterpret_cast<int32_t*>(take(P * 4));
  c.expert_has_out = reinterpret_cast<int32_t*>(take(E * 4));
  c.beta = reinterpret_cast<float*>(take(E * 4));
  c.linear_beta = reinterpret_cast<float*>(take(E * 4));
  c.h_ready = reinterpret_cast<int32_t*>(take(E * 4));
  c.ids_ready = reinterpret_cast<int32_t*>(take(4));
  c.h = reinterpret_cast<__nv_bfloat16*>(take(P * I * 2));
  c.y = reinterpret_cast<float*>(take(P * H * 4));
  c.total = off;
  return c;
}

Status launch_failed(const char* kernel, cudaError_t e) {
  return Status::Fail(std::string("run_moe: launch of ") + kernel +
                      " failed: " + cudaGetErrorString(e));
}

bool aligned(const void* p, size_t a) { return reinterpret_cast<uintptr_t>(p) % a == 0; }

bool fused_prologue_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("MXMOE_GLUE");
    return !(v && std::strcmp(v, "separate") == 0);
  }();
  return allowed;
}

// GPU routing before the fused prologue: the decode GEMMs take their tiles from the routed ids
// behind the prologue's ready flag (GroupedProblem::route_ids_ready). MXMOE_ROUTED_SPEC=0 in the
// environment turns it off (same-binary A/Bs; read once per process).
bool routed_spec_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("MXMOE_ROUTED_SPEC");
    return !(v && std::strcmp(v, "0") == 0);
  }();
  return allowed;
}

// The GPU router's wide CTAs (smxx/route.cu) up to MXMOE_ROUTE_WIDE_TOKENS tokens (0: one warp
// per token at every T). Same bits either way; same-binary A/Bs, read once per process.
int route_wide_tokens() {
  static const int n = smxx::env_int("MXMOE_ROUTE_WIDE_TOKENS", smxx::kRouteWideTokens);
  return n;
}

}  // namespace

size_t workspace_bytes(const PreparedWeights* w, int max_tokens, int top_k) {
  if (!w || max_tokens < 0 || top_k < 0) return 0;
  return carve(w, max_tokens, top_k, nullptr).total;
}

Status run_moe(const PreparedWeights* w, const MoeRunParams& p, cudaStream_t stream) {
  if (!w) return Status::Fail("run_moe: weights are null");
  // The gate first: nothing below may launch on another architecture.
  int major = 0, minor = 0;
  if (Status s = runtime::device_capability(w->device, &major, &minor); !s.ok()) return s;
  if (Status s = runtime::check_architecture(major, minor); !s.ok()) return s;

  const int T = p.num_tokens, k = p.top_k, H = w->hidden, I = w->intermediate;
  const int E = w->expert_count;
  if (T < 0) return Status::Fail("run_moe: num_tokens < 0");
  if (k < 1 || k > 64)
    return Status::Fail("run_moe: top_k must be in 1..64, got " + std::to_string(k));
  if (T > p.max_tokens)
    return Status::Fail("run_moe: num_tokens " + std::to_string(T) + " > max_tokens " +
                        std::to_string(p.max_tokens));
  if (static_cast<int64_t>(p.max_tokens) * k > (int64_t{1} << 30))
    return Status::Fail("run_moe: max_tokens * top_k too large");
  const size_t need = workspace_bytes(w, p.max_tokens, k);
  if (!p.workspace || p.workspace_size < need)
    return Status::Fail("run_moe: workspace of " + std::to_string(p.workspace_size) +
                        " bytes, need " + std::to_string(need) + " for max_tokens " +
                        std::to_string(p.max_tokens) + ", top_k " + std::to_string(k));
  if (!aligned(p.workspace, kAlign)) return Status::Fail("run_moe: workspace not 256-byte aligned");
  if (T == 0) return Status::Ok();
  if (!p.hidden) return Status::Fail("run_moe: hidden is null");
  if (!p.out) return Status::Fail("run_moe: out is null");
  const int64_t x_stride = p.hidden_stride ? p.hidden_stride : H;
  const int64_t out_stride = p.out_stride ? p.out_stride : H;
  if (x_stride < H)
    return Status::Fail("run_moe: hidden_stride " + std::to_string(x_stride) + " < latent width " +
                        std::to_string(H));
  if (out_stride < H)
    return Status::Fail("run_moe: out_stride " + std::to_string(out_stride) + " < latent width " +
                        std::to_string(H));
  const bool caller_routing = p.topk_ids != nullptr;
  if (caller_routing == (p.router_logits != nullptr))
    return Status::Fail("run_moe: give exactly one of topk_ids (+ topk_weights) or router_logits");
  if (caller_routing && !p.topk_weights) return Status::Fail("run_moe: topk_weights is null");
  const int Et = w->num_experts_total;
  const int64_t l_stride = p.logits_stride ? p.logits_stride : Et;
  if (!caller_routing) {
    if (k > Et)
      return Status::Fail("run_moe: top_k " + std::to_string(k) + " > experts " +
                          std::to_string(Et));
    if (Et > smxx::kRouteMaxExperts)
      return Status::Fail("run_moe: GPU routing supports up to " +
                          std::to_string(smxx::kRouteMaxExperts) + " experts");
    if (l_stride < Et) return Status::Fail("run_moe: logits_stride < experts");
  }

  int dev = -1;
  if (cudaError_t e = cudaGetDevice(&dev); e != cudaSuccess)
    return Status::Fail(std::string("run_moe: cudaGetDevice: ") + cudaGetErrorString(e));
  if (dev != w->device)
    return Status::Fail("run_moe: current device " + std::to_string(dev) +
                        ", weights live on device " + std::to_string(w->device));

  const Carve c = carve(w, p.max_tokens, k, static_cast<char*>(p.workspace));
  const bool w4a8 = p.backend == Backend::kW4A8;

  const int32_t* ids = p.topk_ids;
  const float* weights = p.topk_weights;
  int32_t* rid = p.routed_ids_out ? p.routed_ids_out : c.ids;
  float* rw = p.routed_weights_out ? p.routed_weights_out : c.weights;
  if (!caller_routing) {
    ids = rid;
    weights = rw;
  }
  const bool fp8_gemms = use_w4a8_fp8(w, p.backend, T, k);
  const smxx::PrologueShape shape = fused_prologue_allowed()
                                        ? smxx::prologue_plan(T, k, Et, E, !caller_routing)
                                        : smxx::PrologueShape{};
  // Under EP a rank expects only its share of the T * k picks: the kernels choose tile widths
  // from that (a bound of T * k would pick 32-wide tiles at EP16 T=64 for ~1 row per expert).
  const int rows_hint =
      static_cast<int>(std::max<int64_t>(1, (static_cast<int64_t>(T) * k * E + Et - 1) / Et));
  // GPU routing with the fused prologue (route_kimi, then the prologue on its ids): the ids'
  // ready flag only where the decode GEMMs would take the ids (their rule sees the same rows as gp
  // below: hint rows_hint, bound T * k).
  const bool routed_spec =
      !caller_routing && shape.ok && routed_spec_allowed() &&
      sm90::decode_spec_takes_ids(E, sm90::choice_rows(rows_hint, T * k), H, I);
  // Outside the fused prologue (which always writes xq), W4A16 on BF16 rows lets GEMM1 gather
  // straight from the caller's hidden (16-byte rows): the BF16 copy the quantizer would make
  // costs a full read + write of x (~45 us at T = 16384).
  const bool x_direct = !shape.ok && !w4a8 && p.hidden_dtype == InputDType::kBf16 &&
                        x_stride % 8 == 0 && aligned(p.hidden, 16);
  // GEMM2 stores the out rows of tokens that own one local pair itself (16-byte stores), and the
  // combine skips them (smxx/gemm2_store.cuh), when enough tokens are expected to own exactly
  // one local pair to pay for the grouping's extra work (runtime/direct_stores.h).
  int32_t* const out_token = runtime::use_direct_gemm2_stores(E, w->num_experts_total, k) &&
                                     aligned(p.out, 16) && out_stride % 4 == 0
                                 ? c.out_token
                                 : nullptr;
  // The local SiTU parameters and GEMM1's zeroed counters, written by either glue path below.
  smxx::SituFill situ;
  situ.per_expert_beta = p.per_expert_beta;
  situ.beta = p.beta;
  situ.per_expert_linear_beta = p.per_expert_linear_beta;
  situ.linear_beta = p.linear_beta;
  situ.beta_out = c.beta;
  situ.linear_beta_out = c.linear_beta;
  situ.h_ready = c.h_ready;
  cudaError_t e = cudaSuccess;
  // GPU routing runs first on either glue path (the fused prologue's plan says route_first
  // whenever it routes: smxx/prologue.cu says why); the glue then groups route_kimi's ids.
  if (!caller_routing) {
    e = smxx::launch_route_kimi(p.router_logits, l_stride, p.correction_bias, T, Et, k,
                                p.renormalize, p.routed_scaling_factor, rid, rw, stream,
                                smxx::kRouteRegExperts, route_wide_tokens());
    if (e != cudaSuccess) return launch_failed("route_kimi", e);
  }
  if (shape.ok) {
    smxx::PrologueArgs a;
    a.x = p.hidden;
    a.x_is_f32 = p.hidden_dtype == InputDType::kF32;
    a.x_stride = x_stride;
    a.H = H;
    a.mxfp8 = w4a8;
    a.xq = reinterpret_cast<uint16_t*>(c.xq);
    a.ids = ids;  // the caller's, or route_kimi's above
    a.weights = weights;
    a.T = T;
    a.k = k;
    a.expert_start = w->expert_start;
    a.expert_count = E;
    a.expert_offsets = c.offsets;
    a.x_row = c.x_row;
    a.row_weight = c.row_weight;
    a.pair_pos = c.pair_pos;
    a.out_token = out_token;
    a.expert_has_out = c.expert_has_out;
    a.situ = situ;
    a.ids_ready = routed_spec ? c.ids_ready : nullptr;
    e = smxx::launch_prologue(a, shape, stream);
    if (e != cudaSuccess) return launch_failed("prologue", e);
  } else {
    // The FP8 W4A8 GEMMs quantize x to MXFP8 codes themselves (below): no BF16 copy needed.
    if (!fp8_gemms && !x_direct) {
      e = smxx::launch_quantize_input(p.hidden, p.hidden_dtype == InputDType::kF32, x_stride, T, H,
                                      w4a8, c.xq, stream);
      if (e != cudaSuccess) return launch_failed("quantize_input", e);
    }
    smxx::GroupArgs g;
    g.ids = ids;
    g.weights = weights;
    g.T = T;
    g.k = k;
    g.expert_start = w->expert_start;
    g.expert_count = E;
    g.scratch = c.scratch;
    g.expert_offsets = c.offsets;
    g.x_row = c.x_row;
    g.row_weight = c.row_weight;
    g.pair_pos = c.pair_pos;
    g.out_token = out_token;
    g.expert_has_out = c.expert_has_out;
    g.situ = situ;
    const char* failed = nullptr;
    e = smxx::launch_group(g, stream, &failed);
    if (e != cudaSuccess) return launch_failed(failed ? failed : "group", e);
  }

  // W4A8 at prefill sizes: the FP8 tensor-core GEMMs on the folded weights (prepared.h), which
  // quantize x to MXFP8 codes in c.xq and h in c.h themselves; otherwise the BF16-MMA GEMMs.
  if (fp8_gemms) {
    const char* fp8_failed = "sm90 fp8";
    e = launch_w4a8_fp8_gemms(w, p.hidden, p.hidden_dtype == InputDType::kF32, x_stride, T, k,
                              c.offsets, c.x_row, c.row_weight, c.beta, c.linear_beta, c.xq, c.h,
                              c.y, out_token, p.out, out_stride, stream, &fp8_failed);
    if (e != cudaSuccess) return launch_failed(fp8_failed, e);
  } else {
    sm90::GroupedProblem gp;
    gp.num_experts = E;
    gp.expert_offsets = c.offsets;
    gp.max_rows = T * k;
    gp.rows_hint = rows_hint;
    // The caller's ids were written before this chain began, and the glue groups exactly them:
    // the decode GEMMs may find their tiles from them before they wait (sm90/decode_gemm.h,
    // DecodeSpec; MXMOE_DECODE_SPEC). The GPU router's ids too, once the fused prologue's flag
    // says they are written (route_kimi ran before it; it sets the flag once it has waited).
    if (caller_routing || routed_spec) {
      gp.route_ids = ids;  // the caller's, or the GPU router's behind the prologue's flag
      gp.route_pairs = T * k;
      gp.route_expert_start = w->expert_start;
      gp.route_ids_ready = routed_spec ? c.ids_ready : nullptr;
    }

    sm90::Gemm1Params g1;
    g1.w_packed = w->w13_packed;
    g1.w_scales = w->w13_scales;
    g1.I = I;
    g1.K = H;
    g1.x = x_direct ? static_cast<const __nv_bfloat16*>(p.hidden) : c.xq;
    g1.x_stride = x_direct ? x_stride : H;
    g1.x_row = c.x_row;
    g1.beta = c.beta;
    g1.linear_beta = c.linear_beta;
    g1.mxfp8_out = w4a8;
    g1.small_scales = w->w13_small_scales;
    g1.h = c.h;
    g1.h_ready = c.h_ready;  // zeroed by the glue above
    // W4A16 on the caller's BF16 rows: what the glue would hand GEMM1 (rows copied bit for bit,
    // the SiTU parameters) is also in the caller's buffers, so the decode GEMM1 may run beside
    // the glue instead of after it (sm90/decode_gemm.h, kDecodeSpecOwnInputs; the launcher takes
    // them only where its bulk copies can: 16-byte rows).
    if (caller_routing && !w4a8 && p.hidden_dtype == InputDType::kBf16) {
      g1.own.x = static_cast<const __nv_bfloat16*>(p.hidden);
      g1.own.x_stride = x_stride;
      g1.own.top_k = k;
      g1.own.per_expert_beta = p.per_expert_beta;
      g1.own.beta = p.beta;
      g1.own.per_expert_linear_beta = p.per_expert_linear_beta;
      g1.own.linear_beta = p.linear_beta;
      // (Rows the bulk copies cannot read: no offer, so GEMM2's rule does not assume one.)
      gp.gemm1_own_offered = sm90::gemm1_own_usable(g1.own, H);
    }
    g1.g = gp;
    sm90::CountedGemm1 counted;
    e = sm90::launch_gemm1(g1, w->num_sms, stream, &counted);
    if (e != cudaSuccess) return launch_failed("sm90 gemm1", e);

    sm90::Gemm2Params g2;
    g2.w_packed = w->w2_packed;
    g2.w_scales = w->w2_scales;
    g2.H = H;
    g2.I = I;
    g2.h = c.h;
    g2.row_weight = c.row_weight;
    g2.y = c.y;
    g2.out_token = out_token;
    g2.expert_has_out = out_token ? c.expert_has_out : nullptr;
    g2.out = p.out;
    g2.out_stride = out_stride;
    g2.small_scales = w->w2_small_scales;
    g2.after_gemm1 = counted;  // GEMM2 may start under GEMM1's last tiles
    g2.g = gp;
    e = sm90::launch_gemm2(g2, w->num_sms, stream);
    if (e != cudaSuccess) return launch_failed("sm90 gemm2", e);
  }

  e = smxx::launch_combine(c.y, H, c.pair_pos, T, k, p.out, out_stride, out_token != nullptr,
                           stream);
  if (e != cudaSuccess) return launch_failed("combine", e);
  return Status::Ok();
}

}  // namespace mxmoe
