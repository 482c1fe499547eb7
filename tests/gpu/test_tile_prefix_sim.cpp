// The grouped GEMMs' tile prefix (src/cuda/sm90/tile_prefix.cuh) run on the CPU by
// tests/gpu/block_sim.h (label cpu): build_tile_prefix_from_ids, the tile list the decode kernels
// find from the caller's top-k ids before pdl::wait() (decode_gemm.h, DecodeSpec; on by default
// where the small-GEMM2 rule holds), must give the sPrefix and sSpan that build_tile_prefix gives
// from the grouping's offsets, and both what a host loop gives. The GPU tests (Spec/
// Sm90DecodeSplitK.*, test_gpu_moe_decode_spec) check the compiled kernels bit for bit.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "block_sim.h"  // first: the intrinsics the device header calls
#include "sm90/tile_prefix.cuh"

namespace {

struct Params {  // what the builders read of the kernels' KernelArgs
  const int32_t* offsets;
  int num_experts;
  int max_rows;
};

constexpr int kThreads = 128, kMaxE = 1024, kBN = 16;

struct Case {
  int E, expert_start, total_experts, pairs, m_tiles;
  double local_share;  // chance that an id is one of this rank's experts
};

void check_case(const Case& c, unsigned seed) {
  SCOPED_TRACE(::testing::Message() << "E=" << c.E << " start=" << c.expert_start << " pairs="
                                    << c.pairs << " m_tiles=" << c.m_tiles << " seed=" << seed);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<int32_t> ids(c.pairs);
  for (auto& id : ids) {
    if (u(gen) < c.local_share) {
      id = c.expert_start + static_cast<int>(u(gen) * c.E);  // a local expert
    } else {                                                 // -1, or another rank's expert
      const int r = static_cast<int>(u(gen) * (c.total_experts + 1)) - 1;
      id = r >= c.expert_start && r < c.expert_start + c.E ? -1 : r;
    }
  }
  // The grouping's offsets and the expected prefix / spans, by host loops.
  std::vector<int32_t> rows(c.E, 0), off(c.E + 1, 0);
  for (int32_t id : ids)
    if (id >= c.expert_start && id < c.expert_start + c.E) ++rows[id - c.expert_start];
  for (int e = 0; e < c.E; ++e) off[e + 1] = off[e] + rows[e];
  std::vector<int> want_prefix(c.E + 1, 0);
  std::vector<uint32_t> want_span(c.E);
  for (int e = 0; e < c.E; ++e) {
    want_prefix[e + 1] = want_prefix[e] + (rows[e] + kBN - 1) / kBN * c.m_tiles;
    want_span[e] = static_cast<uint32_t>(off[e]) | static_cast<uint32_t>(rows[e]) << 16;
  }

  const Params p{off.data(), c.E, c.pairs};
  std::vector<int> prefix[2];
  std::vector<uint32_t> span[2];
  for (int way = 0; way < 2; ++way) {
    prefix[way].assign(c.E + 1, -7);
    span[way].assign(c.E, 0xDEADBEEFu);
    std::vector<int> warp_sums(kThreads / 32);
    block_sim::run_block(kThreads, [&] {
      if (way == 0) {
        mxmoe::sm90::build_tile_prefix<kBN, kThreads>(p, c.m_tiles, prefix[0].data(),
                                                      warp_sums.data(), span[0].data());
      } else {
        mxmoe::sm90::build_tile_prefix_from_ids<kBN, kThreads, kMaxE>(
            p, ids.data(), c.pairs, c.expert_start, c.m_tiles, prefix[1].data(), warp_sums.data(),
            span[1].data());
      }
    });
  }
  EXPECT_EQ(prefix[0], want_prefix) << "from the offsets";
  EXPECT_EQ(span[0], want_span) << "from the offsets";
  EXPECT_EQ(prefix[1], want_prefix) << "from the ids";
  EXPECT_EQ(span[1], want_span) << "from the ids";
}

TEST(TilePrefixSim, Ep16DecodeSizes) {  // 56 of 896 experts, one pick in 16 local
  check_case({56, 112, 896, 16, 96, 1.0 / 16}, 1);
  check_case({56, 112, 896, 64, 96, 1.0 / 16}, 2);
  check_case({56, 0, 896, 1024, 56, 1.0 / 16}, 3);
}
TEST(TilePrefixSim, Tp8Ep4DecodeSizes) {  // 224 of 896, a quarter of the picks local
  check_case({224, 448, 896, 16, 112, 0.25}, 4);
  check_case({224, 672, 896, 512, 112, 0.25}, 5);
}
TEST(TilePrefixSim, FullLayerAndCrowdedExperts) {
  check_case({896, 0, 896, 4096, 1, 1.0}, 6);   // every id local, several per thread chunk
  check_case({3, 5, 8, 900, 2, 0.9}, 7);        // few experts, many rows each (multi-tile)
  check_case({1, 0, 1, 1, 4, 1.0}, 8);          // one expert, one row
  check_case({1000, 24, 1024, 64, 3, 0.5}, 9);  // more experts than threads x segments / 2
}
TEST(TilePrefixSim, NoLocalPairs) { check_case({56, 112, 896, 32, 96, 0.0}, 10); }

}  // namespace
