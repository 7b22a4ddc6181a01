// The logit thresholds found by bisection (cpu/selection.hpp's smallest_passing): from a guess,
// the same float as the bisection of the whole range, whatever the guess, in a few tests when the
// guess is close.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "cpu/selection.hpp"

namespace lastmile_test {
namespace {

using lastmile::detail::cpu_selection::smallest_passing;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Guesses near and far from `answer`, on either side, and the ones that carry no information.
std::vector<float> guesses_around(float answer, std::mt19937_64& rng) {
  std::vector<float> guesses = {answer, kNaN, kInf, -kInf, 0.0f, -0.0f, 1e30f, -1e30f};
  if (std::isfinite(answer)) {
    for (const int ulps : {1, 2, 3, 7, 1000}) {
      guesses.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(answer) + ulps));
      guesses.push_back(std::bit_cast<float>(std::bit_cast<uint32_t>(answer) - ulps));
    }
  }
  guesses.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));  // NaN at times
  return guesses;
}

TEST(SmallestPassing, AGuessFindsTheBisectionsFloatForTheDivisionTest) {
  std::mt19937_64 rng(5);
  std::normal_distribution<float> logit(0.0f, 10.0f);
  const std::vector<float> temperatures = {0.7f, 1.0f, 1e-5f, 3.0f, 0x1.fffffep-1f, 1e30f};
  std::vector<float> thresholds = {0.0f, -0.0f, kInf, -kInf, 1e-40f, -1e-40f, 3e38f, -3e38f};
  for (int i = 0; i < 300; ++i) thresholds.push_back(logit(rng));
  for (const float t : temperatures) {
    for (const float threshold : thresholds) {
      auto passes = [&](float v) { return v / t >= threshold; };
      const float want = smallest_passing(passes);
      for (const float guess : guesses_around(threshold * t, rng)) {
        const float got = smallest_passing(passes, guess);
        ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(want))
            << "threshold " << threshold << " t " << t << " guess " << guess;
      }
    }
  }
}

TEST(SmallestPassing, AGuessFindsTheBisectionsFloatForTheProbabilityTest) {
  std::mt19937_64 rng(6);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  for (int i = 0; i < 500; ++i) {
    const float max = 20.0f * unit(rng) - 10.0f, inv_sum = unit(rng), threshold = unit(rng);
    auto passes = [&](float v) { return !(std::exp(v - max) * inv_sum < threshold); };
    const float want = smallest_passing(passes);
    for (const float guess : guesses_around(max + std::log(threshold / inv_sum), rng))
      ASSERT_EQ(std::bit_cast<uint32_t>(smallest_passing(passes, guess)),
                std::bit_cast<uint32_t>(want))
          << "max " << max << " inv_sum " << inv_sum << " threshold " << threshold;
  }
}

TEST(SmallestPassing, ReturnsTheEndsAsTheBisectionDoes) {
  auto everything = [](float) { return true; };
  auto nothing = [](float v) { return v == kInf; };  // only +inf, which the bisection assumes
  for (const float guess : {0.0f, kInf, -kInf, kNaN, 1.0f}) {
    EXPECT_EQ(smallest_passing(everything, guess), -kInf);
    EXPECT_EQ(smallest_passing(nothing, guess), kInf);
  }
  // -0 and +0 are distinct keys: -0 >= 0 passes, so -0 is the smallest; a test -0 fails finds +0.
  EXPECT_TRUE(std::signbit(smallest_passing([](float v) { return v >= 0.0f; }, 5.0f)));
  EXPECT_FALSE(std::signbit(smallest_passing(
      [](float v) { return v > 0.0f || (v == 0.0f && !std::signbit(v)); }, -5.0f)));
}

TEST(SmallestPassing, AGuessWithinAnUlpTakesAFewTests) {
  std::mt19937_64 rng(7);
  std::normal_distribution<float> logit(0.0f, 10.0f);
  for (int i = 0; i < 200; ++i) {
    const float threshold = logit(rng), t = 0.7f;
    int tests = 0;
    auto passes = [&](float v) {
      ++tests;
      return v / t >= threshold;
    };
    const float want = smallest_passing(passes);
    EXPECT_GE(tests, 30);  // the whole range: 32 steps, less where the bracket shrinks to a key
    tests = 0;
    EXPECT_EQ(smallest_passing(passes, threshold * t), want);
    EXPECT_LE(tests, 4) << "threshold " << threshold;
  }
}

}  // namespace
}  // namespace lastmile_test
