// tests/reference/fixture.h: in-memory Kimi-K3-format layers for the reference tests, and the
// independent fp64 building blocks the tests compare against (weights decoded from their bit
// fields by tests/formats/oracle.h, BF16 / MXFP8 quantization written here in double).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "../formats/oracle.h"
#include "mxmoe/formats.h"
#include "mxmoe/moe_layer.h"

namespace fixture {

struct Shape {
  int hidden = 128;  // D (block scope)
  int latent = 64;   // H
  int inter = 64;    // I
  int experts = 8;   // E
  int top_k = 2;
  int shared = 1;  // num_shared_experts (shared width = shared * inter)
};

// Owns the bytes the MoeLayer views point into.
struct TestLayer {
  mxmoe::MoeLayer layer;
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bytes;
  std::vector<std::unique_ptr<std::vector<uint16_t>>> halves;
  std::vector<float> bias;
};

inline mxmoe::Mxfp4View random_mxfp4(TestLayer& tl, std::mt19937& rng, int rows, int k,
                                     int scale_lo, int scale_hi) {
  std::uniform_int_distribution<int> byte(0, 255), sc(scale_lo, scale_hi);
  auto packed = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(rows) * k / 2);
  auto scales = std::make_unique<std::vector<uint8_t>>(static_cast<size_t>(rows) * k / 32);
  for (auto& b : *packed) b = static_cast<uint8_t>(byte(rng));
  for (auto& s : *scales) s = static_cast<uint8_t>(sc(rng));
  mxmoe::Mxfp4View v;
  v.packed = packed->data();
  v.scales = scales->data();
  v.rows = rows;
  v.k = k;
  tl.bytes.push_back(std::move(packed));
  tl.bytes.push_back(std::move(scales));
  return v;
}

inline mxmoe::Bf16View random_bf16(TestLayer& tl, std::mt19937& rng, int rows, int cols,
                                   float stddev, float mean = 0.0f) {
  std::normal_distribution<float> n(mean, stddev);
  auto d = std::make_unique<std::vector<uint16_t>>(static_cast<size_t>(rows) * cols);
  for (auto& h : *d) h = mxmoe::float_to_bf16(n(rng));
  mxmoe::Bf16View v;
  v.data = d->data();
  v.rows = rows;
  v.cols = cols;
  tl.halves.push_back(std::move(d));
  return v;
}

// Random experts (scale bytes 120..126: weights up to 6 * 2^-1, typical |w| ~ 2^-4) and, if
// `block`, the BF16 block tensors with magnitudes that keep activations O(1).
inline std::unique_ptr<TestLayer> make_layer(const Shape& s, uint32_t seed, bool block) {
  auto tl = std::make_unique<TestLayer>();
  std::mt19937 rng(seed);
  mxmoe::ModelConfig& c = tl->layer.cfg;
  c.hidden_size = s.hidden;
  c.routed_expert_hidden_size = s.latent;
  c.moe_intermediate_size = s.inter;
  c.num_experts = s.experts;
  c.num_experts_per_token = s.top_k;
  c.num_shared_experts = s.shared;
  c.num_hidden_layers = 2;
  tl->layer.layer = 1;
  tl->layer.experts.resize(s.experts);
  for (auto& e : tl->layer.experts) {
    e.w1 = random_mxfp4(*tl, rng, s.inter, s.latent, 120, 126);
    e.w3 = random_mxfp4(*tl, rng, s.inter, s.latent, 120, 126);
    e.w2 = random_mxfp4(*tl, rng, s.latent, s.inter, 120, 126);
  }
  if (block) {
    const int Is = s.shared * s.inter;
    mxmoe::MoeLayer& L = tl->layer;
    L.router = random_bf16(*tl, rng, s.experts, s.hidden, 1.0f / std::sqrt(float(s.hidden)));
    std::normal_distribution<float> n(0.0f, 0.05f);
    tl->bias.resize(s.experts);
    for (auto& b : tl->bias) b = n(rng);
    L.router_bias = tl->bias.data();
    L.latent_down = random_bf16(*tl, rng, s.latent, s.hidden, 1.0f / std::sqrt(float(s.hidden)));
    L.latent_up = random_bf16(*tl, rng, s.hidden, s.latent, 1.0f / std::sqrt(float(s.latent)));
    const mxmoe::Bf16View norm = random_bf16(*tl, rng, 1, s.latent, 0.1f, 1.0f);
    L.latent_norm = norm.data;
    L.shared_gate = random_bf16(*tl, rng, Is, s.hidden, 2.0f / std::sqrt(float(s.hidden)));
    L.shared_up = random_bf16(*tl, rng, Is, s.hidden, 2.0f / std::sqrt(float(s.hidden)));
    L.shared_down = random_bf16(*tl, rng, s.hidden, Is, 1.0f / std::sqrt(float(Is)));
    L.has_block = true;
  }
  return tl;
}

// ---- independent fp64 pieces -------------------------------------------------------------------

// Dequantized MXFP4 matrix [rows, k] in double, from the bit fields.
inline std::vector<double> dequant(const mxmoe::Mxfp4View& v) {
  std::vector<double> w(static_cast<size_t>(v.rows) * v.k);
  for (int r = 0; r < v.rows; ++r)
    for (int k = 0; k < v.k; ++k) {
      const uint8_t byte = v.packed[(static_cast<size_t>(r) * v.k + k) / 2];
      const int code = (k & 1) ? byte >> 4 : byte & 15;
      const int s = v.scales[static_cast<size_t>(r) * (v.k / 32) + k / 32];
      w[static_cast<size_t>(r) * v.k + k] = oracle::e2m1_value(code) * std::ldexp(1.0, s - 127);
    }
  return w;
}

inline std::vector<double> dequant(const mxmoe::Bf16View& v) {
  std::vector<double> w(static_cast<size_t>(v.rows) * v.cols);
  for (size_t i = 0; i < w.size(); ++i) {
    const uint32_t u = static_cast<uint32_t>(v.data[i]) << 16;
    float f;
    std::memcpy(&f, &u, 4);
    w[i] = f;
  }
  return w;
}

// y[n] = sum_k W[n, k] x[k] in double.
inline std::vector<double> matvec(const std::vector<double>& W, int rows, int k,
                                  const std::vector<double>& x) {
  std::vector<double> y(rows, 0.0);
  for (int r = 0; r < rows; ++r) {
    double s = 0;
    for (int i = 0; i < k; ++i) s += W[static_cast<size_t>(r) * k + i] * x[i];
    y[r] = s;
  }
  return y;
}

// y = dequant(W) . x in double for an MXFP4 matrix, decoding each row from its bit fields on the
// fly (no dequantized copy: a Kimi-sized expert would need 260 MB of doubles).
inline std::vector<double> matvec(const mxmoe::Mxfp4View& v, const std::vector<double>& x) {
  double lut[16];
  for (int c = 0; c < 16; ++c) lut[c] = oracle::e2m1_value(c);
  std::vector<double> y(v.rows, 0.0);
  for (int r = 0; r < v.rows; ++r) {
    const uint8_t* p = v.packed + static_cast<size_t>(r) * v.k / 2;
    const uint8_t* sc = v.scales + static_cast<size_t>(r) * (v.k / 32);
    double s = 0;
    for (int b = 0; b < v.k / 32; ++b) {
      const double scale = std::ldexp(1.0, sc[b] - 127);
      for (int i = b * 32; i < b * 32 + 32; i += 2) {
        s += lut[p[i / 2] & 15] * scale * x[i];
        s += lut[p[i / 2] >> 4] * scale * x[i + 1];
      }
    }
    y[r] = s;
  }
  return y;
}

// Round-to-nearest-even of a double onto the BF16 grid (normal range), written independently:
// scale to an integer significand of 8 bits and round with nearbyint (ties to even).
inline double bf16_round(double d) {
  if (d == 0 || !std::isfinite(d)) return d;
  const int e = std::ilogb(d);
  const double ulp = std::ldexp(1.0, e - 7);
  return std::nearbyint(d / ulp) * ulp;
}

// MXFP8 fake quantization of a row in double (oracle scale rule and brute-force RNE).
inline std::vector<double> mxfp8_round(const std::vector<double>& x) {
  std::vector<double> out(x.size());
  for (size_t b = 0; b < x.size(); b += 32) {
    float xf[32];
    for (int i = 0; i < 32; ++i) xf[i] = static_cast<float>(x[b + i]);  // inputs are fp32 values
    uint8_t sb;
    int codes[32];
    oracle::quantize_block(xf, 448.0, oracle::e4m3_encode, &sb, codes);
    for (int i = 0; i < 32; ++i)
      out[b + i] = oracle::e4m3_value(codes[i]) * std::ldexp(1.0, sb - 127);
  }
  return out;
}

using oracle::situ_double;

// sqrt(sum (a - b)^2 / sum b^2): the relative RMS error against the fp64 result b.
template <class A, class B>
double nrmse(const A& a, const B& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < b.size(); ++i) {
    const double d = static_cast<double>(a[i]) - static_cast<double>(b[i]);
    num += d * d;
    den += static_cast<double>(b[i]) * static_cast<double>(b[i]);
  }
  return den == 0 ? (num == 0 ? 0 : INFINITY) : std::sqrt(num / den);
}

}  // namespace fixture
