// tests/formats/oracle.h: independent double-precision models of the MX codecs, written from the
// format definitions (bit fields -> value) and a brute-force nearest-value search, sharing no code
// with formats.h / mx_quant.cpp. The tests hold the library to these, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

namespace oracle {

// Value of an E2M1 code from its fields: sign(1) exp(2, bias 1) mant(1).
inline double e2m1_value(int code) {
  const int s = (code >> 3) & 1, e = (code >> 1) & 3, m = code & 1;
  const double mag = e == 0 ? m * 0.5 : std::ldexp(1.0 + m / 2.0, e - 1);
  return s ? -mag : mag;
}

// Value of an E4M3FN code: sign(1) exp(4, bias 7) mant(3); S.1111.111 is NaN, no infinities.
inline double e4m3_value(int code) {
  const int s = (code >> 7) & 1, e = (code >> 3) & 15, m = code & 7;
  if (e == 15 && m == 7) return std::numeric_limits<double>::quiet_NaN();
  const double mag =
      e == 0 ? std::ldexp(static_cast<double>(m), -9) : std::ldexp(1.0 + m / 8.0, e - 7);
  return s ? -mag : mag;
}

// Round-to-nearest-even of x onto a format given by its positive codes (code -> value, sign bit
// `sign_bit`), saturating to the largest magnitude. Brute force: the nearest value wins, on an
// exact tie the even code wins.
template <class ValueFn>
int rne_encode(double x, int num_pos_codes, int sign_bit, ValueFn value) {
  const double a = std::fabs(x);
  int best = 0;
  double best_d = std::numeric_limits<double>::infinity();
  for (int c = 0; c < num_pos_codes; ++c) {
    const double v = value(c);
    if (std::isnan(v)) continue;
    const double d = std::fabs(a - v);
    if (d < best_d || (d == best_d && (c & 1) == 0)) {
      best = c;
      best_d = d;
    }
  }
  // Saturation: beyond the largest magnitude the nearest is the largest, which the search finds.
  return std::signbit(x) ? (best | sign_bit) : best;
}

inline int e2m1_encode(double x) { return rne_encode(x, 8, 8, e2m1_value); }
inline int e4m3_encode(double x) { return rne_encode(x, 127, 0x80, e4m3_value); }

// Smallest E with amax <= max_code * 2^E, clamped to [-127, 127]; the MX scale rule.
inline int scale_exponent(double amax, double max_code) {
  if (amax == 0) return -127;
  int E = -400;
  while (std::ldexp(max_code, E) < amax) ++E;
  return E < -127 ? -127 : (E > 127 ? 127 : E);
}

// One MX block quantized in double: writes the scale byte and element codes.
template <class Encode>
void quantize_block(const float* x, double max_code, Encode encode, uint8_t* scale_byte,
                    int* codes) {
  double amax = 0;
  for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(static_cast<double>(x[i])));
  const int E = scale_exponent(amax, max_code);
  *scale_byte = static_cast<uint8_t>(E + 127);
  for (int i = 0; i < 32; ++i) codes[i] = encode(std::ldexp(static_cast<double>(x[i]), -E));
}

// SiTU-GLU in double (KIMI_K3.md): beta * tanh(g / beta) * sigmoid(g) * lbeta * tanh(u / lbeta),
// no clamp and no +1; the one formula every SiTU test (CPU codec, fp64 experts, GPU epilogue)
// holds the library to.
inline double situ_double(double g, double u, double beta, double lbeta) {
  return beta * std::tanh(g / beta) / (1.0 + std::exp(-g)) * lbeta * std::tanh(u / lbeta);
}

}  // namespace oracle
