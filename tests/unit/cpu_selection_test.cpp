// The CPU backend's selection pieces (cpu/selection.hpp) against plain definitions: the k-th of a
// list, the samples' sort, and min_p's cut, which brackets the oracle's test for any sum.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>

#include "backend.hpp"
#include "cpu/input_draw.hpp"
#include "cpu/selection.hpp"
#include "unit/backwards_chunks.hpp"
#include "unit/cpu_property.hpp"

namespace lastmile_test {
namespace {

// The k-th largest of a list, duplicates counted, against a sort, with repeats, -inf, and -0 /
// +0 (equal; a zero comes back as +0): short lists (k to k + 40, top-k's listing by group
// maxima) and lists to 3000 with any k, both by the counting passes; and past their 65536, by
// radix where the keys are an eighth of the list (a worker's), by selection in keys that hold it.
TEST(CpuSelection, KthListedIsTheSortedListsKth) {
  namespace sel = lastmile::detail::cpu_selection;
  std::mt19937_64 rng(22);
  Scratch a(oracle());  // room for a whole list of `count`
  // kth_listed of the list v against a sort of it; the list itself left as it was.
  auto check_list = [&](const std::vector<float>& v, size_t k, bool whole_keys, int trial) {
    const size_t count = v.size();
    SortScratch scratch = a.get(count);
    if (whole_keys) {
      a.keys.assign(count, 0);
      scratch.keys = a.keys;
    }
    std::copy(v.begin(), v.end(), scratch.values.begin());
    std::vector<float> sorted = v;
    std::sort(sorted.begin(), sorted.end(), std::greater<float>());
    const float kth = sel::kth_listed(scratch, count, k);
    SCOPED_TRACE(testing::Message() << "trial " << trial << " k " << k << " count " << count);
    ASSERT_EQ(kth, sorted[k - 1]);
    if (kth == 0.0f) {
      ASSERT_FALSE(std::signbit(kth));
    }
    ASSERT_TRUE(std::equal(v.begin(), v.end(), scratch.values.begin()));
  };
  // A random list of `count`: -inf, zeros of both signs, repeats and N(0, 3) values.
  auto check = [&](size_t count, size_t k, bool whole_keys, int trial) {
    std::vector<float> v(count);
    for (float& x : v) {
      switch (rng() % 5) {
        case 0:
          x = -kInf;
          break;
        case 1:
          x = rng() % 2 ? 0.0f : -0.0f;
          break;
        case 2:
          x = static_cast<float>(rng() % 4);  // repeats
          break;
        default:
          x = std::normal_distribution<float>(0.0f, 3.0f)(rng);
      }
    }
    check_list(v, k, whole_keys, trial);
  };
  for (int trial = 0; trial < 2000; ++trial) {
    const size_t k = 1 + rng() % 60;
    check(k + rng() % 41, k, false, trial);
  }
  for (int trial = 0; trial < 200; ++trial) {
    const size_t count = 1 + rng() % 3000;
    check(count, trial % 2 == 0 ? 1 + rng() % count : count - trial % 3 % count, false, trial);
  }
  // The counting's shortcuts (k = 1, k = count, a range that fixes the top bits, exactly k at a
  // pass) on lists made to reach them: one octave of positive or of negative values, denormals
  // beside zeros, zeros and -infs alone, and the extremes.
  for (int trial = 0; trial < 500; ++trial) {
    std::vector<float> v(1 + rng() % 300);
    for (float& x : v) {
      switch (trial % 5) {
        case 0:  // one octave: the top bits fixed
          x = std::uniform_real_distribution<float>(8.0f, 16.0f)(rng);
          break;
        case 1:  // negative: orderable() flips the bits
          x = std::uniform_real_distribution<float>(-16.0f, -8.0f)(rng);
          break;
        case 2:  // denormals of both signs beside zeros
          x = std::bit_cast<float>(static_cast<uint32_t>(rng() % 64) |
                                   (rng() % 2 ? 0x80000000u : 0u));
          break;
        case 3:
          x = rng() % 2 ? -0.0f : (rng() % 2 ? 0.0f : -kInf);
          break;
        default:  // the extremes
          x = rng() % 3 == 0 ? kInf : (rng() % 2 ? -kInf : std::numeric_limits<float>::max());
      }
    }
    const size_t k = trial % 7 == 0 ? 1 : trial % 7 == 1 ? v.size() : 1 + rng() % v.size();
    check_list(v, k, false, trial);
  }
  check_list({-0.0f, -0.0f, -kInf}, 1, false, -3);
  check_list({-kInf, -0.0f, -0.0f}, 2, false, -4);
  check_list({-kInf, -kInf}, 2, false, -5);
  check_list({-0.0f, -0.0f, -0.0f}, 1, false, -6);  // the max and the min, both -0: +0
  check_list({-0.0f, -0.0f, -0.0f}, 3, false, -7);
  for (const size_t count : {size_t{65536}, size_t{65537}, size_t{70001}})
    for (const size_t k : {size_t{1}, size_t{50}, count / 2, count}) {
      check(count, k, false, -1);  // by radix past 65536 (keys an eighth of the list)
      check(count, k, true, -2);   // by selection in the keys
    }
}

// Top-p's band guess sorts its 512 samples by radix: the order of std::sort, for probabilities and
// for any NaN-free floats (negatives, -inf, denormals, repeats; -0 and +0 compare equal).
TEST(CpuSelection, SortSamplesIsAnAscendingSort) {
  std::mt19937_64 rng(18);
  for (int trial = 0; trial < 200; ++trial) {
    const size_t n = 1 + rng() % 512;
    std::vector<float> v(n);
    for (float& x : v) {
      switch (rng() % 6) {
        case 0:
          x = std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0x7f7fffffu);  // any positive
          break;
        case 1:
          x = -std::bit_cast<float>(static_cast<uint32_t>(rng()) & 0x7f7fffffu);
          break;
        case 2:
          x = std::uniform_real_distribution<float>(0.0f, 1e-3f)(rng);  // probabilities
          break;
        case 3:
          x = trial % 2 ? 0.0f : -0.0f;
          break;
        case 4:
          x = -kInf;
          break;
        default:
          x = std::bit_cast<float>(static_cast<uint32_t>(rng() % 64));  // denormals
      }
    }
    std::vector<float> expected = v;
    std::sort(expected.begin(), expected.end());
    lastmile::detail::cpu_selection::sort_samples(v.data(), n);
    EXPECT_EQ(v, expected) << "trial " << trial;
  }
}

// min_p_cut brackets the oracle's min_p test for every sum a row can have: its smallest kept logit
// (smallest_kept with inv_sum anywhere in [2^-21, 1], the ends included) lies in [masked_below,
// kept_from]. Maxima from -1e4 to 1e4 (0 a third of the time: the finest logits), min_p from
// 2^-100 to 1. The sum must move the test inside the bracket on some trials, or this shows nothing.
TEST(CpuSelection, MinPCutBracketsTheOraclesTestForAnySum) {
  using lastmile::detail::cpu_selection::kSmallestDecidedMinP;
  std::mt19937_64 rng(19);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  int moved = 0;
  for (int trial = 0; trial < 20000; ++trial) {
    const float max = trial % 3 == 0   ? 0.0f
                      : trial % 3 == 1 ? 80.0f * unit(rng) - 40.0f
                                       : 2e4f * unit(rng) - 1e4f;
    const float min_p = trial % 11 == 0   ? kSmallestDecidedMinP
                        : trial % 11 == 1 ? 1.0f
                        : trial % 2 == 0  ? 0.3f + 0.7f * unit(rng)
                                          : std::exp2(-100.0f * unit(rng));
    const float inv_sum = trial % 7 == 0   ? 0x1p-21f
                          : trial % 7 == 1 ? 1.0f
                                           : std::exp2(-21.0f * unit(rng));
    const auto cut = lastmile::detail::cpu_selection::min_p_cut(max, min_p);
    const float kept =
        lastmile::detail::cpu_selection::smallest_kept(max, inv_sum, min_p * inv_sum);
    ASSERT_LE(cut.masked_below, kept) << "max " << max << " min_p " << min_p << " inv " << inv_sum;
    ASSERT_LE(kept, cut.kept_from) << "max " << max << " min_p " << min_p << " inv " << inv_sum;
    moved += kept != cut.kept_from;
  }
  EXPECT_GT(moved, 100);
}

}  // namespace
}  // namespace lastmile_test
