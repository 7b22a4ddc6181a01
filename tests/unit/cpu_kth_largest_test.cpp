// cpu::kth_largest_value, the selection behind top-k's group maxima and candidates: against
// std::nth_element on every kind of value, both of its methods (the partitions up to 1024
// entries, the bit search past them), on every Highway target the unit tests run on.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#include "cpu/kernels.hpp"

namespace lastmile_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// n values of one kind: logits, few distinct values, all equal, zeros of both signs among
// others, -inf among logits, ascending, descending, or every float bit pattern short of NaN.
std::vector<float> values_of_kind(std::mt19937_64& rng, size_t n, int kind) {
  std::normal_distribution<float> logit(0.0f, 5.0f);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (kind) {
      case 0:
        x[i] = logit(rng);
        break;
      case 1:
        x[i] = static_cast<float>(rng() % 4) - 1.5f;
        break;
      case 2:
        x[i] = 3.25f;
        break;
      case 3:
        x[i] = rng() % 3 == 0 ? 0.0f : rng() % 2 == 0 ? -0.0f : logit(rng);
        break;
      case 4:
        x[i] = rng() % 4 == 0 ? -kInf : logit(rng);
        break;
      case 5:
        x[i] = static_cast<float>(i) * 0.5f - 7.0f;
        break;
      case 6:
        x[i] = 100.0f - static_cast<float>(i);
        break;
      default: {
        float v;
        do v = std::bit_cast<float>(static_cast<uint32_t>(rng()));
        while (v != v);
        x[i] = v;
      }
    }
  }
  return x;
}
constexpr int kKinds = 8;

float expected_kth(std::vector<float> x, size_t k) {
  std::nth_element(x.begin(), x.begin() + static_cast<ptrdiff_t>(k - 1), x.end(),
                   std::greater<float>());
  return x[k - 1] + 0.0f;  // -0 counts as +0, and +0 is returned
}

void expect_every_k(const std::vector<float>& x, const std::vector<size_t>& ks, int kind) {
  for (const size_t k : ks) {
    const float got = lastmile::cpu::kth_largest_value(x.data(), x.size(), k);
    ASSERT_EQ(std::bit_cast<uint32_t>(got), std::bit_cast<uint32_t>(expected_kth(x, k)))
        << "n " << x.size() << " k " << k << " kind " << kind;
  }
}

TEST(CpuKthLargest, EveryKOfShortRowsIsNthElements) {
  std::mt19937_64 rng(11);
  for (size_t n = 1; n <= 80; ++n) {
    for (int kind = 0; kind < kKinds; ++kind) {
      std::vector<size_t> ks(n);
      for (size_t k = 1; k <= n; ++k) ks[k - 1] = k;
      expect_every_k(values_of_kind(rng, n, kind), ks, kind);
    }
  }
}

TEST(CpuKthLargest, LongerRowsEitherSideOfThePartitionsLimitAreNthElements) {
  std::mt19937_64 rng(12);
  for (const size_t n : {81, 129, 500, 1000, 1023, 1024, 1025, 1100, 5000}) {
    for (int kind = 0; kind < kKinds; ++kind) {
      const std::vector<float> x = values_of_kind(rng, n, kind);
      std::vector<size_t> ks = {1, 2, n / 10 + 1, n / 2, n - 1, n};
      for (int i = 0; i < 10; ++i) ks.push_back(1 + rng() % n);
      expect_every_k(x, ks, kind);
    }
  }
}

}  // namespace
}  // namespace lastmile_test
