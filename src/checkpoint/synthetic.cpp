// synthetic.cpp: the synthetic Kimi-K3 checkpoint writer (synthetic.h has the format and values).
//
// Every value is a pure function of (seed, tensor name, element index): the generator is a
// counter-based splitmix64, so a fill callback can produce any chunk of any tensor without state,
// shards can be written in any order, and the same options give the same bytes on any host.
// Generation costs about one 64-bit hash per 8 packed bytes (and one per scale byte or BF16
// value), far below the disk's write rate, so the ~16 GB default layer streams at disk speed.
// Shard plan: each layer's groups (one per routed expert, one for the dense block tensors) are
// shuffled, then packed greedily into shards of at most shard_bytes; a group never straddles two
// shards (the real checkpoint keeps an expert's tensors together).
#include "mxmoe/synthetic.h"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "mxmoe/formats.h"
#include "mxmoe/moe_layer.h"
#include "mxmoe/safetensors.h"

namespace mxmoe {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr uint64_t kGamma = 0x9E3779B97F4A7C15ull;

// splitmix64's output function on counter x: a bijective, well-mixed hash of x.
inline uint64_t mix64(uint64_t x) {
  uint64_t z = x + kGamma;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
// The i-th value of the splitmix64 stream that starts at state s.
inline uint64_t stream(uint64_t s, uint64_t i) { return mix64(s + i * kGamma); }

uint64_t fnv1a(const std::string& s) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
  return h;
}

// Approximately N(0, 1): the sum of four 16-bit uniforms (Irwin-Hall), bounded by +-2*sqrt(3).
// Plenty for weights whose only job is to look like weights.
inline float normal(uint64_t h) {
  const float s =
      static_cast<float>((h & 0xFFFF) + ((h >> 16) & 0xFFFF) + ((h >> 32) & 0xFFFF) + (h >> 48));
  return (s / 65536.0f - 2.0f) * 1.7320508f;
}

size_t pad8(size_t n) { return (n + 7) & ~size_t(7); }

struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
  SafetensorsWriter::Fill fill;
  size_t nbytes() const {
    size_t n = dtype_size(dtype);
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    return n;
  }
};
using Group = std::vector<TensorSpec>;

class Generator {
 public:
  explicit Generator(const SyntheticOptions& o) : o_(o) {}

  uint64_t tensor_seed(const std::string& name) const {
    return mix64(o_.seed * kGamma ^ fnv1a(name));
  }

  // Uniform random bytes (every E2M1 code is a valid value).
  SafetensorsWriter::Fill packed(const std::string& name) const {
    const uint64_t s = tensor_seed(name);
    return [s](uint8_t* dst, size_t off, size_t n) {
      // Byte p is byte p % 8 (little-endian) of word p / 8; whole words take the fast path.
      size_t i = 0;
      for (; i < n && (off + i) % 8 != 0; ++i)
        dst[i] = static_cast<uint8_t>(stream(s, (off + i) / 8) >> (8 * ((off + i) % 8)));
      for (; i + 8 <= n; i += 8) {
        const uint64_t w = stream(s, (off + i) / 8);
        for (int b = 0; b < 8; ++b) dst[i + b] = static_cast<uint8_t>(w >> (8 * b));
      }
      for (; i < n; ++i)
        dst[i] = static_cast<uint8_t>(stream(s, (off + i) / 8) >> (8 * ((off + i) % 8)));
    };
  }

  // UE8M0 scales [rows, blocks]: per-row base, per-block jitter, rare wide rows.
  SafetensorsWriter::Fill scales(const std::string& name, int blocks) const {
    const uint64_t s = tensor_seed(name);
    const SyntheticOptions o = o_;
    const uint64_t wide_cut =
        static_cast<uint64_t>(std::ldexp(std::min(std::max(o.wide_row_fraction, 0.0), 1.0), 32));
    return [s, o, blocks, wide_cut](uint8_t* dst, size_t off, size_t n) {
      uint64_t cached_row = ~uint64_t(0), hr = 0;
      for (size_t i = 0; i < n; ++i) {
        const size_t p = off + i;
        const uint64_t r = p / blocks, j = p % blocks;
        if (r != cached_row) {
          cached_row = r;
          hr = stream(s, 2 * r);  // even counters: rows; odd: blocks
        }
        const int base = kUe8m0Bias + o.scale_base_offset +
                         static_cast<int>(hr % (2 * o.scale_row_jitter + 1)) - o.scale_row_jitter;
        const bool wide = (hr >> 32) < wide_cut;
        int e;
        if (wide && j == (hr >> 8) % blocks) {
          e = base - o.wide_row_spread;
        } else {
          const uint64_t hb = stream(s ^ mix64(r), 2 * j + 1);
          e = base + static_cast<int>(hb % (2 * o.scale_jitter + 1)) - o.scale_jitter;
        }
        dst[i] = static_cast<uint8_t>(std::min(std::max(e, 0), 254));
      }
    };
  }

  // BF16 values mean + stddev * N(0, 1).
  SafetensorsWriter::Fill bf16(const std::string& name, float mean, float stddev) const {
    const uint64_t s = tensor_seed(name);
    return [s, mean, stddev](uint8_t* dst, size_t off, size_t n) {
      auto value = [&](size_t e) { return float_to_bf16(mean + stddev * normal(stream(s, e))); };
      // Any chunking works: a chunk may start or end in the middle of an element.
      size_t i = 0;
      if (n > 0 && off % 2 != 0) {
        dst[0] = static_cast<uint8_t>(value(off / 2) >> 8);
        i = 1;
      }
      for (; i + 2 <= n; i += 2) {
        const uint16_t b = value((off + i) / 2);
        dst[i] = static_cast<uint8_t>(b);  // little-endian
        dst[i + 1] = static_cast<uint8_t>(b >> 8);
      }
      if (i < n) dst[i] = static_cast<uint8_t>(value((off + i) / 2));
    };
  }

  SafetensorsWriter::Fill f32(const std::string& name, float stddev) const {
    const uint64_t s = tensor_seed(name);
    return [s, stddev](uint8_t* dst, size_t off, size_t n) {
      for (size_t i = 0; i < n; ++i) {
        const size_t p = off + i;
        const uint32_t b = float_bits(stddev * normal(stream(s, p / 4)));
        dst[i] = static_cast<uint8_t>(b >> (8 * (p % 4)));  // little-endian
      }
    };
  }

  Group expert(int layer, int e) const {
    const ModelConfig& c = o_.cfg;
    const int64_t H = c.routed_expert_hidden_size, I = c.moe_intermediate_size;
    const std::string x = moe_prefix(layer) + "experts." + std::to_string(e) + ".";
    Group g;
    auto add = [&](const std::string& w, int64_t rows, int64_t k) {
      const std::string p = x + w + ".weight_packed", s = x + w + ".weight_scale";
      g.push_back({p, DType::kU8, {rows, k / 2}, packed(p)});
      g.push_back({s, DType::kU8, {rows, k / 32}, scales(s, static_cast<int>(k / 32))});
    };
    add("w1", I, H);
    add("w2", H, I);
    add("w3", I, H);
    return g;
  }

  Group block(int layer) const {
    const ModelConfig& c = o_.cfg;
    const int64_t D = c.hidden_size, H = c.routed_expert_hidden_size, E = c.num_experts,
                  Is = c.shared_intermediate_size();
    const std::string x = moe_prefix(layer);
    Group g;
    auto dense = [&](const std::string& n, int64_t rows, int64_t cols) {
      // N(0, 1/sqrt(fan_in)): keeps each projection's output at the scale of its input.
      g.push_back({x + n,
                   DType::kBF16,
                   {rows, cols},
                   bf16(x + n, 0.0f, 1.0f / std::sqrt(static_cast<float>(cols)))});
    };
    dense("gate.weight", E, D);
    g.push_back({x + "gate.e_score_correction_bias",
                 DType::kF32,
                 {E},
                 f32(x + "gate.e_score_correction_bias", 0.01f)});
    dense("routed_expert_down_proj.weight", H, D);
    dense("routed_expert_up_proj.weight", D, H);
    if (c.latent_moe_use_norm)
      g.push_back({x + "routed_expert_norm.weight",
                   DType::kBF16,
                   {H},
                   bf16(x + "routed_expert_norm.weight", 1.0f, 0.05f)});
    if (Is > 0) {
      dense("shared_experts.gate_proj.weight", Is, D);
      dense("shared_experts.up_proj.weight", Is, D);
      dense("shared_experts.down_proj.weight", D, Is);
    }
    return g;
  }

 private:
  const SyntheticOptions& o_;
};

std::string shard_name(size_t i, size_t n) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, n);
  return buf;
}

void write_text(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    out.flush();
    if (!out) throw Error(path.string() + ": write failed");
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  if (ec) throw Error(path.string() + ": cannot rename: " + ec.message());
}

void check_options(const SyntheticOptions& o) {
  const std::string w = "synthetic checkpoint options";
  if (o.out_dir.empty()) throw Error(w + ": empty output directory");
  if (o.num_layers < 1) throw Error(w + ": num_layers = " + std::to_string(o.num_layers) + " < 1");
  if (o.shard_bytes == 0) throw Error(w + ": shard_bytes = 0");
  if (o.scale_row_jitter < 0 || o.scale_jitter < 0 || o.wide_row_spread < 0)
    throw Error(w + ": scale jitters and wide_row_spread must be >= 0");
  if (!(o.wide_row_fraction >= 0.0 && o.wide_row_fraction <= 1.0))
    throw Error(w + ": wide_row_fraction must be in [0, 1]");
  if (std::abs(o.scale_base_offset) > 100)
    throw Error(w + ": scale_base_offset = " + std::to_string(o.scale_base_offset) +
                " is outside [-100, 100]");
}

}  // namespace

uint64_t write_synthetic_checkpoint(const SyntheticOptions& opts_in) {
  check_options(opts_in);
  SyntheticOptions o = opts_in;
  o.cfg.num_hidden_layers = o.cfg.first_k_dense_replace + o.num_layers;
  o.cfg.validate("synthetic checkpoint config");
  std::error_code ec;
  fs::create_directories(o.out_dir, ec);
  if (ec || !fs::is_directory(o.out_dir))
    throw Error(o.out_dir + ": cannot create the output directory" +
                (ec ? ": " + ec.message() : std::string()));

  const Generator gen(o);
  // Plan: per layer, the block group and every expert group in a seeded shuffled order.
  std::vector<std::vector<Group>> shards(1);
  std::vector<size_t> shard_size(1, 0);
  for (int layer = o.cfg.first_k_dense_replace; layer < o.cfg.num_hidden_layers; ++layer) {
    std::vector<int> order(o.cfg.num_experts + 1);  // -1 stands for the dense block group
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i) - 1;
    const uint64_t ss = mix64(o.seed ^ (0x5EED0000ull + static_cast<uint64_t>(layer)));
    for (size_t i = order.size() - 1; i > 0; --i)
      std::swap(order[i], order[stream(ss, i) % (i + 1)]);
    for (int id : order) {
      Group g = id < 0 ? gen.block(layer) : gen.expert(layer, id);
      size_t bytes = 0;
      for (const TensorSpec& t : g) bytes = pad8(bytes) + t.nbytes();
      if (shard_size.back() > 0 && shard_size.back() + bytes > o.shard_bytes) {
        shards.emplace_back();
        shard_size.push_back(0);
      }
      shard_size.back() = pad8(shard_size.back()) + bytes;
      shards.back().push_back(std::move(g));
    }
  }

  json weight_map = json::object();
  uint64_t total = 0;
  const auto t0 = std::chrono::steady_clock::now();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string name = shard_name(i, shards.size());
    SafetensorsWriter w;
    w.set_metadata("format", "pt");
    for (const Group& g : shards[i]) {
      for (const TensorSpec& t : g) {
        w.add(t.name, t.dtype, t.shape, t.fill);
        weight_map[t.name] = name;
        total += t.nbytes();
      }
    }
    const auto ts = std::chrono::steady_clock::now();
    w.write((fs::path(o.out_dir) / name).string());
    if (o.progress) {
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - ts).count();
      std::fprintf(stderr,
                   "mxmoe gen: wrote %s (%.2f GB, %zu tensor groups) in %.1f s, %.2f GB/s\n",
                   name.c_str(), w.data_bytes() / 1e9, shards[i].size(), s,
                   w.data_bytes() / 1e9 / std::max(s, 1e-9));
    }
  }
  json index = {{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}};
  write_text(fs::path(o.out_dir) / "model.safetensors.index.json", index.dump(2) + "\n");
  write_text(fs::path(o.out_dir) / "config.json", config_to_json(o.cfg));
  if (o.progress) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr,
                 "mxmoe gen: %s: %d MoE layer(s) x %d experts, %zu shard(s), %.2f GB in %.1f s\n",
                 o.out_dir.c_str(), o.num_layers, o.cfg.num_experts, shards.size(), total / 1e9, s);
  }
  return total;
}

}  // namespace mxmoe
