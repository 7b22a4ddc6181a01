// cpu::block_softmax_stats without a near list or band takes its pipelined loop (block b's Exp
// beside block b + 1's read); with a near list, the loop that reads and sums each block in turn.
// Both must give the same bits, block maxima and sums, for every source type, a divided row, a
// short last block and a block of -inf only; and the pipelined read must still write the row,
// read group maxima when asked, and refuse NaN / +inf wherever they sit.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::DType;
namespace cpu = lastmile::cpu;

constexpr size_t kBlock = 2048;
constexpr float kInf = std::numeric_limits<float>::infinity();

// Puts `value` at entry i of a caller's row of `dtype` (bf16 and f16 by their bit patterns).
void put(std::vector<unsigned char>& row, DType dtype, size_t i, float value) {
  if (dtype == DType::f32) {
    std::memcpy(row.data() + i * 4, &value, 4);
    return;
  }
  const auto half = dtype == DType::bf16
                        ? static_cast<uint16_t>(std::bit_cast<uint32_t>(value) >> 16)
                        : f16_bits(value);
  std::memcpy(row.data() + i * 2, &half, 2);
}

// A caller's row of n logits of `dtype` (bytes), block 1 all -inf when there is one.
std::vector<unsigned char> caller_row(DType dtype, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  std::vector<unsigned char> bytes(n * (dtype == DType::f32 ? 4 : 2));
  for (size_t i = 0; i < n; ++i) put(bytes, dtype, i, i / kBlock == 1 ? -kInf : logit(rng));
  return bytes;
}

struct Stats {
  bool ok = false;
  std::vector<float> block_max;
  std::vector<double> block_sums;
};

Stats stats_of(const void* src, DType dtype, size_t n, float t, bool listing,
               cpu::ConvertedRow out = {}, cpu::GroupMaxima groups = {}) {
  Stats s;
  const size_t blocks = (n + kBlock - 1) / kBlock;
  s.block_max.assign(blocks, 0.0f);
  s.block_sums.assign(blocks, 0.0);
  std::vector<float> buffer(kBlock + 64), values(n + cpu::kCompressSlack);
  std::vector<int32_t> ids(n + cpu::kCompressSlack);
  cpu::NearMax near;
  if (listing) {
    near.below_max = -1.0f;
    near.ids = ids.data();
    near.values = values.data();
  }
  s.ok = cpu::block_softmax_stats(src, dtype, n, t, kBlock, buffer.data(), s.block_max.data(),
                                  s.block_sums.data(), &near, out, nullptr, groups);
  return s;
}

// Whether the block-by-block loop with a band (top-p's on a flat row) accepts the row.
bool banded_ok(const void* src, DType dtype, size_t n, float t) {
  const size_t blocks = (n + kBlock - 1) / kBlock;
  std::vector<float> buffer(kBlock + 64), block_max(blocks);
  std::vector<double> block_sums(blocks), below(blocks);
  std::vector<uint8_t> bits((n + 7) / 8);
  cpu::ValueBand band{-1.0f, 2.0f, bits.data(), below.data()};
  cpu::NearMax none;
  return cpu::block_softmax_stats(src, dtype, n, t, kBlock, buffer.data(), block_max.data(),
                                  block_sums.data(), &none, {}, &band);
}

TEST(CpuSoftmaxStats, PipelinedPassHasTheBitsOfTheBlockByBlockPass) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const size_t n : {size_t{1}, size_t{100}, kBlock, 3 * kBlock + 77, 5 * kBlock}) {
      const auto row = caller_row(dtype, n, n);
      for (const float t : {1.0f, 0.7f}) {
        const Stats pipelined = stats_of(row.data(), dtype, n, t, false);
        const Stats listing = stats_of(row.data(), dtype, n, t, true);
        ASSERT_TRUE(pipelined.ok && listing.ok);
        for (size_t b = 0; b < pipelined.block_max.size(); ++b) {
          EXPECT_EQ(pipelined.block_max[b], listing.block_max[b]) << n << " block " << b;
          EXPECT_EQ(pipelined.block_sums[b], listing.block_sums[b]) << n << " block " << b;
        }
        if (n > kBlock) {
          EXPECT_EQ(pipelined.block_sums[1], 0.0) << "the -inf block";
        }
      }
    }
  }
}

// A row whose blocks the statistics at t = 1 sum two ways (DirectExpFits): block 0 as
// caller_row's, block 1 all -inf, block 2 lifted by 100 (max over 80; and one entry 89, whose
// direct term is NaN on AVX-512: a valid block that a check of its direct sum would refuse),
// block 3 lowered by 150 (max under -40), block 4 from -86 to 80 (both ends of the direct range),
// then a short block.
std::vector<unsigned char> wide_row(DType dtype, uint64_t seed) {
  const size_t n = 5 * kBlock + 77;
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  std::uniform_real_distribution<float> spread(-86.0f, 80.0f);
  std::vector<unsigned char> bytes(n * (dtype == DType::f32 ? 4 : 2));
  for (size_t i = 0; i < n; ++i) {
    const size_t block = i / kBlock;
    float x = logit(rng);
    if (block == 1) x = -kInf;
    if (block == 2) x = i == 2 * kBlock + 17 ? 89.0f : x + 100.0f;
    if (block == 3) x -= 150.0f;
    if (block == 4) x = i == 4 * kBlock + 9 ? 80.0f : spread(rng);
    put(bytes, dtype, i, x);
  }
  return bytes;
}

// Either loop, whichever way a block is summed, keeps the other's bits; and every block's sum of
// exp(x - max) lies within 2e-6 of the exact one (the exp's 4.1e-7 a term, 4.6e-7 summed
// directly, and the float partial sums' rounding; 5e-7 seen).
TEST(CpuSoftmaxStats, BothWaysOfSummingABlockAgreeAndHoldTheirBound) {
  const size_t n = 5 * kBlock + 77;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const auto row = wide_row(dtype, 11);
    for (const float t : {1.0f, 0.7f}) {
      const Stats pipelined = stats_of(row.data(), dtype, n, t, false);
      const Stats listing = stats_of(row.data(), dtype, n, t, true);
      ASSERT_TRUE(pipelined.ok && listing.ok);
      EXPECT_EQ(pipelined.block_max, listing.block_max);
      EXPECT_EQ(pipelined.block_sums, listing.block_sums);
      std::vector<float> x(n);  // the quotients the statistics are of
      ASSERT_EQ(cpu::load_row(row.data(), dtype, x.data(), n, t), -1);
      for (size_t b = 0; b < pipelined.block_max.size(); ++b) {
        const size_t begin = b * kBlock, end = std::min(n, begin + kBlock);
        const float max = *std::max_element(x.begin() + begin, x.begin() + end);
        EXPECT_EQ(pipelined.block_max[b], max) << "block " << b;
        if (max == -kInf) {
          EXPECT_EQ(pipelined.block_sums[b], 0.0) << "block " << b;
          continue;
        }
        double exact = 0;
        for (size_t i = begin; i < end; ++i)
          if (x[i] - max >= -86.9f) exact += std::exp(static_cast<double>(x[i]) - max);
        EXPECT_NEAR(pipelined.block_sums[b], exact, 2e-6 * exact)
            << "dtype " << static_cast<int>(dtype) << ", t " << t << ", block " << b;
      }
    }
  }
}

// A band marked on the way (top-p on a flat row): the same block maxima and sums as without it,
// the entries in [from, to] marked and no others, and each block's sum below `from` within 2e-6 of
// the exact one (beside the flush); whichever way the block is summed (wide_row), every dtype, t.
TEST(CpuSoftmaxStats, ABandKeepsTheSumsAndMarksItsEntries) {
  const size_t n = 5 * kBlock + 77, blocks = 6;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const auto row = wide_row(dtype, 12);
    for (const float t : {1.0f, 0.7f}) {
      std::vector<float> x(n);
      ASSERT_EQ(cpu::load_row(row.data(), dtype, x.data(), n, t), -1);
      std::vector<uint8_t> bits((n + 7) / 8, 0xAA);
      std::vector<double> below(blocks, -1.0);
      cpu::ValueBand band{-1.0f, 2.0f, bits.data(), below.data()};
      Stats with;
      with.block_max.assign(blocks, 0.0f);
      with.block_sums.assign(blocks, 0.0);
      std::vector<float> buffer(kBlock + 64);
      cpu::NearMax none;
      ASSERT_TRUE(cpu::block_softmax_stats(row.data(), dtype, n, t, kBlock, buffer.data(),
                                           with.block_max.data(), with.block_sums.data(), &none, {},
                                           &band));
      const Stats plain = stats_of(row.data(), dtype, n, t, false);
      EXPECT_EQ(with.block_max, plain.block_max);
      EXPECT_EQ(with.block_sums, plain.block_sums);
      for (size_t i = 0; i < n; ++i)
        ASSERT_EQ((bits[i / 8] >> (i % 8)) & 1, x[i] >= band.from && x[i] <= band.to ? 1 : 0)
            << "entry " << i << ", t " << t;
      for (size_t b = 0; b < blocks; ++b) {
        const size_t begin = b * kBlock, end = std::min(n, begin + kBlock);
        const float max = plain.block_max[b];
        double exact = 0;
        for (size_t i = begin; i < end; ++i)
          if (x[i] < band.from && x[i] - max >= -86.9f)
            exact += std::exp(static_cast<double>(x[i]) - max);
        // A direct sum keeps entries over 86.9 below the max that the relative one flushes:
        // 2048 e^-86.9 at most, nothing beside a block's own total (1 or more).
        EXPECT_NEAR(below[b], exact, 2e-6 * exact + 2048 * std::exp(-86.9))
            << "dtype " << static_cast<int>(dtype) << ", t " << t << ", block " << b;
      }
    }
  }
}

// A block of one entry x whose max DirectExpFits sums exp(x) and scales it by exp(-x) in double:
// its sum is the direct term's relative error plus 1, within 4.6e-7 of 1 (the bound checked
// offline over every float), here on a grid over the range, positive x included.
TEST(CpuSoftmaxStats, DirectTermsHoldTheirBound) {
  double worst = 0;
  for (int k = 0; k <= 120000; ++k) {
    const float x = -40.0f + static_cast<float>(k) * 0.001f;
    const Stats s = stats_of(&x, DType::f32, 1, 1.0f, false);
    ASSERT_TRUE(s.ok);
    ASSERT_NEAR(s.block_sums[0], 1.0, 4.6e-7) << "x " << x;
    worst = std::max(worst, std::fabs(s.block_sums[0] - 1.0));
  }
  EXPECT_GT(worst, 0.0);  // the direct way was taken (the relative one gives exactly 1)
}

// Group maxima asked of either loop are the quotients' maxima by groups (source_block_max's,
// divided), a short last group included, and leave the statistics' bits as they were.
TEST(CpuSoftmaxStats, GroupMaximaComeWithTheStatisticsAndChangeNone) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const size_t n :
         {size_t{1}, size_t{100}, kBlock, 3 * kBlock + 77, 5 * kBlock, 5 * kBlock + 77}) {
      // The last size: wide_row, blocks summed either way.
      const auto row = n == 5 * kBlock + 77 ? wide_row(dtype, 15) : caller_row(dtype, n, n + 3);
      for (const size_t group : {size_t{64}, size_t{256}, size_t{1024}}) {
        const size_t groups = (n + group - 1) / group;
        std::vector<float> want(groups);
        ASSERT_TRUE(cpu::source_block_max(row.data(), dtype, n, group, want.data()));
        for (const float t : {1.0f, 0.7f}) {
          for (const bool listing : {false, true}) {
            std::vector<float> got(groups + 1, 12345.0f);  // one past the groups: untouched
            const Stats plain = stats_of(row.data(), dtype, n, t, listing);
            const Stats with = stats_of(row.data(), dtype, n, t, listing, {}, {group, got.data()});
            ASSERT_TRUE(plain.ok && with.ok);
            for (size_t g = 0; g < groups; ++g)
              ASSERT_EQ(got[g], t == 1.0f ? want[g] : want[g] / t)
                  << "dtype " << static_cast<int>(dtype) << ", n " << n << ", group " << group
                  << " #" << g << ", t " << t << ", listing " << listing;
            EXPECT_EQ(got[groups], 12345.0f);
            EXPECT_EQ(plain.block_max, with.block_max);
            EXPECT_EQ(plain.block_sums, with.block_sums);
          }
        }
      }
    }
  }
}

// On AVX-512 the pipelined loop reads a bf16 block at t = 1 as 16-bit words (their max and
// their unsigned max), and gives the block to the float read where the words cannot tell: a group
// whose max is negative in a block whose max is not (block 0), entries below the exp's flush
// point beside a positive max (block 1: -87, -100, -1e4, the lowest float), a block of negative
// entries only, all above the flush point (block 2), and a block whose max is +0 beside -0 (block
// 3: +0 first, then -0 and negative entries). Either way, the block-by-block loop's bits (the
// maxima's too) and the source's group maxima, for every dtype.
TEST(CpuSoftmaxStats, BlocksTheWordsCannotTellKeepTheirBits) {
  const size_t n = 4 * kBlock;
  std::mt19937_64 rng(16);
  std::normal_distribution<float> logit(0.0f, 4.0f);
  constexpr float kFarBelow[] = {-87.0f, -100.0f, -1e4f, std::numeric_limits<float>::lowest()};
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    std::vector<unsigned char> row(n * (dtype == DType::f32 ? 4 : 2));
    for (size_t i = 0; i < n; ++i) {
      float x = logit(rng);
      if (i < 256 || i / kBlock == 2) x = -std::fabs(x) - 0.5f;
      if (i >= kBlock + 300 && i < kBlock + 304) x = kFarBelow[i - kBlock - 300];
      if (i / kBlock == 3) x = i == 3 * kBlock ? 0.0f : i % 2 == 0 ? -0.0f : -std::fabs(x) - 0.5f;
      put(row, dtype, i, x);
    }
    for (const size_t group : {size_t{64}, size_t{256}}) {
      std::vector<float> want(n / group), got(n / group);
      ASSERT_TRUE(cpu::source_block_max(row.data(), dtype, n, group, want.data()));
      const Stats pipelined = stats_of(row.data(), dtype, n, 1.0f, false, {}, {group, got.data()});
      const Stats listing = stats_of(row.data(), dtype, n, 1.0f, true);
      ASSERT_TRUE(pipelined.ok && listing.ok);
      for (size_t b = 0; b < 4; ++b)
        EXPECT_EQ(std::bit_cast<uint32_t>(pipelined.block_max[b]),
                  std::bit_cast<uint32_t>(listing.block_max[b]))
            << "dtype " << static_cast<int>(dtype) << ", block " << b;
      EXPECT_EQ(pipelined.block_sums, listing.block_sums) << "dtype " << static_cast<int>(dtype);
      EXPECT_EQ(got, want) << "dtype " << static_cast<int>(dtype) << ", group " << group;
      EXPECT_EQ(stats_of(row.data(), dtype, n, 1.0f, false).block_sums, listing.block_sums);
    }
  }
}

// sum_exp_scaled_below (a penalised top-p row's unlisted weight): within 2e-5 of the sum of
// exp(x a - reference) over the entries below `below`, in double, for every dtype, rows of
// several blocks and a short one, a < 1 and a > 1; -inf entries add nothing.
TEST(CpuSoftmaxStats, ScaledSumBelowHoldsItsBound) {
  std::mt19937_64 rng(17);
  std::normal_distribution<float> logit(0.0f, 2.5f);
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const size_t n : {size_t{77}, 5 * kBlock + 77}) {
      std::vector<unsigned char> row(n * (dtype == DType::f32 ? 4 : 2));
      for (size_t i = 0; i < n; ++i) put(row, dtype, i, i % 97 == 3 ? -kInf : logit(rng));
      std::vector<float> x(n);
      ASSERT_EQ(cpu::load_row(row.data(), dtype, x.data(), n, 1.0f), -1);
      for (const float a : {1.25f, 0.625f, 1.0f}) {
        for (const float below : {2.0f, 100.0f}) {
          const float reference = 12.0f;
          double exact = 0;
          for (size_t i = 0; i < n; ++i)
            if (x[i] < below) exact += std::exp(static_cast<double>(x[i]) * a - reference);
          const double got = cpu::sum_exp_scaled_below(row.data(), dtype, n, a, below, reference);
          EXPECT_NEAR(got, exact, 2e-5 * exact) << "dtype " << static_cast<int>(dtype) << ", n "
                                                << n << ", a " << a << ", below " << below;
        }
      }
    }
  }
}

// Rows whose short last block holds whole 32-word loads but not whole groups (96 entries against
// groups of 64 and 256), six groups of 256 (fewer than eight reduced together), or a tail: the
// pipelined loop's bits and the source's group maxima, every dtype.
TEST(CpuSoftmaxStats, ShortLastBlocksKeepTheirBitsAndGroups) {
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const size_t n : {3 * kBlock + 96, 3 * kBlock + 1536, 3 * kBlock + 77}) {
      const auto row = caller_row(dtype, n, n + 5);
      for (const size_t group : {size_t{64}, size_t{256}}) {
        const size_t groups = (n + group - 1) / group;
        std::vector<float> want(groups), got(groups);
        ASSERT_TRUE(cpu::source_block_max(row.data(), dtype, n, group, want.data()));
        const Stats pipelined =
            stats_of(row.data(), dtype, n, 1.0f, false, {}, {group, got.data()});
        const Stats listing = stats_of(row.data(), dtype, n, 1.0f, true);
        ASSERT_TRUE(pipelined.ok && listing.ok);
        EXPECT_EQ(pipelined.block_max, listing.block_max) << "n " << n << ", group " << group;
        EXPECT_EQ(pipelined.block_sums, listing.block_sums) << "n " << n << ", group " << group;
        EXPECT_EQ(got, want) << "dtype " << static_cast<int>(dtype) << ", n " << n << ", group "
                             << group;
      }
    }
  }
}

// The row written on the way is load_row_repeated's, entry for entry, penalised where seen.
// Either loop: the statistics stay those of the caller's row (not the written one), on a row of
// blocks summed either way (wide_row) too.
TEST(CpuSoftmaxStats, PipelinedPassWritesTheRepeatedRow) {
  for (const bool wide : {false, true}) {
    const size_t n = wide ? 5 * kBlock + 77 : 3 * kBlock + 77;
    const auto row = wide ? wide_row(DType::bf16, 14) : caller_row(DType::bf16, n, 7);
    std::vector<uint64_t> seen((n + 63) / 64);
    std::mt19937_64 rng(8);
    for (uint64_t& word : seen) word = rng() & rng();
    for (const float r : {1.1f, 0.9f}) {
      for (const bool listing : {false, true}) {
        std::vector<float> got(n), want(n);
        const Stats s =
            stats_of(row.data(), DType::bf16, n, 1.0f, listing, {got.data(), seen.data(), r});
        ASSERT_TRUE(s.ok);
        ASSERT_EQ(cpu::load_row_repeated(row.data(), DType::bf16, want.data(), n, seen.data(), r),
                  -1);
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want[i]))
              << "entry " << i;
        const Stats plain = stats_of(row.data(), DType::bf16, n, 1.0f, listing);
        EXPECT_EQ(s.block_max, plain.block_max) << "wide " << wide << ", listing " << listing;
        EXPECT_EQ(s.block_sums, plain.block_sums) << "wide " << wide << ", listing " << listing;
      }
    }
  }
}

// NaN or +inf in the first block, a middle one of -inf only (where a lane's max drops the NaN
// for the -inf read after it), beside the previous block's Exp, or in the short last block, and
// in blocks summed either way at t = 1; for every source type, undivided and divided, by each
// loop: the pipelined one, and the block-by-block one listing or marking a band (on AVX-512 both
// find them at t = 1 in the block sums, not by a compare on every vector). Or made by a penalty
// r < 1 on the largest float: the pass says so.
TEST(CpuSoftmaxStats, PipelinedPassRefusesNaNAndInfinityAnywhere) {
  const size_t n = 3 * kBlock + 77;
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    for (const float t : {1.0f, 0.7f}) {
      for (const size_t at : {size_t{5}, kBlock + 3, 2 * kBlock + 2047, n - 1}) {
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
          auto row = caller_row(dtype, n, 9);
          put(row, dtype, at, bad);
          EXPECT_FALSE(stats_of(row.data(), dtype, n, t, false).ok)
              << bad << " at " << at << ", t " << t << ", dtype " << static_cast<int>(dtype);
          EXPECT_FALSE(stats_of(row.data(), dtype, n, t, true).ok)
              << "listing: " << bad << " at " << at << ", t " << t;
          EXPECT_FALSE(banded_ok(row.data(), dtype, n, t))
              << "banded: " << bad << " at " << at << ", t " << t;
        }
      }
      // In wide_row's blocks summed either way (the direct sum of a block over 80 may itself be
      // NaN: not a reason to refuse, as BothWaysOfSummingABlockAgreeAndHoldTheirBound shows).
      for (const size_t at : {size_t{7}, kBlock + 5, 2 * kBlock + 9, 3 * kBlock + 1, 4 * kBlock + 3,
                              5 * kBlock + 76}) {
        for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
          auto row = wide_row(dtype, 13);
          put(row, dtype, at, bad);
          for (const bool listing : {false, true})
            EXPECT_FALSE(stats_of(row.data(), dtype, 5 * kBlock + 77, t, listing).ok)
                << bad << " at " << at << ", t " << t << ", listing " << listing;
          EXPECT_FALSE(banded_ok(row.data(), dtype, 5 * kBlock + 77, t))
              << "banded: " << bad << " at " << at << ", t " << t;
        }
      }
    }
  }
  for (const size_t at : {size_t{5}, kBlock + 3, 2 * kBlock + 2047, n - 1}) {
    auto row = caller_row(DType::f32, n, 10);
    const float largest = std::numeric_limits<float>::max();
    put(row, DType::f32, at, largest);
    std::vector<uint64_t> seen((n + 63) / 64, ~uint64_t{0});
    std::vector<float> dst(n);
    EXPECT_TRUE(stats_of(row.data(), DType::f32, n, 1.0f, false).ok);
    EXPECT_FALSE(stats_of(row.data(), DType::f32, n, 0.5f, false).ok)
        << "the quotient's +inf at " << at;
    for (const bool listing : {false, true})
      EXPECT_FALSE(
          stats_of(row.data(), DType::f32, n, 1.0f, listing, {dst.data(), seen.data(), 0.5f}).ok)
          << "the penalty's +inf at " << at << ", listing " << listing;
  }
}

}  // namespace
}  // namespace lastmile_test
