// The CPU backend's compressing kernels (cpu/listing.cpp and cpu/probabilities.cpp with
// cpu/compress-inl.hpp) against plain loops: compress_at_least, compress_source (fp32, bf16, fp16),
// list_marked, list_between and probability_band list the same ids and values, in id order. The
// rows hold every pattern of kept lanes for 16, 8 and 4 lanes (vector m keeps lane j iff bit j of m
// is set), so each lane table's every entry is used; ctest's unit_on_<target> runs them on each
// narrower Highway target too.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <map>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"
#include "reference/float16.hpp"

namespace lastmile_test {
namespace {

using lastmile::DType;
namespace cpu = lastmile::cpu;

constexpr float kThreshold = 0.5f;

// For each of the 2^16 patterns a 16-lane vector's mask can take, 16 entries: entry j is above
// the threshold iff bit j is set (8- and 4-lane vectors see every pattern of theirs in them),
// then a tail that is not a whole vector. Kept values differ, so a wrong lane shows.
std::vector<float> every_lane_pattern() {
  std::vector<float> x;
  for (uint32_t pattern = 0; pattern < (1u << 16); pattern += 1) {
    for (uint32_t lane = 0; lane < 16; ++lane) {
      const float step = static_cast<float>(x.size() % 1024) / 1024.0f;
      x.push_back(((pattern >> lane) & 1) ? 1.0f + step : -step);
    }
  }
  for (int j = 0; j < 13; ++j) x.push_back(j % 2 ? 2.0f : 0.0f);
  return x;
}

struct Listed {
  std::vector<int32_t> ids;
  std::vector<float> values;
};

Listed listed_at_least(const std::vector<float>& x, float threshold, bool strict) {
  Listed out;
  for (size_t i = 0; i < x.size(); ++i) {
    if (strict ? x[i] > threshold : x[i] >= threshold) {
      out.ids.push_back(static_cast<int32_t>(i));
      out.values.push_back(x[i]);
    }
  }
  return out;
}

void expect_listed(const Listed& want, const std::vector<int32_t>& ids,
                   const std::vector<float>& values, size_t count) {
  ASSERT_EQ(count, want.ids.size());
  for (size_t k = 0; k < count; ++k) {
    ASSERT_EQ(ids[k], want.ids[k]) << "entry " << k;
    ASSERT_EQ(values[k], want.values[k]) << "entry " << k;
  }
}

TEST(CpuCompress, CompressAtLeastListsEveryLanePattern) {
  const std::vector<float> x = every_lane_pattern();
  for (const bool strict : {false, true}) {
    std::vector<int32_t> ids(x.size() + cpu::kCompressSlack);
    std::vector<float> values(x.size() + cpu::kCompressSlack);
    const size_t count =
        cpu::compress_at_least(x.data(), x.size(), kThreshold, strict, ids.data(), values.data());
    expect_listed(listed_at_least(x, kThreshold, strict), ids, values, count);
  }
}

// x's entries as 16-bit patterns of dtype: bf16 truncated, fp16 exactly (every entry of
// every_lane_pattern is a multiple of 2^-10 below 2 in magnitude, so binary16 holds it).
std::vector<uint16_t> as_half(const std::vector<float>& x, DType dtype) {
  std::map<float, uint16_t> f16_of;
  for (uint32_t bits = 0; bits < 0x7c00u; ++bits) {
    f16_of.emplace(lastmile::detail::f16_to_f32(static_cast<uint16_t>(bits)), bits);
    f16_of.emplace(lastmile::detail::f16_to_f32(static_cast<uint16_t>(bits | 0x8000u)),
                   bits | 0x8000u);
  }
  std::vector<uint16_t> half(x.size());
  for (size_t i = 0; i < x.size(); ++i)
    half[i] = dtype == DType::bf16 ? static_cast<uint16_t>(std::bit_cast<uint32_t>(x[i]) >> 16)
                                   : f16_of.at(x[i]);
  return half;
}

// x in dtype (as_half's patterns unless f32) and the float32 values that dtype holds.
struct RowInDtype {
  std::vector<uint16_t> half;
  std::vector<float> widened;
  const void* src;
};
RowInDtype in_dtype(const std::vector<float>& x, DType dtype) {
  RowInDtype row{{}, x, x.data()};
  if (dtype == DType::f32) return row;
  row.half = as_half(x, dtype);
  for (size_t i = 0; i < x.size(); ++i)
    row.widened[i] = dtype == DType::bf16 ? lastmile::detail::bf16_to_f32(row.half[i])
                                          : lastmile::detail::f16_to_f32(row.half[i]);
  row.src = row.half.data();
  return row;
}

TEST(CpuCompress, CompressSourceListsEveryLanePatternInEachDtype) {
  const std::vector<float> x = every_lane_pattern();
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const RowInDtype row = in_dtype(x, dtype);
    const std::vector<float>& widened = row.widened;
    const void* src = row.src;
    std::vector<int32_t> ids(x.size() + cpu::kCompressSlack);
    std::vector<float> values(x.size() + cpu::kCompressSlack);
    bool bad = true;
    const size_t count =
        cpu::compress_source(src, dtype, x.size(), kThreshold, ids.data(), values.data(), &bad);
    EXPECT_FALSE(bad);
    expect_listed(listed_at_least(widened, kThreshold, false), ids, values, count);
  }
}

// compress_source skips groups of vectors all of whose entries are below the threshold: a sparse
// row, its passing entries one in 61 (so over the row each falls in every lane of every vector of
// a group, with empty groups between), and 4099 entries (a tail). A NaN or +inf is not below, so
// one alone in an otherwise empty row keeps its group from being skipped unchecked: the list is
// bad.
TEST(CpuCompress, CompressSourceSkipsOnlyGroupsWithNothingToList) {
  std::vector<float> x(4099);
  for (size_t i = 0; i < x.size(); ++i)
    x[i] = i % 61 == 5 ? 1.0f + static_cast<float>(i) / 4096.0f : -static_cast<float>(i % 7);
  std::vector<int32_t> ids(x.size() + cpu::kCompressSlack);
  std::vector<float> values(x.size() + cpu::kCompressSlack);
  bool bad = true;
  const size_t count = cpu::compress_source(x.data(), DType::f32, x.size(), kThreshold, ids.data(),
                                            values.data(), &bad);
  EXPECT_FALSE(bad);
  expect_listed(listed_at_least(x, kThreshold, false), ids, values, count);
  for (const float poison :
       {std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    std::vector<float> y(x.size(), -1.0f);  // every other group is skipped
    y[2053] = poison;
    bad = false;
    cpu::compress_source(y.data(), DType::f32, y.size(), kThreshold, ids.data(), values.data(),
                         &bad);
    EXPECT_TRUE(bad) << poison;
  }
}

// compress_source_groups over a list of groups, both ways (few_each: appended one by one; else
// compressed): every lane pattern, in groups of 64 and of 80 (a quad and a lane tail a group on
// 16 lanes), every third group listed and the last one short; and one passing entry a group, as
// top-k's groups hold, at each position. The same ids and values as a plain loop over the groups.
TEST(CpuCompress, CompressSourceGroupsListsTheGroupsEitherWayInEachDtype) {
  const std::vector<float> patterns = every_lane_pattern();
  std::vector<float> lone_entries(64 * 200, -1.0f);  // group g passes entry g % 64 only
  for (size_t g = 0; g < 200; ++g)
    lone_entries[g * 64 + g % 64] = 1.0f + static_cast<float>(g) / 256.0f;
  const std::vector<float>& lone = lone_entries;
  for (const std::vector<float>* x : {&patterns, &lone}) {
    for (const size_t group : {size_t{64}, size_t{80}}) {
      const size_t n = x->size(), groups = (n + group - 1) / group;
      std::vector<int32_t> listed_groups;
      for (size_t g = 0; g < groups; ++g)
        if (x == &lone || g % 3 == 0 || g == groups - 1)
          listed_groups.push_back(static_cast<int32_t>(g));
      for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        const RowInDtype row = in_dtype(*x, dtype);
        Listed want;
        for (const int32_t g : listed_groups) {
          for (size_t i = g * group; i < std::min(n, (g + 1) * group); ++i) {
            if (row.widened[i] < kThreshold) continue;
            want.ids.push_back(static_cast<int32_t>(i));
            want.values.push_back(row.widened[i]);
          }
        }
        for (const bool few_each : {true, false}) {
          std::vector<int32_t> ids(n + cpu::kCompressSlack);
          std::vector<float> values(n + cpu::kCompressSlack);
          bool bad = true;
          const size_t count = cpu::compress_source_groups(
              row.src, dtype, n, group, listed_groups.data(), listed_groups.size(), kThreshold,
              few_each, ids.data(), values.data(), &bad);
          EXPECT_FALSE(bad);
          SCOPED_TRACE(::testing::Message() << "group " << group << " few_each " << few_each
                                            << " dtype " << static_cast<int>(dtype));
          expect_listed(want, ids, values, count);
        }
      }
    }
  }
}

// list_marked lists the entries a bitmap marks, each divided by t as scalar division does: the
// bitmap marks every_lane_pattern's entries above the threshold (every pattern of every lane
// count), a row of 2^20 + 13 entries leaving a last word of 13 bits and a last byte of 5, whose 3
// bits past the row are set and must not list. The bitmap holds exactly (n + 7) / 8 bytes, so a
// read past them shows under ASan.
TEST(CpuCompress, ListMarkedListsEveryLanePatternInEachDtypeDivided) {
  const std::vector<float> x = every_lane_pattern();
  std::vector<uint8_t> bits((x.size() + 7) / 8);
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] >= kThreshold) bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
  ASSERT_NE(x.size() % 8, 0u);
  bits.back() |= static_cast<uint8_t>(0xffu << (x.size() % 8));
  for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
    const RowInDtype row = in_dtype(x, dtype);
    const std::vector<float>& widened = row.widened;
    const void* src = row.src;
    for (const float t : {1.0f, 0.7f, 3.0f}) {
      Listed want;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] < kThreshold) continue;
        want.ids.push_back(static_cast<int32_t>(i));
        want.values.push_back(t == 1.0f ? widened[i] : widened[i] / t);
      }
      std::vector<int32_t> ids(x.size() + cpu::kCompressSlack);
      std::vector<float> values(x.size() + cpu::kCompressSlack);
      const size_t count =
          cpu::list_marked(src, dtype, x.size(), t, bits.data(), ids.data(), values.data());
      expect_listed(want, ids, values, count);
    }
  }
}

// Sparse and dense bitmaps over random logits, rows of every length up to three words: the same
// list as walking the bits one by one.
TEST(CpuCompress, ListMarkedMatchesABitByBitWalk) {
  std::mt19937 rng(11);
  std::normal_distribution<float> logit(0.0f, 2.0f);
  for (size_t n = 1; n <= 200; ++n) {
    for (const double density : {0.02, 0.5, 1.0}) {
      std::vector<float> x(n);
      for (float& v : x) v = logit(rng);
      std::vector<uint8_t> bits((n + 7) / 8);
      std::bernoulli_distribution marked(density);
      Listed want;
      for (size_t i = 0; i < n; ++i) {
        if (!marked(rng)) continue;
        bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        want.ids.push_back(static_cast<int32_t>(i));
        want.values.push_back(x[i] / 0.8f);
      }
      std::vector<int32_t> ids(n + cpu::kCompressSlack);
      std::vector<float> values(n + cpu::kCompressSlack);
      const size_t count =
          cpu::list_marked(x.data(), DType::f32, n, 0.8f, bits.data(), ids.data(), values.data());
      expect_listed(want, ids, values, count);
    }
  }
}

// Long rows marked sparsely (a flat band marks about 6%), densely, sparse in their first 4096
// entries and dense after and the reverse, in each dtype, divided or not, with a last partial word:
// the same list as walking the bits one by one. A limit of half the marks stops the listing: the
// count passes it, and nothing is written past the room the limit asks for.
TEST(CpuCompress, ListMarkedMatchesABitByBitWalkOnLongRowsAndStopsAtItsLimit) {
  std::mt19937 rng(17);
  struct Marking {
    double first, rest;  // densities over the first 4096 entries and after them
  };
  const Marking markings[] = {{0.01, 0.01}, {0.063, 0.063}, {0.5, 0.5}, {0.01, 0.9}, {0.9, 0.01}};
  for (const size_t n : {size_t{4096 + 13}, size_t{70001}}) {
    std::vector<float> x(n);  // multiples of 2^-10 in (-1, 1): binary16 holds them
    for (float& v : x) v = static_cast<float>(static_cast<int>(rng() % 2047) - 1023) / 1024.0f;
    for (const Marking& marking : markings) {
      std::vector<uint8_t> bits((n + 7) / 8);
      std::vector<size_t> marked;
      for (size_t i = 0; i < n; ++i) {
        if (!std::bernoulli_distribution(i < 4096 ? marking.first : marking.rest)(rng)) continue;
        bits[i / 8] |= static_cast<uint8_t>(1u << (i % 8));
        marked.push_back(i);
      }
      for (const DType dtype : {DType::f32, DType::bf16, DType::f16}) {
        const RowInDtype row = in_dtype(x, dtype);
        for (const float t : {1.0f, 0.7f}) {
          SCOPED_TRACE(testing::Message()
                       << "n " << n << " densities " << marking.first << ", " << marking.rest
                       << " dtype " << static_cast<int>(dtype) << " t " << t);
          Listed want;
          for (const size_t i : marked) {
            want.ids.push_back(static_cast<int32_t>(i));
            want.values.push_back(t == 1.0f ? row.widened[i] : row.widened[i] / t);
          }
          std::vector<int32_t> ids(n + cpu::kCompressSlack);
          std::vector<float> values(n + cpu::kCompressSlack);
          expect_listed(want, ids, values,
                        cpu::list_marked(row.src, dtype, n, t, bits.data(), ids.data(),
                                         values.data(), marked.size() + 64));
          // Room for the limit and the slack alone, as the contract asks: a listing past it
          // writes out of bounds, which the sanitizer builds catch.
          const size_t half = marked.size() / 2;
          ASSERT_GT(marked.size(), 1u);
          std::vector<int32_t> few_ids(half + cpu::kCompressSlack);
          std::vector<float> few_values(half + cpu::kCompressSlack);
          EXPECT_GT(cpu::list_marked(row.src, dtype, n, t, bits.data(), few_ids.data(),
                                     few_values.data(), half),
                    half);
        }
      }
    }
  }
}

// list_between lists the indices of the entries in [lo, hi): each vector's lanes in the range
// follow its pattern, the others lie below lo (or at -0.0, or -inf) or at or above hi, and the
// range's ends themselves are tried (lo in, hi out).
TEST(CpuCompress, ListBetweenListsEveryLanePatternAndHonoursItsLimit) {
  std::vector<float> x = every_lane_pattern();
  std::mt19937 rng(3);
  constexpr float kLo = 0.25f, kHi = 0.75f;
  for (float& v : x) {
    if (v >= kThreshold) {
      v = rng() % 4 == 0 ? kLo : 0.5f;
    } else {
      const float outside[] = {0.0f, -0.0f, 0.2499f,
                               kHi,  2.0f,  -std::numeric_limits<float>::infinity()};
      v = outside[rng() % 6];
    }
  }
  std::vector<uint32_t> want;
  for (size_t i = 0; i < x.size(); ++i)
    if (x[i] >= kLo && x[i] < kHi) want.push_back(static_cast<uint32_t>(i));
  std::vector<uint32_t> at(want.size() + cpu::kCompressSlack);
  const size_t count = cpu::list_between(x.data(), x.size(), kLo, kHi, at.data(), want.size());
  ASSERT_EQ(count, want.size());
  for (size_t k = 0; k < count; ++k) ASSERT_EQ(at[k], want[k]) << "entry " << k;
  // A limit below the count: more than `limit` returned, the first ones right, nothing written
  // past limit + kCompressSlack (at holds exactly that).
  for (const size_t limit : {size_t{0}, size_t{5}, size_t{1000}}) {
    std::vector<uint32_t> capped(limit + cpu::kCompressSlack);
    const size_t stopped = cpu::list_between(x.data(), x.size(), kLo, kHi, capped.data(), limit);
    EXPECT_GT(stopped, limit);
    for (size_t k = 0; k < std::min(stopped, capped.size()); ++k)
      ASSERT_EQ(capped[k], want[k]) << "limit " << limit << ", entry " << k;
  }
}

TEST(CpuCompress, ProbabilityBandListsEveryLanePattern) {
  // Weights in [0, 1): the band [0.25, 0.75) after scaling by inv_sum 0.5 holds the entries in
  // [0.5, 1.5) of w; each vector's band lanes follow its pattern, the rest lie below or above.
  std::vector<float> w = every_lane_pattern();
  std::mt19937 rng(7);
  // 1.5: q on hi itself, above the band.
  for (float& v : w)
    v = v >= kThreshold ? 1.0f : (rng() % 3 == 0 ? 0.25f : rng() % 2 ? 3.0f : 1.5f);
  std::vector<int32_t> ids(w.size() + cpu::kCompressSlack);
  double mass_below = 0, mass_above = 0;
  const size_t count = cpu::probability_band(w.data(), w.size(), 0.5f, 0.25f, 0.75f, ids.data(),
                                             &mass_below, &mass_above);
  std::vector<int32_t> want;
  double want_below = 0, want_above = 0;
  for (size_t i = 0; i < w.size(); ++i) {
    const float q = w[i] * 0.5f;
    if (q < 0.25f) want_below += q;
    if (q >= 0.75f) want_above += q;
    if (q >= 0.25f && q < 0.75f) want.push_back(static_cast<int32_t>(i));
  }
  ASSERT_EQ(count, want.size());
  for (size_t k = 0; k < count; ++k) ASSERT_EQ(ids[k], want[k]) << "entry " << k;
  EXPECT_DOUBLE_EQ(mass_below, want_below);  // sums of 0.125, 0.75, 1.5: exact in any order
  EXPECT_DOUBLE_EQ(mass_above, want_above);
  EXPECT_GT(want_above, 0.0);
}

// The x >= threshold (0, or 0.5 on which a fifth of the entries sit), -inf and the tail's padding
// left out (sums of 0.5: exact in any order).
TEST(CpuCompress, SumAtLeastAddsTheEntriesAtOrAboveTheThreshold) {
  for (size_t n : {0, 1, 15, 16, 17, 100, 1031}) {
    std::vector<float> x(n);
    double want = 0, want_half = 0;
    for (size_t i = 0; i < n; ++i) {
      x[i] = i % 3 == 0 ? -std::numeric_limits<float>::infinity()
                        : (i % 3 == 1 ? -1.0f : 0.5f * static_cast<float>(i % 5));
      if (x[i] >= 0.0f) want += x[i];
      if (x[i] >= 0.5f) want_half += x[i];
    }
    EXPECT_DOUBLE_EQ(cpu::sum_at_least(x.data(), n, 0.0f), want) << n;
    EXPECT_DOUBLE_EQ(cpu::sum_at_least(x.data(), n, 0.5f), want_half) << n;
  }
}

}  // namespace
}  // namespace lastmile_test
