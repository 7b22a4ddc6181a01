// The CPU backend's argmax kernels (cpu/argmax.cpp): row_argmax and argmax_checked return the
// lowest index of the largest value wherever its copies sit. The pass keeps several (value,
// index) pairs a lane, each taking its own vectors, then the whole vectors left over, then a
// scalar tail: every pair of positions of two equal maxima is tried over rows that end in each of
// those parts. ctest's unit_on_<target> runs them on each narrower Highway target too.
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"

namespace lastmile_test {
namespace {

namespace cpu = lastmile::cpu;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows of 4 * 16 * 2 + 16 * 3 + 13 entries (two rounds of four 16-lane vectors, three vectors
// left over, a tail of 13; on narrower targets more rounds), then one of each round's length.
const size_t kSizes[] = {64 * 2 + 16 * 3 + 13, 64, 64 * 3, 1, 17};

TEST(CpuArgmax, EveryPairOfEqualMaximaGivesTheFirst) {
  std::mt19937 rng(5);
  std::normal_distribution<float> logit(0.0f, 1.0f);
  for (const size_t n : kSizes) {
    std::vector<float> x(n);
    for (float& v : x) v = logit(rng);
    for (size_t first = 0; first < n; ++first) {
      for (size_t second = first; second < n; ++second) {
        std::vector<float> y = x;
        y[first] = 8.0f;
        y[second] = 8.0f;
        int64_t bad = 7;
        ASSERT_EQ(cpu::row_argmax(y.data(), n), static_cast<int64_t>(first))
            << "n " << n << ", maxima at " << first << " and " << second;
        ASSERT_EQ(cpu::argmax_checked(y.data(), n, &bad), static_cast<int64_t>(first))
            << "n " << n << ", maxima at " << first << " and " << second;
        ASSERT_EQ(bad, -1);
      }
    }
  }
}

// Rows longer than the prefetch's reach (1024 entries) first run rounds that prefetch, then the
// same rounds without: the first of two equal maxima at every position of such a row, the second
// at a random later one (or none), and in each part of the pass.
TEST(CpuArgmax, TheFirstOfTwoEqualMaximaInARowThatPrefetches) {
  std::mt19937 rng(9);
  std::normal_distribution<float> logit(0.0f, 1.0f);
  const size_t n = 1024 + 64 * 2 + 16 * 3 + 13;
  std::vector<float> x(n);
  for (float& v : x) v = logit(rng);
  for (size_t first = 0; first < n; ++first) {
    std::vector<float> y = x;
    y[first] = 8.0f;
    const size_t second = first + rng() % (n - first);
    y[second] = 8.0f;
    int64_t bad = 7;
    ASSERT_EQ(cpu::row_argmax(y.data(), n), static_cast<int64_t>(first))
        << "maxima at " << first << " and " << second;
    ASSERT_EQ(cpu::argmax_checked(y.data(), n, &bad), static_cast<int64_t>(first))
        << "maxima at " << first << " and " << second;
    ASSERT_EQ(bad, -1);
  }
}

// A maximum of -inf (every entry -inf) gives index 0; one finite entry anywhere wins; a NaN or
// +inf anywhere is reported by argmax_checked at its index.
TEST(CpuArgmax, AllNegativeInfinityGivesZeroAndBadValuesAreFound) {
  for (const size_t n : kSizes) {
    std::vector<float> x(n, -kInf);
    EXPECT_EQ(cpu::row_argmax(x.data(), n), 0);
    for (size_t at = 0; at < n; ++at) {
      std::vector<float> y = x;
      y[at] = -1e30f;
      ASSERT_EQ(cpu::row_argmax(y.data(), n), static_cast<int64_t>(at)) << "n " << n;
      for (const float poison : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
        y = x;
        y[at] = poison;
        int64_t bad = -1;
        cpu::argmax_checked(y.data(), n, &bad);
        ASSERT_EQ(bad, static_cast<int64_t>(at)) << "n " << n << ", " << poison;
      }
    }
  }
}

}  // namespace
}  // namespace lastmile_test
