// Every backend's rank and top-N kernels (src/backend.hpp) at awkward sizes, on the reference and
// the CPU backend (fixture: backend_kernels.hpp): rank, top-N in descending order with ties by id,
// and raw values and logprobs read from the caller's row, rounding ties below what was read first
// included.
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

TEST_P(BackendKernels, RankCountsEntriesAtLeastTheToken) {
  const std::vector<float> x = logits(13);
  for (TokenId t : {TokenId{0}, static_cast<TokenId>(n() / 2), static_cast<TokenId>(n() - 1)}) {
    const auto expected = std::count_if(x.begin(), x.end(), [&](float v) { return v >= x[t]; });
    EXPECT_EQ(backend().rank_of(x.data(), n(), t), expected);
  }
  std::vector<float> tied(static_cast<size_t>(n()), 1.0f);
  EXPECT_EQ(backend().rank_of(tied.data(), n(), 0), n());
}

TEST_P(BackendKernels, TopNIsDescendingWithTiesInIdOrder) {
  std::vector<float> x = logits(14);  // random: may hold ties, ordered by ascending id
  if (n() > 4) x[3] = x[1] = 9.0f;    // a tie at the top: id 1 before id 3
  const std::vector<int32_t> order = descending_order(x);
  for (int64_t k : {int64_t{0}, std::min<int64_t>(n(), 3), n()}) {
    std::vector<TokenId> ids(static_cast<size_t>(k), -1);
    std::vector<float> values(static_cast<size_t>(k), 0.0f);
    backend().top_n(x.data(), n(), k, ids.data(), values.data(), scratch());
    for (int64_t r = 0; r < k; ++r) {
      EXPECT_EQ(ids[r], order[r]) << "k " << k << " rank " << r;
      EXPECT_EQ(values[r], x[order[r]]);
    }
  }
}

// Raw modes rank and order by the mapped values, not by the logits: (x - max) - log_sum rounds
// 32 neighbouring logits near -0.2 (one float step apart, larger ids larger) to one value, so the
// second to fifth largest values are the lowest ids of that group, not the largest logits, and
// the group's members share one rank. raw_logits (the identity) orders by logit.
TEST_P(BackendKernels, RawValuesRankAndOrderByValueThenId) {
  if (n() < 64) GTEST_SKIP() << "needs 60 tokens";
  std::vector<float> x(static_cast<size_t>(n()), -30.0f);
  x[0] = 0.0f;
  float v = -0.2f;
  for (size_t i = 1; i < 60; ++i, v = std::nextafter(v, 0.0f)) x[i] = v;
  double sum = 0;
  for (float e : x) sum += std::exp(static_cast<double>(e));
  for (const bool log_softmax : {true, false}) {
    const int64_t k = 5;
    for (TokenId t : {1, 30, 59, static_cast<TokenId>(n() - 1)}) {
      std::vector<TokenId> ids(k, -1);
      std::vector<float> out(k, 0.0f);
      const lastmile::detail::RawLogprobs raw =
          backend().input_raw_logprobs(x.data(), lastmile::DType::f32, n(), log_softmax, t, k,
                                       ids.data(), out.data(), scratch());
      EXPECT_EQ(raw.values.max, 0.0f);
      EXPECT_NEAR(raw.values.log_sum, log_softmax ? std::log(sum) : 0.0, 1e-6);
      std::vector<float> values(x.size());
      for (size_t i = 0; i < x.size(); ++i) values[i] = raw.values(x[i]);
      const std::vector<int32_t> order = descending_order(values);
      EXPECT_EQ(order[1] == 59, !log_softmax);  // rounding merged the top of the group
      for (int64_t r = 0; r < k; ++r) {
        EXPECT_EQ(ids[r], order[r]) << "log_softmax " << log_softmax << " rank " << r;
        EXPECT_EQ(out[r], values[order[r]]);
      }
      EXPECT_EQ(raw.rank, std::count_if(values.begin(), values.end(),
                                        [&](float e) { return e >= values[t]; }))
          << "log_softmax " << log_softmax << " token " << t;
    }
  }
}

// A probability is at most 1: the max's own term is exp(0) = 1, so log_sum >= 0 and the max's
// log_softmax value is at most 0, even where a sum's arithmetic rounds that term below 1 (the cpu
// backend's statistics at t = 1 sum exp(x) and scale by exp(-max) after: on AVX-512, at a max of
// 10 or 79.81 the term comes out 1.3e-7 and 4.6e-7 under 1; elsewhere over 1, by up to 4.6e-7).
// A lone max, every other entry far below it.
TEST_P(BackendKernels, RawLogprobOfALoneMaxIsZero) {
  for (const float max : {10.0f, 79.81f, 1.0f, 0.0f, -3.25f}) {
    std::vector<float> x(static_cast<size_t>(n()), max - 200.0f);
    const TokenId at = static_cast<TokenId>(n() / 2);
    x[static_cast<size_t>(at)] = max;
    TokenId id = -1;
    float value = 1.0f;
    const lastmile::detail::RawLogprobs raw = backend().input_raw_logprobs(
        x.data(), lastmile::DType::f32, n(), true, at, 1, &id, &value, scratch());
    EXPECT_GE(raw.values.log_sum, 0.0f) << "max " << max;
    EXPECT_LE(raw.values.log_sum, 4.6e-7f) << "max " << max;
    EXPECT_EQ(id, at);
    EXPECT_LE(value, 0.0f) << "max " << max;
    EXPECT_EQ(value, raw.values(max));
    EXPECT_EQ(raw.rank, 1);
  }
}

// A top-N answer can lie below every entry a fast path reads first: the k-th largest logit a
// and a' one float step below it (token 7, a lower id) map to one value under log_softmax's
// rounding, so the k-th largest value goes to a', by id. The k - 1 larger logits and a sit
// `stride` tokens apart, a' below them all: the cpu backend lists the blocks (or, with fewer
// blocks than k, the groups of 64) whose max reaches the k-th largest max, a, and a' is in one
// below it.
void expect_rounding_tie_found(const lastmile::detail::Backend& backend, int64_t n, int64_t k,
                               TokenId stride, lastmile::detail::SortScratch scratch) {
  const TokenId below = 7;
  const TokenId kth_at = static_cast<TokenId>(k) * stride + 5;
  float a = -1.5f;
  for (int attempt = 0; attempt < 64; ++attempt, a = std::nextafter(a, -2.0f)) {
    std::vector<float> x(static_cast<size_t>(n), -30.0f);
    std::vector<TokenId> expected;
    for (int64_t r = 1; r < k; ++r) {  // 0, -1 / k, ..., above -1
      const TokenId at = static_cast<TokenId>(r) * stride + 5;
      x[static_cast<size_t>(at)] = -static_cast<float>(r - 1) / static_cast<float>(k);
      expected.push_back(at);
    }
    expected.push_back(below);
    x[static_cast<size_t>(kth_at)] = a;
    x[below] = std::nextafter(a, -2.0f);
    std::vector<TokenId> ids(static_cast<size_t>(k), -1);
    std::vector<float> out(static_cast<size_t>(k), 0.0f);
    const lastmile::detail::RawLogprobs raw = backend.input_raw_logprobs(
        x.data(), lastmile::DType::f32, n, true, kth_at, k, ids.data(), out.data(), scratch);
    if (raw.values(x[below]) != raw.values(a)) continue;  // this a's pair did not merge
    EXPECT_EQ(ids, expected) << "k " << k;
    EXPECT_EQ(out.back(), raw.values(a)) << "k " << k;
    EXPECT_EQ(raw.rank, k + 1) << "k " << k;
    return;
  }
  FAIL() << "no logit pair merged by rounding (k " << k << ")";
}

TEST_P(BackendKernels, RawTopNFindsARoundingTieBelowTheBlocksReadFirst) {
  if (n() < 4 * 2048) GTEST_SKIP() << "needs four blocks of 2048 tokens";
  expect_rounding_tie_found(backend(), n(), 3, 2048, scratch());
}

// The same with more logprobs than the row has blocks (32001 tokens: 16 blocks, 20 logprobs).
TEST_P(BackendKernels, RawTopNFindsARoundingTieBelowTheGroupsReadFirst) {
  if (n() < 22 * 64 || n() >= 20 * 2048) GTEST_SKIP() << "needs 22 groups and under 20 blocks";
  expect_rounding_tie_found(backend(), n(), 20, 64, scratch());
}

}  // namespace
}  // namespace lastmile_test
