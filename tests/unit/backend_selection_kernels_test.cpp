// Every backend's selection kernels and draw (src/backend.hpp) at awkward sizes, on the reference
// and the CPU backend (fixture: backend_kernels.hpp): min-p, top-k (ties at the k-th), top-p (and
// after top-k's renormalisation), the draw over listed survivors and the whole row, its inverse
// CDF, and the penalties.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "backend.hpp"
#include "unit/backend_kernels.hpp"
#include "unit/backwards_chunks.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

TEST_P(BackendKernels, MinPKeepsTokensWithRatioAtLeastMinP) {
  std::vector<float> x = logits(5);
  const float max = *std::max_element(x.begin(), x.end());
  const float min_p = 0.3f;
  std::vector<float> out = x;
  backend().apply_min_p(out.data(), n(), min_p);
  for (int64_t i = 0; i < n(); ++i) {
    const double ratio = std::exp(static_cast<double>(x[i]) - max);  // p_i / p_max
    if (std::abs(ratio - min_p) < 1e-5) continue;                    // within rounding of the cut
    EXPECT_EQ(out[i], ratio < min_p ? -kInf : x[i]) << "token " << i;
  }
}

TEST_P(BackendKernels, TopKKeepsTheKLargest) {
  for (const std::vector<float>& x : {distinct_logits(6), logits(6)}) {  // the second may hold ties
    const std::vector<int32_t> order = descending_order(x);
    for (int64_t k : {int64_t{1}, int64_t{5}, n() / 2, n() - 1, n()}) {
      if (k < 1 || k > n()) continue;
      const float threshold = x[order[k - 1]];  // every value tied with the k-th survives
      std::vector<float> out = x;
      backend().apply_top_k_top_p(out.data(), n(), k, false, 1.0f, scratch());
      for (int64_t i = 0; i < n(); ++i)
        EXPECT_EQ(out[i], x[i] >= threshold ? x[i] : -kInf) << "k " << k << " token " << i;
    }
  }
}

TEST_P(BackendKernels, TopKKeepsTiesAtTheKthValue) {
  std::vector<float> x(static_cast<size_t>(n()), 0.0f);
  for (int64_t i = 0; i < n(); ++i) x[i] = static_cast<float>(i % 3);  // values 0, 1, 2
  const int64_t twos = n() / 3;
  std::vector<float> out = x;
  // k = 1: every 2 (or every 1 / 0 when the row is shorter) is tied at the threshold.
  backend().apply_top_k_top_p(out.data(), n(), 1, false, 1.0f, scratch());
  const float max = *std::max_element(x.begin(), x.end());
  for (int64_t i = 0; i < n(); ++i) EXPECT_EQ(out[i], x[i] == max ? x[i] : -kInf) << i;
  if (twos > 0) {
    EXPECT_EQ(std::count(out.begin(), out.end(), 2.0f), twos);
  }
}

TEST_P(BackendKernels, TopPKeepsTheSmallestHeadReachingP) {
  const std::vector<float> x = distinct_logits(7);
  const std::vector<int32_t> order = descending_order(x);
  std::vector<double> prob(static_cast<size_t>(n()));
  double sum = 0;
  for (int64_t i = 0; i < n(); ++i)
    sum += prob[i] = std::exp(static_cast<double>(x[i]) - x[order[0]]);
  for (double& p : prob) p /= sum;
  // A token survives iff the mass strictly above it is < p. Put p halfway through the j-th
  // largest token's own mass, far from any rounding: exactly ranks 0..j survive.
  for (int64_t j : {int64_t{0}, int64_t{2}, int64_t{9}}) {
    if (j >= n()) continue;
    double above = 0;
    for (int64_t r = 0; r < j; ++r) above += prob[order[r]];
    const auto top_p = static_cast<float>(above + prob[order[j]] / 2);
    std::vector<float> out = x;
    backend().apply_top_k_top_p(out.data(), n(), n(), true, top_p, scratch());
    for (int64_t rank = 0; rank < n(); ++rank) {
      const int32_t id = order[rank];
      EXPECT_EQ(out[id], rank <= j ? x[id] : -kInf) << "j " << j << " rank " << rank;
    }
  }
}

TEST_P(BackendKernels, TopPIsAppliedAfterTopKRenormalisation) {
  const std::vector<float> x = distinct_logits(8);
  const std::vector<int32_t> order = descending_order(x);
  if (n() < 7) {  // too short for a top-6: top_k 1 then any p keeps the maximum only
    std::vector<float> out = x;
    backend().apply_top_k_top_p(out.data(), n(), 1, true, 0.5f, scratch());
    for (int64_t i = 0; i < n(); ++i) EXPECT_EQ(out[i], i == order[0] ? x[i] : -kInf) << i;
    return;
  }
  const int64_t k = 6;
  std::vector<double> prob(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t r = 0; r < k; ++r)
    sum += prob[r] = std::exp(static_cast<double>(x[order[r]]) - x[order[0]]);
  for (double& p : prob) p /= sum;
  // Keep the top 3 of the renormalised top 6: p between mass above rank 2 and mass above rank 3.
  const double above2 = prob[0] + prob[1];
  const auto top_p = static_cast<float>(above2 + prob[2] / 2);
  std::vector<float> out = x;
  backend().apply_top_k_top_p(out.data(), n(), k, true, top_p, scratch());
  for (int64_t rank = 0; rank < n(); ++rank) {
    const int32_t id = order[rank];
    EXPECT_EQ(out[id], rank < 3 ? x[id] : -kInf) << "rank " << rank;
  }
}

// A draw over the survivor list apply_top_k_top_p returns picks the token the full-row draw
// picks, for every u (the cpu backend lists survivors; the oracle lists none).
TEST_P(BackendKernels, DrawOverListedSurvivorsEqualsTheFullDraw) {
  const std::vector<float> x = logits(11);
  for (const auto& [k, top_p] : {std::pair<int64_t, float>{5, 0.8f}, {40, 0.95f}, {1, 1.0f}}) {
    std::vector<float> out = x;
    SortScratch s = scratch();
    const size_t listed =
        backend().apply_top_k_top_p(out.data(), n(), std::min(k, n()), true, top_p, s);
    if (std::min(k, n()) < n() && std::get<0>(GetParam()) == "cpu") {
      EXPECT_NE(listed, lastmile::detail::kNotListed);
    }
    expect_listed_draws_equal_full_draws(out, s, listed);
  }
}

// Top-p alone on a peaked row (a head of strong tokens over a broad body): the cpu backend lists
// the survivors from its probability band when it is short; the draw over that list is the full
// draw.
TEST_P(BackendKernels, TopPAloneListedSurvivorsDrawAsTheFullRow) {
  std::vector<float> x = logits(12);
  for (size_t i = 0; i < x.size(); i += 97) x[i] += 9.0f;
  for (const float top_p : {0.5f, 0.9f, 0.99f}) {
    std::vector<float> out = x;
    SortScratch s = scratch();
    const size_t listed = backend().apply_top_k_top_p(out.data(), n(), n(), true, top_p, s);
    if (n() > 8 * 512 && top_p < 0.95f && std::get<0>(GetParam()) == "cpu") {
      EXPECT_NE(listed, lastmile::detail::kNotListed) << "p " << top_p;  // p 0.99: > n / 8
    }
    expect_listed_draws_equal_full_draws(out, s, listed);
  }
}

TEST_P(BackendKernels, TopPOneMasksOnlyUnderflowedTokens) {
  std::vector<float> x = logits(9);
  x[0] = 50.0f;
  if (n() > 1) x[n() - 1] = -100.0f;  // exp(-150) underflows in float32
  std::vector<float> out = x;
  backend().apply_top_k_top_p(out.data(), n(), n(), true, 1.0f, scratch());
  std::vector<float> expected = x;
  for (int64_t i = 1; i < n(); ++i)
    if (std::exp(x[i] - 50.0f) == 0.0f) expected[i] = -kInf;
  if (n() > 1) {
    EXPECT_EQ(expected[n() - 1], -kInf);
  }
  EXPECT_EQ(out, expected);
}

TEST_P(BackendKernels, TopKTopPDisabledIsAnIdentity) {
  const std::vector<float> x = logits(10);
  std::vector<float> out = x;
  backend().apply_top_k_top_p(out.data(), n(), n(), false, 1.0f, scratch());
  EXPECT_EQ(out, x);
}

TEST_P(BackendKernels, DrawIsTheInverseCdf) {
  // Uniform row: u in ((k) / n, (k + 1) / n) selects token k.
  const std::vector<float> flat(static_cast<size_t>(n()), 0.25f);
  for (int64_t k : {int64_t{0}, n() / 2, n() - 1}) {
    const double u = (static_cast<double>(k) + 0.5) / static_cast<double>(n());
    EXPECT_EQ(backend().draw(flat.data(), n(), u, scratch()), k) << "k " << k;
  }
  EXPECT_EQ(backend().draw(flat.data(), n(), 1e-12, scratch()), 0);
  EXPECT_EQ(backend().draw(flat.data(), n(), 1.0 - 1e-12, scratch()), n() - 1);
}

TEST_P(BackendKernels, DrawSkipsMaskedTokens) {
  // Only every third token is finite (equal weight): the k-th kept token covers ((k)/m, (k+1)/m).
  std::vector<float> x(static_cast<size_t>(n()), -kInf);
  std::vector<int64_t> kept_ids;
  for (int64_t i = n() - 1; i >= 0; i -= 3) kept_ids.insert(kept_ids.begin(), i);
  for (int64_t i : kept_ids) x[i] = 1.0f;
  const auto m = static_cast<double>(kept_ids.size());
  for (size_t k = 0; k < kept_ids.size(); k += std::max<size_t>(1, kept_ids.size() / 5)) {
    EXPECT_EQ(backend().draw(x.data(), n(), (static_cast<double>(k) + 0.5) / m, scratch()),
              kept_ids[k])
        << k;
  }
  EXPECT_EQ(backend().draw(x.data(), n(), 1e-12, scratch()), kept_ids.front());
  EXPECT_EQ(backend().draw(x.data(), n(), 1.0 - 1e-12, scratch()), kept_ids.back());
}

TEST_P(BackendKernels, DrawFollowsTheCumulativeProbabilities) {
  const std::vector<float> x = logits(11);
  std::vector<double> cdf(static_cast<size_t>(n()));
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (int64_t i = 0; i < n(); ++i) cdf[i] = sum += std::exp(static_cast<double>(x[i]) - max);
  for (double& c : cdf) c /= sum;
  // The middle of token i's interval [cdf[i-1], cdf[i]) draws i when the interval is not tiny.
  int checked = 0;
  for (int64_t i = 0; i < n(); i += std::max<int64_t>(1, n() / 50)) {
    const double lo = i ? cdf[i - 1] : 0.0;
    if (cdf[i] - lo < 1e-6) continue;  // float32 weights move the bounds by ~1e-7 at most
    EXPECT_EQ(backend().draw(x.data(), n(), (lo + cdf[i]) / 2, scratch()), i) << "token " << i;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_P(BackendKernels, DrawOfAnAllNegativeInfinityRowIsZero) {
  const std::vector<float> x(static_cast<size_t>(n()), -kInf);
  EXPECT_EQ(backend().draw(x.data(), n(), 0.7, scratch()), 0);
}

TEST_P(BackendKernels, PenaltiesTouchOnlyCountedTokens) {
  std::vector<float> x = logits(12);
  x[0] = 3.0f;
  std::vector<TokenCount> counts = {{0, 2, true}};
  if (n() > 5) counts.push_back({5, 0, true});
  if (n() > 6) counts.push_back({static_cast<TokenId>(n() - 1), 3, false});
  std::vector<float> expected = x;
  expected[0] = 3.0f * (1.0f / 1.5f) - 0.5f * 2.0f - 0.25f;
  if (n() > 5) expected[5] = x[5] > 0 ? x[5] * (1.0f / 1.5f) : x[5] * 1.5f;
  if (n() > 6) {
    float& l = expected[n() - 1];
    l = l > 0 ? l * (1.0f / 1.5f) : l * 1.5f;
    l = l - 0.5f * 3.0f;
    l = l - 0.25f;
  }
  backend().apply_penalties(x.data(), counts, 1.5f, 0.5f, 0.25f);
  EXPECT_EQ(x, expected);
}

// Spec §7.2 rounds each product to float32 before it subtracts, as torch does. On these values a
// fused multiply-add of either product gives other bits: what GCC makes of `l * r - f * c`
// wherever the target has FMA (in C++ by default; on AArch64 always) unless told not to
// (-ffp-contract=off, CMakeLists.txt). The vocabulary size plays no part.
TEST_P(BackendKernels, PenaltiesRoundEachProductBeforeSubtracting) {
  const float reciprocal = 1.0f / 1.3f;
  const float repeated = rounded_product(2.3f, reciprocal), counted = rounded_product(0.1f, 3.0f);
  ASSERT_NE(repeated - counted, std::fma(2.3f, reciprocal, -counted));
  ASSERT_NE(repeated - counted, std::fma(-0.1f, 3.0f, repeated));
  std::vector<float> x = logits(12);
  x[0] = 2.3f;
  std::vector<float> expected = x;
  expected[0] = repeated - counted;
  const std::vector<TokenCount> counts = {{0, 3, true}};
  backend().apply_penalties(x.data(), counts, 1.3f, 0.1f, 0.0f);
  EXPECT_EQ(x, expected);
}

}  // namespace
}  // namespace lastmile_test
