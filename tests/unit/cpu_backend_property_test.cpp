// The CPU backend against the scalar oracle on random inputs (STYLE rule 5): 300 random rows per
// property, LLM-shaped or flat, with random -inf masks and ties, vocab from 1 to 40000. Selection
// kernels (top-k, top-k + top-p, top-N, draw on masked rows, argmax, rank) must give the oracle's
// exact result; log_softmax within 1e-5; whole Sampler calls the same tokens and kept sets.
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
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::detail::Backend;
using lastmile::detail::SortScratch;

const Backend& cpu() { return lastmile::detail::cpu_backend(); }
const Backend& oracle() { return lastmile::detail::reference_backend(); }

// A float32 row as the caller's logits of `dtype`: itself for fp32; else its 16-bit patterns in
// `halves` (bf16 by truncation; f16 of row / f16_scale, scaled down to stay in f16's range).
const void* caller_row(const std::vector<float>& row, lastmile::DType dtype,
                       std::vector<uint16_t>& halves, float f16_scale) {
  if (dtype == lastmile::DType::f32) return row.data();
  halves.resize(row.size());
  for (size_t i = 0; i < row.size(); ++i)
    halves[i] = dtype == lastmile::DType::bf16
                    ? static_cast<uint16_t>(std::bit_cast<uint32_t>(row[i]) >> 16)
                    : f16_bits(row[i] / f16_scale);
  return halves.data();
}

// A backend's scratch for a row of n, as a worker's: lists of up to the backend's list_room(n)
// entries, exactly (a kernel that lists more writes past the storage, which ASan reports).
struct Scratch {
  explicit Scratch(const Backend& owner) : backend(&owner) {}
  const Backend* backend;
  std::vector<int32_t> ids;
  std::vector<float> values;
  std::vector<uint64_t> keys;
  SortScratch get(size_t n) {
    const size_t room = backend->list_room(static_cast<int64_t>(n));
    ids.assign(room + lastmile::detail::kSortSlack, 0);
    values.assign(room + lastmile::detail::kSortSlack, 0.0f);
    // As a worker's, holding what earlier rows left (NaN's bits as doubles): no kernel may rely
    // on it.
    keys.assign(lastmile::detail::key_storage_size(n), ~uint64_t{0});
    return SortScratch::over(ids, values, keys, n, room);
  }
};

// A random row: LLM-shaped (a peaked head over a normal body) or flat, some entries -inf, and
// some values repeated to make ties.
std::vector<float> random_row(std::mt19937_64& rng) {
  const int64_t sizes[] = {1, 2, 7, 64, 111, 1000, 4097, 40000};
  const int64_t n = sizes[rng() % 8];
  std::normal_distribution<float> body(0.0f, rng() % 2 ? 2.5f : 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) v = body(rng);
  for (int i = 0; i < 30 && n > 1; ++i) x[rng() % n] += 8.0f;
  const int mask_percent = static_cast<int>(rng() % 3) * 45;  // 0, 45 or 90 % masked
  for (float& v : x)
    if (static_cast<int>(rng() % 100) < mask_percent) v = -kInf;
  for (int i = 0; i < 10 && n > 1; ++i) x[rng() % n] = x[rng() % n];  // ties
  return x;
}

// Dense rows are drawn with Highway's Exp: the token must equal the oracle's unless u sits
// within 1e-6 of a CDF step (computed here in double), where either neighbour is right.
void expect_consistent_draw(const std::vector<float>& x, double u, TokenId fast, TokenId slow) {
  if (fast == slow) return;
  const float max = *std::max_element(x.begin(), x.end());
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v) - max);
  double below = 0;
  for (TokenId i = 0; i < fast; ++i) below += std::exp(static_cast<double>(x[i]) - max) / total;
  const double at = below + std::exp(static_cast<double>(x[fast]) - max) / total;
  EXPECT_TRUE(below <= u + 1e-6 && u - 1e-6 <= at) << "fast " << fast << " oracle " << slow << " u "
                                                   << u << " step [" << below << ", " << at << "]";
}

// Top-p alone on x with the cpu backend and the oracle: the largest token stays, and the kept
// sets differ only at tokens whose cumulative probability is within 1e-6 of 1 - p. Returns how
// many tokens the oracle kept.
int64_t expect_top_p_matches(const std::vector<float>& x, float p, int trial) {
  Scratch a(cpu()), b(oracle());
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> fast = x, slow = x;
  cpu().apply_top_k_top_p(fast.data(), n, n, true, p, a.get(x.size()));
  oracle().apply_top_k_top_p(slow.data(), n, n, true, p, b.get(x.size()));
  const auto top = std::max_element(x.begin(), x.end()) - x.begin();  // the first largest
  if (x[top] != -kInf) {
    EXPECT_EQ(fast[top], x[top]) << "trial " << trial << " p " << p;
  }
  // The oracle's ascending cumulative probability of each token, in double.
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int32_t i, int32_t j) { return x[i] < x[j] || (x[i] == x[j] && i > j); });
  const float max = x[order.back()];
  if (max == -kInf) return 0;
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v) - max);
  double cumulative = 0;
  int64_t kept = 0;
  for (int32_t id : order) {
    cumulative += std::exp(static_cast<double>(x[id]) - max) / total;
    if (std::isinf(fast[id]) != std::isinf(slow[id])) {
      EXPECT_NEAR(cumulative, 1.0 - p, 1e-6) << "trial " << trial << " token " << id;
    }
    kept += !std::isinf(slow[id]);
  }
  return kept;
}

// -0 and +0 are equal logits: ties go by id, in top-k / top-p, in the draw from the input and in
// top-N, as in the oracle (bit-level keys once put -0 below +0).
TEST(CpuBackendProperty, SignedZerosAreTies) {
  Scratch a(cpu()), b(oracle());
  const std::vector<float> x = {-0.0f, 0.0f, 5.0f};
  std::vector<float> fast = x, slow = x;
  cpu().apply_top_k_top_p(fast.data(), 3, 2, true, 0.99f, a.get(3));
  oracle().apply_top_k_top_p(slow.data(), 3, 2, true, 0.99f, b.get(3));
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(std::isinf(fast[i]), std::isinf(slow[i])) << i;
  TokenId ids_fast[2], ids_slow[2];
  float values_fast[2], values_slow[2];
  const std::vector<float> zeros = {-0.0f, 0.0f};
  cpu().top_n(zeros.data(), 2, 2, ids_fast, values_fast, a.get(2));
  oracle().top_n(zeros.data(), 2, 2, ids_slow, values_slow, b.get(2));
  EXPECT_EQ(ids_fast[0], ids_slow[0]);
  EXPECT_EQ(ids_fast[1], ids_slow[1]);
  EXPECT_EQ(std::signbit(values_fast[0]), std::signbit(values_slow[0]));
}

TEST(CpuBackendProperty, TopPAloneKeepsTheOraclesSetUpToRounding) {
  std::mt19937_64 rng(15);
  int64_t kept_total = 0;
  for (int trial = 0; trial < 200; ++trial) {
    // p = 1, tiny p (1 - p rounds to about 1: only the largest may stay) and ordinary p.
    const float p = trial % 10 == 0 ? 1.0f
                    : trial % 10 == 1
                        ? std::pow(10.0f, std::uniform_real_distribution<float>(-9.0f, -6.0f)(rng))
                        : std::uniform_real_distribution<float>(0.05f, 1.0f)(rng);
    kept_total += expect_top_p_matches(random_row(rng), p, trial);
  }
  EXPECT_GT(kept_total, 10000);
}

// A row masked to a few tokens (min_p before top-p, or a grammar's mask: at most 1/64 of it
// finite) takes top-p on the list of its finite entries, with the oracle's arithmetic: the same
// row as the oracle's to the bit, the same token drawn, and the list handed to the draw (its
// length returned, not the dense path's weights). Every tenth row has exactly n / 64 finite
// entries (the most the path takes); some hold a -0 / +0 tie, or an entry 200 below the max
// (probability 0 in float32, masked by the oracle's rule). The list handed on holds the
// survivors alone.
TEST(CpuBackendProperty, TopPOfARowMaskedToAFewTokensIsTheOraclesOnTheirList) {
  std::mt19937_64 rng(31);
  Scratch a(cpu()), b(oracle());
  for (int trial = 0; trial < 90; ++trial) {
    const int64_t n = std::array<int64_t, 3>{6400, 40000, 128256}[trial % 3];
    const bool most = trial % 10 == 0;
    const auto finite =
        most ? n / 64 : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n / 64));
    std::vector<float> x(static_cast<size_t>(n), -kInf);
    std::normal_distribution<float> logit(0.0f, 2.5f);
    for (int64_t i = 0; i < finite; ++i) {  // one entry in each of `finite` runs of 64 ids
      const auto at = static_cast<size_t>(i * 64 + static_cast<int64_t>(rng() % 64));
      x[at] = i % 5 == 4 ? 2.0f : logit(rng) + (i % 7 == 0 ? 8.0f : 0.0f);
      if (trial % 4 == 1 && i == 1) x[at] = x[at - 64] - 200.0f;   // underflows to probability 0
      if (trial % 4 == 2 && i < 2) x[at] = i == 0 ? 0.0f : -0.0f;  // a tie, ids decide
    }
    const bool min_p_first = trial % 2 == 1;  // min_p masks more of it first, as the steps do
    if (min_p_first) oracle().apply_min_p(x.data(), n, 0.001f);
    const float p =
        trial % 9 == 0 ? 1e-7f : std::uniform_real_distribution<float>(0.05f, 0.99f)(rng);
    std::vector<float> fast = x, slow = x;
    const SortScratch list = a.get(x.size());  // kept for the draw, which reads the list
    const size_t listed = cpu().apply_top_k_top_p(fast.data(), n, n, true, p, list);
    oracle().apply_top_k_top_p(slow.data(), n, n, true, p, b.get(x.size()));
    ASSERT_EQ(fast, slow) << "trial " << trial << " finite " << finite << " p " << p;
    EXPECT_EQ(listed, static_cast<size_t>(std::count_if(slow.begin(), slow.end(),
                                                        [](float v) { return v > -kInf; })))
        << "trial " << trial;
    for (int draw = 0; draw < 4; ++draw) {
      const double u = (draw + std::uniform_real_distribution<double>(0.0, 1.0)(rng)) / 4;
      EXPECT_EQ(cpu().draw(fast.data(), n, u, list, listed),
                oracle().draw(slow.data(), n, u, b.get(x.size())))
          << "trial " << trial << " u " << u;
    }
  }
}

// The cpu backend guesses where the cut falls from evenly spaced samples; rows whose sampled
// positions lie (all large, or all small, or one huge outlier) make the guess wrong, and the
// checked band must widen until it holds the cut: still the oracle's set.
TEST(CpuBackendProperty, TopPAloneSurvivesMisleadingSamples) {
  std::mt19937_64 rng(17);
  for (int trial = 0; trial < 24; ++trial) {
    const size_t n = 40000, stride = n / 512;
    std::normal_distribution<float> body(0.0f, 1.0f);
    std::vector<float> x(n);
    for (float& v : x) v = body(rng);
    for (size_t i = 0; i < n; i += stride) {
      if (trial % 3 == 0) x[i] += 6.0f;  // the samples look like the head
      if (trial % 3 == 1) x[i] -= 6.0f;  // the samples look like the tail
    }
    if (trial % 3 == 2) x[rng() % n] = 14.0f;  // one token carries most of the mass
    const float p = std::uniform_real_distribution<float>(0.1f, 0.99f)(rng);
    EXPECT_GT(expect_top_p_matches(x, p, trial), 0);
  }
}

TEST(CpuBackendProperty, TopKAndTopPKeepTheOraclesSet) {
  std::mt19937_64 rng(11);
  Scratch a(cpu()), b(oracle());
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<float> x = random_row(rng);
    const auto n = static_cast<int64_t>(x.size());
    const int64_t k =
        1 + static_cast<int64_t>(rng() % std::max<int64_t>(1, std::min<int64_t>(n, 200)));
    const bool top_p = rng() % 2;
    const float p = top_p ? std::uniform_real_distribution<float>(0.05f, 1.0f)(rng) : 1.0f;
    std::vector<float> fast = x, slow = x;
    cpu().apply_top_k_top_p(fast.data(), n, k, top_p, p, a.get(x.size()));
    oracle().apply_top_k_top_p(slow.data(), n, k, top_p, p, b.get(x.size()));
    ASSERT_EQ(fast, slow) << "trial " << trial << " n " << n << " k " << k << " p " << p;
  }
}

TEST(CpuBackendProperty, TopNRankArgmaxAndDrawEqualTheOracle) {
  std::mt19937_64 rng(12);
  Scratch a(cpu()), b(oracle());
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<float> x = random_row(rng);
    const auto n = static_cast<int64_t>(x.size());
    EXPECT_EQ(cpu().row_argmax(x.data(), n), oracle().row_argmax(x.data(), n));
    EXPECT_EQ(cpu().row_max(x.data(), n), oracle().row_max(x.data(), n));
    const auto token = static_cast<TokenId>(rng() % n);
    EXPECT_EQ(cpu().rank_of(x.data(), n, token), oracle().rank_of(x.data(), n, token));
    const int64_t k = std::min<int64_t>(n, static_cast<int64_t>(rng() % 21));
    std::vector<TokenId> ids_fast(k), ids_slow(k);
    std::vector<float> values_fast(k), values_slow(k);
    cpu().top_n(x.data(), n, k, ids_fast.data(), values_fast.data(), a.get(x.size()));
    oracle().top_n(x.data(), n, k, ids_slow.data(), values_slow.data(), b.get(x.size()));
    EXPECT_EQ(ids_fast, ids_slow) << "trial " << trial;
    EXPECT_EQ(values_fast, values_slow) << "trial " << trial;
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    expect_consistent_draw(x, u, cpu().draw(x.data(), n, u, a.get(x.size())),
                           oracle().draw(x.data(), n, u, b.get(x.size())));
  }
}

// A k-entry top-N by the cpu backend (fast) and the oracle (slow), side by side: processed
// (top_n of a working row x), or raw (the caller's row src; returns the two ranks).
struct TopNs {
  std::vector<TokenId> ids_fast, ids_slow;
  std::vector<float> values_fast, values_slow;
  explicit TopNs(int64_t k)
      : ids_fast(static_cast<size_t>(k)),
        ids_slow(static_cast<size_t>(k)),
        values_fast(static_cast<size_t>(k)),
        values_slow(static_cast<size_t>(k)) {}
  int64_t k() const { return static_cast<int64_t>(ids_fast.size()); }
  void processed(const std::vector<float>& x, Scratch& a, Scratch& b) {
    const auto n = static_cast<int64_t>(x.size());
    cpu().top_n(x.data(), n, k(), ids_fast.data(), values_fast.data(), a.get(x.size()));
    oracle().top_n(x.data(), n, k(), ids_slow.data(), values_slow.data(), b.get(x.size()));
  }
  std::pair<int64_t, int64_t> raw(const void* src, lastmile::DType dtype, int64_t n,
                                  bool log_softmax, TokenId token, Scratch& a, Scratch& b) {
    const auto size = static_cast<size_t>(n);
    const auto slow = oracle().input_raw_logprobs(src, dtype, n, log_softmax, token, k(),
                                                  ids_slow.data(), values_slow.data(), b.get(size));
    const auto fast = cpu().input_raw_logprobs(src, dtype, n, log_softmax, token, k(),
                                               ids_fast.data(), values_fast.data(), a.get(size));
    return {fast.rank, slow.rank};
  }
};

// Row x's top-N of k both ways, processed (the oracle's ids and values exactly) and raw from the
// caller's row in the trial's dtype, for log_softmax and raw_logits (the oracle's rank); then
// check_raw(top, log_softmax) on the raw ones.
template <class CheckRaw>
void expect_top_ns_match(const std::vector<float>& x, int64_t k, int trial, std::mt19937_64& rng,
                         CheckRaw check_raw) {
  Scratch a(cpu()), b(oracle());
  const auto n = static_cast<int64_t>(x.size());
  TopNs top(k);
  top.processed(x, a, b);
  EXPECT_EQ(top.ids_fast, top.ids_slow) << "trial " << trial << " k " << k;
  EXPECT_EQ(top.values_fast, top.values_slow) << "trial " << trial;
  const auto dtype = static_cast<lastmile::DType>(trial % 3);
  std::vector<uint16_t> halves;
  const void* src = caller_row(x, dtype, halves, 1.0f);
  for (const bool log_softmax : {true, false}) {
    const auto token = static_cast<TokenId>(rng() % static_cast<uint64_t>(n));
    const auto [fast_rank, slow_rank] = top.raw(src, dtype, n, log_softmax, token, a, b);
    EXPECT_EQ(fast_rank, slow_rank) << "trial " << trial;
    check_raw(top, log_softmax);
  }
}

// A top-N whose candidates pass the lists' room (a quarter of the row): rows of a few levels
// (ties by the thousand: every level's entries are candidates) with small and large k, and N(0,
// 1) rows with k past the room. Decided on the row (a radix select, then the order walked in
// chunks of keys): processed, the oracle's ids and values exactly; raw, the oracle's ids, values
// within 1e-5, and ranks.
TEST(CpuBackendProperty, TopNPastTheListsRoomIsTheOracles) {
  std::mt19937_64 rng(53);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t n = trial % 2 ? 40000 : 20000 + static_cast<int64_t>(rng() % 20000);
    std::vector<float> x(static_cast<size_t>(n));
    std::normal_distribution<float> logit(0.0f, 1.0f);
    const bool levels = trial % 3 != 2;
    for (float& v : x) v = levels ? 0.5f * static_cast<float>(rng() % 4) : logit(rng);
    if (trial % 4 == 0) x[rng() % x.size()] = -kInf;
    const int64_t k = levels && trial % 3 == 0 ? 5 : n / 3 + static_cast<int64_t>(rng() % 1000);
    expect_top_ns_match(x, k, trial, rng, [&](const TopNs& top, bool log_softmax) {
      EXPECT_EQ(top.ids_fast, top.ids_slow) << "trial " << trial << " log_softmax " << log_softmax;
      for (size_t i = 0; i < top.ids_fast.size(); ++i)
        ASSERT_NEAR(top.values_fast[i], top.values_slow[i], 1e-5) << "trial " << trial;
    });
  }
  // A finite k-th whose log-softmax value is -inf (x - max overflows) ties with the -inf entries,
  // by id: the row's largest entry, then token 0 (-inf), not token 2 (finite, its value -inf).
  std::vector<float> x(5000, -1e38f);
  x[0] = -kInf;
  x[1] = 3e38f;
  Scratch a(cpu()), b(oracle());
  TopNs top(2);
  const auto [fast_rank, slow_rank] = top.raw(x.data(), lastmile::DType::f32, 5000, true, 1, a, b);
  EXPECT_EQ(top.ids_slow, (std::vector<TokenId>{1, 0}));
  EXPECT_EQ(top.ids_fast, top.ids_slow);
  EXPECT_EQ(fast_rank, slow_rank);
}

// A masked row (a processed top-k, top-p or min-p row) shown with more logprobs than it keeps:
// the top-N is its finite entries, then -inf ones by ascending id, as the oracle's, in the
// processed modes (top_n of the working row) and the raw ones (the caller's row, every dtype).
// Rows long enough for top-N by groups (k up to a quarter of them) and a sampled threshold past
// that; 0 to k - 1 finite entries with ties.
TEST(CpuBackendProperty, TopNOfAMaskedRowShowsItsFiniteEntriesThenTheMaskedByID) {
  std::mt19937_64 rng(23);
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = trial % 2 ? 32000 : 40000 + static_cast<int64_t>(rng() % 100000);
    const int64_t k = trial % 3 == 0 ? 200 : 20;
    std::vector<float> x(static_cast<size_t>(n), -kInf);
    const auto finite = static_cast<int64_t>(rng() % static_cast<uint64_t>(k));
    std::normal_distribution<float> logit(0.0f, 2.0f);
    for (int64_t i = 0; i < finite; ++i)
      x[rng() % x.size()] = i % 4 == 3 ? 1.5f : logit(rng);  // some ties at 1.5
    expect_top_ns_match(x, k, trial, rng, [&](const TopNs& top, bool log_softmax) {
      EXPECT_EQ(top.ids_fast, top.ids_slow) << "trial " << trial << " log_softmax " << log_softmax;
      for (size_t i = 0; i < top.ids_fast.size(); ++i) {  // the log-sums agree within 1e-5
        if (top.values_slow[i] == -kInf)
          EXPECT_EQ(top.values_fast[i], -kInf) << "trial " << trial << " rank " << i;
        else
          EXPECT_NEAR(top.values_fast[i], top.values_slow[i], 1e-5f)
              << "trial " << trial << " rank " << i;
      }
    });
  }
}

// A raw top-N against the oracle's: values within 1e-5, ids in the order of the backend's own
// values, no id twice, and every id clearly above the k-th value in one top-N shown in the other.
// The log-sums differ within 1e-5, so rounding may merge different neighbours into ties: the
// order is checked on the backend's own values, the ids against the oracle's away from them.
void expect_raw_top_n_in_own_order(const TopNs& top, int trial) {
  const std::vector<TokenId>& ids_fast = top.ids_fast;
  const std::vector<TokenId>& ids_slow = top.ids_slow;
  const std::vector<float>& values_fast = top.values_fast;
  const std::vector<float>& values_slow = top.values_slow;
  const auto kk = static_cast<size_t>(top.k());
  for (size_t i = 0; i < kk; ++i) {
    ASSERT_NEAR(values_fast[i], values_slow[i], 1e-5f) << "trial " << trial << " rank " << i;
    if (i == 0) continue;
    ASSERT_TRUE(values_fast[i - 1] > values_fast[i] ||
                (values_fast[i - 1] == values_fast[i] && ids_fast[i - 1] < ids_fast[i]))
        << "trial " << trial << " rank " << i;
  }
  const std::set<TokenId> shown_fast(ids_fast.begin(), ids_fast.end());
  const std::set<TokenId> shown_slow(ids_slow.begin(), ids_slow.end());
  EXPECT_EQ(shown_fast.size(), kk) << "trial " << trial;  // no id twice
  for (size_t i = 0; i < kk; ++i) {
    if (values_slow[i] > values_slow[kk - 1] + 1e-5f) {
      EXPECT_TRUE(shown_fast.count(ids_slow[i])) << "trial " << trial << " id " << ids_slow[i];
    }
    if (values_fast[i] > values_slow[kk - 1] + 2e-5f) {
      EXPECT_TRUE(shown_slow.count(ids_fast[i])) << "trial " << trial << " id " << ids_fast[i];
    }
  }
}

// A top-N of tens to thousands of a whole row, within the lists' room (k below n / 8), whose
// candidates are sorted at once: LLM-shaped rows (a broad body under a head of lifted tokens) and
// N(0, 1) rows, with ties. In the second and fourth six trials (every k, 128k rows among them) a
// plateau of 2.5k to 3k draws ties below the k/2 largest, and the row's last entry stands above
// it: more than twice k pass the k-th value (selected, then sorted), or more than the keys hold
// (by chunks). Processed: the oracle's ids and values exactly; raw (the caller's row, every
// dtype): its rank, and its values and ids as expect_raw_top_n_in_own_order checks them.
TEST(CpuBackendProperty, TopNOfHundredsWithinTheRoomIsTheOraclesOrder) {
  std::mt19937_64 rng(61);
  constexpr std::array<int64_t, 6> kShown = {21, 100, 129, 700, 1025, 3000};
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t n = trial % 3 == 0 ? 128256 : 40000 + static_cast<int64_t>(rng() % 20000);
    const bool llm = trial % 2 == 0;
    std::normal_distribution<float> logit(0.0f, llm ? 2.5f : 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = logit(rng);
    for (int i = 0; llm && i < 40; ++i)
      x[rng() % x.size()] += 6.0f + static_cast<float>(rng() % 1000) / 100.0f;
    for (int i = 0; i < 200; ++i) x[rng() % x.size()] = x[rng() % x.size()];  // ties
    const int64_t k = kShown[static_cast<size_t>(trial) % kShown.size()];
    if (trial / 6 % 2 == 1) {  // a plateau (entries drawn twice tie once) at the k/2-th value
      std::vector<float> sorted = x;
      std::nth_element(sorted.begin(), sorted.begin() + k / 2, sorted.end(), std::greater<>());
      const float plateau = sorted[static_cast<size_t>(k / 2)];
      const int64_t draws = 5 * k / 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(k / 2));
      for (int64_t i = 0; i < draws; ++i) x[rng() % x.size()] = plateau;
      x.back() = plateau + 1.0f;  // the last id passes: shown, whatever the plateau
    }
    ASSERT_LT(static_cast<size_t>(k), lastmile::detail::sort_keys_size(x.size()));
    expect_top_ns_match(x, k, trial, rng,
                        [&](const TopNs& top, bool) { expect_raw_top_n_in_own_order(top, trial); });
  }
}

// largest_listed over a list whose failing entries (below v) sit among the passing ones, and a
// keys' storage holding zeros from earlier use (keys that would sort first): the k largest that
// pass, by descending value and ascending id, as std::sort orders them. Passing entries number
// fewer than k, up to twice k (sorted), and more (selected first, among plateaus of ties at v).
TEST(CpuBackendProperty, LargestListedShowsTheKLargestThatPassAmongFailingOnes) {
  std::mt19937_64 rng(67);
  const size_t n = 80000;
  Scratch scratch(cpu());
  for (int trial = 0; trial < 60; ++trial) {
    SortScratch s = scratch.get(n);
    std::fill(scratch.keys.begin(), scratch.keys.end(), uint64_t{0});
    const size_t listed = 500 + rng() % 6000;
    const float v = 1.0f;
    const int share = trial % 3;  // of passing entries: few, some, most
    int32_t id = 0;
    std::vector<std::pair<float, int32_t>> passing;
    for (size_t i = 0; i < listed; ++i) {
      id += 1 + static_cast<int32_t>(rng() % 9);  // the list is in id order
      const uint64_t roll = rng() % 100;
      const float value = roll < 10u * static_cast<unsigned>(share) + 5u
                              ? v + static_cast<float>(rng() % 50) / 8.0f
                          : roll < 60 ? v  // a plateau at v
                                      : v - 1.0f - static_cast<float>(rng() % 50) / 8.0f;
      s.ids[i] = id;
      s.values[i] = value;
      if (value >= v) passing.emplace_back(-value, id);  // descending value, ascending id
    }
    std::sort(passing.begin(), passing.end());
    const auto k = static_cast<int64_t>(1 + rng() % (share == 0 ? 4000 : 600));
    std::vector<TokenId> got(static_cast<size_t>(k));
    const size_t shown = lastmile::detail::cpu_selection::largest_listed(
        s, listed, [](float x) { return x; }, v, k, got.data());
    const size_t expected = std::min(passing.size(), static_cast<size_t>(k));
    ASSERT_EQ(shown, expected) << "trial " << trial;
    for (size_t i = 0; i < shown; ++i)
      ASSERT_EQ(got[i], passing[i].second) << "trial " << trial << " rank " << i;
  }
}

// A top-N of more entries than a worker's keys hold (k above n / 8, with ties and a -0 / +0
// pair), sorted by chunks: the oracle's ids and values in the processed mode (top_n of the
// working row); in the raw ones (the caller's row, every dtype) its rank, values within 1e-5,
// ids in the order of its own values, and every id the oracle shows clearly above the k-th. The
// first trials show one fewer than the keys hold, as many, and one more.
TEST(CpuBackendProperty, TopNOfThousandsIsTheOraclesOrder) {
  std::mt19937_64 rng(53);
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t n = trial % 2 ? 40000 : 4097 + static_cast<int64_t>(rng() % 9000);
    std::normal_distribution<float> logit(0.0f, 2.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = logit(rng);
    for (int i = 0; i < 200; ++i) x[rng() % x.size()] = x[rng() % x.size()];  // ties
    x[rng() % x.size()] = 0.0f;
    x[rng() % x.size()] = -0.0f;
    const auto room = static_cast<int64_t>(lastmile::detail::sort_keys_size(x.size()));
    const int64_t k = trial < 6
                          ? room - 1 + trial % 3
                          : room + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n / 2));
    expect_top_ns_match(x, k, trial, rng,
                        [&](const TopNs& top, bool) { expect_raw_top_n_in_own_order(top, trial); });
  }
}

const lastmile::detail::ParallelFor kSerial{};
// Rows reach top-N checked, but one that was not (NaN in most entries) must still give ids in
// the row and no read outside it, in both modes: processed (top_n) and raw (the caller's row).
TEST(CpuBackendProperty, TopNOfAnUncheckedRowStaysInTheRow) {
  Scratch a(cpu());
  for (const int64_t n : {40, 40000}) {
    std::vector<float> x(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
    x[3] = 1.0f;
    x[static_cast<size_t>(n) - 2] = -kInf;
    const int64_t k = 20;
    std::vector<TokenId> ids(static_cast<size_t>(k), 123456789);
    std::vector<float> values(static_cast<size_t>(k));
    cpu().top_n(x.data(), n, k, ids.data(), values.data(), a.get(x.size()));
    for (TokenId id : ids) EXPECT_TRUE(id >= 0 && id < n) << "n " << n << " id " << id;
    EXPECT_EQ(ids[0], 3);
    for (const bool log_softmax : {true, false}) {
      std::fill(ids.begin(), ids.end(), 123456789);
      cpu().input_raw_logprobs(x.data(), lastmile::DType::f32, n, log_softmax, 3, k, ids.data(),
                               values.data(), a.get(x.size()));
      for (TokenId id : ids) EXPECT_TRUE(id >= 0 && id < n) << "n " << n << " id " << id;
    }
  }
}

// A min_p draw from the caller's row src (x: the oracle's row masked by min_p): answered unless
// min_p keeps more than the lists' room (the steps decide it), the same token split backwards, an
// unmasked token, and the oracle's draw up to a CDF step's rounding. Returns whether it answered.
bool expect_min_p_draw_from_input(const void* src, lastmile::DType dtype, int64_t n,
                                  const lastmile::detail::DrawParams& params, double u,
                                  const std::vector<float>& x, int trial) {
  Scratch a(cpu()), b(oracle());
  const TokenId fast = cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial);
  if (fast == lastmile::detail::kNoInputDraw) {
    const auto kept = std::count_if(x.begin(), x.end(), [](float v) { return v != -kInf; });
    EXPECT_GT(static_cast<size_t>(kept), cpu().list_room(n)) << "trial " << trial;
    return false;
  }
  EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kBackwards), fast)
      << "trial " << trial;
  EXPECT_NE(x[fast], -kInf) << "trial " << trial << ": drew a masked token";
  expect_consistent_draw(x, u, fast, oracle().draw(x.data(), n, u, b.get(x.size())));
  return true;
}

// min_p on flat rows (N(0, 1) and N(0, 2)) keeps thousands of tokens: drawn from the caller's
// row by blocks with the vector exp while they fit the lists' room (declined past half of it),
// the token is the oracle's steps' unless u sits within 1e-6 of a CDF step, never a masked one,
// and the same whichever order the chunks run in.
TEST(CpuBackendProperty, MinPOnAFlatRowDrawsFromItsLongList) {
  std::mt19937_64 rng(29);
  int long_lists = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t n = std::array<int64_t, 3>{6000, 40000, 128256}[trial % 3];
    std::normal_distribution<float> logit(0.0f, trial % 2 ? 2.0f : 1.0f);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = logit(rng);
    const auto dtype = static_cast<lastmile::DType>(trial % 3 == 0 ? 0 : rng() % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 1.0f);
    lastmile::detail::DrawParams params;
    params.top_k = n;
    params.temperature = trial % 4 == 0 ? 0.8f : 1.0f;
    params.min_p = std::array<float, 3>{0.001f, 0.01f, 0.05f}[rng() % 3];
    std::vector<float> x(row.size());
    oracle().convert_row_divided(src, dtype, x.data(), n, params.temperature);
    oracle().apply_min_p(x.data(), n, params.min_p);
    const bool long_list =
        std::count_if(x.begin(), x.end(), [](float v) { return v != -kInf; }) > 4096;
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    long_lists += expect_min_p_draw_from_input(src, dtype, n, params, u, x, trial) && long_list;
  }
  EXPECT_GT(long_lists, 10);  // drawn by blocks: 15 of them
}

// Top-k then top-p on row x by the cpu backend and by the oracle: the working rows must agree to
// the bit, and a list handed on must hold the oracle's survivors in id order. Then the oracle's
// draw at u, the cpu's over what it kept, and the cpu's straight from x (kNoInputDraw: declined).
struct TopKTopPDraws {
  size_t listed;
  TokenId oracle, kept, from_input;
};
TopKTopPDraws top_k_top_p_both(const std::vector<float>& x, int64_t k, float p, double u,
                               Scratch& a, Scratch& b, int trial) {
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> fast = x, slow = x;
  const SortScratch list = a.get(x.size());
  const size_t listed = cpu().apply_top_k_top_p(fast.data(), n, k, true, p, list);
  oracle().apply_top_k_top_p(slow.data(), n, k, true, p, b.get(x.size()));
  EXPECT_EQ(fast, slow) << "trial " << trial << " n " << n << " k " << k << " p " << p;
  if (listed != lastmile::detail::kNotListed) {
    std::vector<int32_t> survivors;
    for (int64_t i = 0; i < n; ++i)
      if (slow[i] > -kInf) survivors.push_back(static_cast<int32_t>(i));
    EXPECT_EQ(std::vector<int32_t>(list.ids.begin(), list.ids.begin() + listed), survivors)
        << "trial " << trial;
  }
  TopKTopPDraws draws{listed, oracle().draw(slow.data(), n, u, b.get(x.size())),
                      cpu().draw(fast.data(), n, u, list, listed), 0};
  lastmile::detail::DrawParams params;
  params.top_k = k;
  params.apply_top_p = true;
  params.top_p = p;
  draws.from_input =
      cpu().draw_from_input(x.data(), lastmile::DType::f32, n, params, u, a.get(x.size()), kSerial);
  return draws;
}

// Top-k keeping more tokens than a worker's keys hold (an eighth of the row), then top-p: the
// kept list is sorted in place by chunks (and, at the boundary, one fewer or as many in the keys),
// or, when the candidates pass the lists' room (a quarter of the row), top-k and top-p are decided
// on the row (a radix select, then the oracle's walk in chunks of keys). The working row equals
// the oracle's to the bit, the list handed on holds the survivors in id order, and both draws
// (over the list, and straight from the caller's row unless it declines a list past the room)
// give the oracle's token.
TEST(CpuBackendProperty, TopKOfThousandsThenTopPIsTheOraclesToTheBit) {
  std::mt19937_64 rng(47);
  Scratch a(cpu()), b(oracle());
  int decided_on_row = 0;
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = trial % 2 ? 40000 : 4097 + static_cast<int64_t>(rng() % 9000);
    std::normal_distribution<float> body(0.0f, trial % 3 == 0 ? 1.0f : 2.5f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = body(rng);
    for (int i = 0; i < 30; ++i) x[rng() % x.size()] += 8.0f;
    // The first six keep one fewer than the keys hold, as many, and one more (no ties: k kept).
    const bool at_the_room = trial < 6;
    const auto room = static_cast<int64_t>(lastmile::detail::sort_keys_size(x.size()));
    for (int i = 0; i < 40 && !at_the_room; ++i) x[rng() % x.size()] = x[rng() % x.size()];  // ties
    if (trial % 3 == 1) {  // a -0 / +0 tie (kept when the k-th is negative): ids decide
      x[rng() % x.size()] = 0.0f;
      x[rng() % x.size()] = -0.0f;
    }
    const int64_t k = at_the_room
                          ? room - 1 + trial % 3
                          : n / 8 + 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n / 2));
    const float p =
        trial % 5 == 0 ? 0.999f : std::uniform_real_distribution<float>(0.05f, 0.95f)(rng);
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    const TopKTopPDraws draws = top_k_top_p_both(x, k, p, u, a, b, trial);
    // Candidates (about 2k, sampled) past the lists' room are decided on the row: no list.
    const bool past_room = 4 * static_cast<size_t>(k) > cpu().list_room(n);
    if (draws.listed == lastmile::detail::kNotListed) {
      EXPECT_TRUE(past_room) << "trial " << trial << " k " << k;
    }
    EXPECT_EQ(draws.kept, draws.oracle) << "trial " << trial;
    if (draws.from_input == lastmile::detail::kNoInputDraw) {
      EXPECT_TRUE(past_room) << "trial " << trial << " k " << k;
    } else {
      EXPECT_EQ(draws.from_input, draws.oracle) << "trial " << trial;
    }
    decided_on_row += draws.listed == lastmile::detail::kNotListed;
  }
  EXPECT_GT(decided_on_row, 10);
}

// Top-k whose k-th value is tied by more entries than a worker's keys hold (an eighth of the row)
// but fewer than the lists' room (a quarter): the list of survivors is one value, so top-p masks
// its largest ids, counted with the oracle's arithmetic, not sorted by chunks. The tie is the
// row's largest value, or +0 among -0 with the rest below. Working row to the bit, the survivors'
// list in id order, and both draws give the oracle's token.
TEST(CpuBackendProperty, TopPOverATopKListOfOneValuePastTheKeysIsTheOracles) {
  std::mt19937_64 rng(59);
  Scratch a(cpu()), b(oracle());
  for (int trial = 0; trial < 30; ++trial) {
    const int64_t n = trial % 2 ? 40000 : 9000 + static_cast<int64_t>(rng() % 20000);
    const size_t room = lastmile::detail::sort_keys_size(static_cast<size_t>(n));
    const bool zeros = trial % 3 == 2;
    std::normal_distribution<float> body(zeros ? -6.0f : 0.0f, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x) v = std::min(body(rng), -1e-3f + (zeros ? 0.0f : 4.0f));
    const size_t tied = room + 1 + rng() % (room / 2);  // within the list room
    for (size_t i = 0; i < tied; ++i)
      x[i * x.size() / tied] = zeros ? (rng() % 2 ? 0.0f : -0.0f) : 4.0f;
    // k within a third of the tie: the sampled threshold lands on it, and the candidates are
    // the tie (a larger k can list the body too, past the room: then decided on the row).
    const auto k = static_cast<int64_t>(1 + rng() % (tied / 3));
    const float p =
        trial % 5 == 0 ? 0.9999f : std::uniform_real_distribution<float>(0.01f, 0.99f)(rng);
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    const TopKTopPDraws draws = top_k_top_p_both(x, k, p, u, a, b, trial);
    ASSERT_NE(draws.listed, lastmile::detail::kNotListed) << "trial " << trial << " k " << k;
    if (p < 0.99f) {
      EXPECT_LT(draws.listed, tied) << "trial " << trial;  // top-p masked some of the tie
    }
    EXPECT_EQ(draws.kept, draws.oracle) << "trial " << trial;
    EXPECT_EQ(draws.from_input, draws.oracle) << "trial " << trial;
  }
}

// Top-p decided on the row walks its entries in the oracle's order by value ranges: those that fit
// the keys are listed and sorted, a longer one is narrowed to the values it holds and split again.
// Rows with a cluster of neighbouring floats (half the row within 1000 ulps of 1, so the first
// split leaves it in one range) among a spread: the second split packs its values into chunks,
// one value held by more entries than the keys (a run listed by id from the top); some clusters of
// -0 / +0 and the smallest subnormals of either sign. After a top-k past the lists' room, to the
// bit the oracle's.
TEST(CpuBackendProperty, TopPOverRowWalksClustersOfNeighbouringFloatsInTheOraclesOrder) {
  std::mt19937_64 rng(53);
  Scratch a(cpu()), b(oracle());
  for (int trial = 0; trial < 24; ++trial) {
    const int64_t n = trial % 2 ? 40000 : 9000 + static_cast<int64_t>(rng() % 9000);
    const size_t room = lastmile::detail::sort_keys_size(static_cast<size_t>(n));
    const float centre = trial % 3 == 2 ? 0.0f : 1.0f;
    std::vector<float> x(static_cast<size_t>(n));
    std::uniform_real_distribution<float> spread(-30.0f, 30.0f);
    for (float& v : x) v = spread(rng);
    // centre's steps-th float away from zero (+0's: the subnormals, negative ones in odd trials)
    const uint32_t sign = centre == 0.0f && trial % 2 ? 0x80000000u : 0u;
    auto neighbour = [&](uint32_t steps) {
      return std::bit_cast<float>((std::bit_cast<uint32_t>(centre) | sign) + steps);
    };
    for (int64_t i = 0; i < n / 2; ++i) x[rng() % x.size()] = neighbour(rng() % 1000);
    if (centre == 0.0f)
      for (int i = 0; i < 2000; ++i) x[rng() % x.size()] = rng() % 2 ? -0.0f : 0.0f;
    const size_t run = room + 1 + rng() % room;  // one value past the keys' room, spaced out
    for (size_t i = 0; i < run; ++i) x[i * x.size() / run] = neighbour(500);
    const int64_t k = n / 2 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n / 2));
    const float p = std::uniform_real_distribution<float>(0.05f, 0.95f)(rng);
    std::vector<float> fast = x, slow = x;
    const size_t listed = cpu().apply_top_k_top_p(fast.data(), n, k, true, p, a.get(x.size()));
    oracle().apply_top_k_top_p(slow.data(), n, k, true, p, b.get(x.size()));
    ASSERT_EQ(listed, lastmile::detail::kNotListed) << "trial " << trial;  // decided on the row
    ASSERT_EQ(fast, slow) << "trial " << trial << " n " << n << " k " << k << " p " << p;
  }
}

// A row whose largest entries all lie in its first chunk: top-k's candidates (about 2k) pass
// that chunk's share of the lists' room (a seventh of it) but not the room, so the row is listed
// again in one piece and drawn, not declined: the oracle's steps' token, the same split backwards.
TEST(CpuBackendProperty, DrawFromInputRelistsAChunkPastItsShare) {
  std::mt19937_64 rng(59);
  Scratch a(cpu()), b(oracle());
  const int64_t n = 40000;
  for (int trial = 0; trial < 8; ++trial) {
    std::vector<float> x(static_cast<size_t>(n));
    std::normal_distribution<float> logit(0.0f, 1.0f);
    for (float& v : x) v = logit(rng);
    for (size_t i = 0; i < 5000; ++i) x[i] += 8.0f;  // the first chunk holds 6144 entries
    lastmile::detail::DrawParams params;
    params.top_k = 2000 + trial * 100;
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    const TokenId fast = cpu().draw_from_input(x.data(), lastmile::DType::f32, n, params, u,
                                               a.get(x.size()), kSerial);
    ASSERT_NE(fast, lastmile::detail::kNoInputDraw) << "trial " << trial;
    EXPECT_EQ(cpu().draw_from_input(x.data(), lastmile::DType::f32, n, params, u, a.get(x.size()),
                                    kBackwards),
              fast);
    std::vector<float> slow = x;
    oracle().apply_top_k_top_p(slow.data(), n, params.top_k, false, 1.0f, b.get(x.size()));
    expect_consistent_draw(slow, u, fast, oracle().draw(slow.data(), n, u, b.get(x.size())));
  }
}

// The draw straight from a caller's row (no working row) against the oracle's steps on the same
// row: convert, divide, min_p, top-k / top-p, draw. Every dtype, temperatures 1 and not, the
// five shapes it serves (top-p alone only when its band fits) and one it must decline. Asked for
// the raw summary, the same token, and at t = 1 the draw's statistics pass gives summarise_row's.
TEST(CpuBackendProperty, DrawFromInputEqualsTheOraclesSteps) {
  std::mt19937_64 rng(16);
  Scratch a(cpu()), b(oracle());
  int drawn = 0, drawn_top_p_alone = 0, summaries_learned = 0;
  for (int trial = 0; trial < 900; ++trial) {
    const std::vector<float> row = random_row(rng);
    const auto n = static_cast<int64_t>(row.size());
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 8.0f);
    lastmile::detail::DrawParams params;
    params.temperature =
        trial % 4 == 0 ? 1.0f : std::uniform_real_distribution<float>(0.3f, 2.0f)(rng);
    params.top_k = n;
    const int shape = trial % 6;
    switch (shape) {
      case 0:
        break;  // temperature only
      case 1:
        params.min_p = std::uniform_real_distribution<float>(0.001f, 0.5f)(rng);
        break;
      case 2:
        params.top_k = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        break;
      case 3:
        params.top_k = 1 + static_cast<int64_t>(rng() % 100);
        params.apply_top_p = true;
        params.top_p = std::uniform_real_distribution<float>(0.05f, 1.0f)(rng);
        break;
      case 4:  // top-p alone
        params.apply_top_p = true;
        params.top_p = std::uniform_real_distribution<float>(0.5f, 0.99f)(rng);
        break;
      case 5:  // declined: min_p with top-k
        params.min_p = 0.05f;
        params.top_k = 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(n));
        break;
    }
    params.top_k = std::min(params.top_k, n);
    std::vector<float> x(row.size());
    oracle().convert_row_divided(src, dtype, x.data(), n, params.temperature);
    if (params.min_p > 0.0f) oracle().apply_min_p(x.data(), n, params.min_p);
    oracle().apply_top_k_top_p(x.data(), n, params.top_k, params.apply_top_p, params.top_p,
                               b.get(x.size()));
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    const TokenId fast = cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial);
    // The row's chunks run last to first: the same token (a split never changes a result).
    EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kBackwards), fast)
        << "trial " << trial;
    // Asked for the raw summary: the same token, and what the draw learned at t = 1 (nothing at
    // another t) is summarise_row's to the bit.
    lastmile::detail::RawRowSummary learned, expected;
    EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial, &learned),
              fast)
        << "trial " << trial;
    if (learned.known) {
      ++summaries_learned;
      EXPECT_EQ(params.temperature, 1.0f) << "trial " << trial;
      ASSERT_TRUE(cpu().summarise_row(src, dtype, n, &expected, kSerial)) << "trial " << trial;
      EXPECT_EQ(std::bit_cast<uint32_t>(learned.values.max),
                std::bit_cast<uint32_t>(expected.values.max))
          << "trial " << trial;
      EXPECT_EQ(std::bit_cast<uint32_t>(learned.values.log_sum),
                std::bit_cast<uint32_t>(expected.values.log_sum))
          << "trial " << trial;
      ASSERT_EQ(learned.maxima.blocks, expected.maxima.blocks) << "trial " << trial;
      EXPECT_EQ(learned.maxima.block, expected.maxima.block) << "trial " << trial;
      for (size_t block = 0; block < learned.maxima.blocks; ++block)
        EXPECT_EQ(learned.maxima.max[block], expected.maxima.max[block]) << "trial " << trial;
    }
    if (shape == 5 && params.top_k < n) {
      EXPECT_EQ(fast, lastmile::detail::kNoInputDraw) << "trial " << trial;
      continue;
    }
    // min_p masking nothing, top-p alone, or a top-k whose candidates (about 2k, sampled) may
    // pass the lists' room.
    if (fast == lastmile::detail::kNoInputDraw) {
      EXPECT_TRUE(params.min_p > 0.0f || params.top_k == n ||
                  (cpu().list_room(n) < static_cast<size_t>(n) &&
                   4 * static_cast<size_t>(params.top_k) > cpu().list_room(n)))
          << "trial " << trial << " n " << n << " k " << params.top_k;
      continue;
    }
    ++drawn;
    drawn_top_p_alone += shape == 4;
    const TokenId slow = oracle().draw(x.data(), n, u, b.get(x.size()));
    expect_consistent_draw(x, u, fast, slow);
    if (x[slow] != -kInf && shape != 4) {  // top-p alone keeps the oracle's set up to rounding
      ASSERT_NE(x[fast], -kInf) << "trial " << trial << ": drew a masked token";
    }
  }
  EXPECT_GT(drawn, 500);
  EXPECT_GT(drawn_top_p_alone, 10);
  EXPECT_GT(summaries_learned, 60);
}

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

// A row whose log_softmax rounds distinct logits to one value: 40 tokens a float step apart at
// max - 3 (exact differences), so (x - max) - log_sum, near -3 - log(n), merges them in fours;
// they are scattered over ids so that value ties and id order disagree with logit order.
std::vector<float> rounding_ties_row(std::mt19937_64& rng, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  std::normal_distribution<float> body(-12.0f, 4.0f);
  for (float& v : x) v = body(rng);
  x[rng() % x.size()] = 0.0f;
  float v = -3.0f;
  for (int i = 0; i < 40; ++i, v = std::nextafter(v, 0.0f)) x[rng() % x.size()] = v;
  return x;
}

// Raw modes read the caller's row in place (no snapshot): its log_softmax terms, top-N and rank
// must be the oracle's on a snapshot (convert, log_softmax, top_n, rank_of) exactly, ties made by
// rounding included; raw_logits (the identity map) likewise. Every dtype.
TEST(CpuBackendProperty, RawLogprobsFromTheCallersRowEqualTheOraclesSnapshot) {
  std::mt19937_64 rng(17);
  Scratch a(cpu()), b(oracle());
  int merged_rows = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const std::vector<float> row =
        trial % 3 == 0 ? rounding_ties_row(rng, 64 + static_cast<int64_t>(rng() % 40000))
                       : random_row(rng);
    const auto n = static_cast<int64_t>(row.size());
    const auto dtype = static_cast<lastmile::DType>(trial % 3 == 0 ? 0 : trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 8.0f);
    std::vector<float> logits(row.size());
    oracle().convert_row(src, dtype, logits.data(), n);
    std::vector<float> snapshot = logits;
    oracle().log_softmax(snapshot.data(), n);
    std::set<float> distinct_values(snapshot.begin(), snapshot.end());
    merged_rows += distinct_values.size() < std::set<float>(logits.begin(), logits.end()).size();
    // Every fourth row up to 400 logprobs: more than the row's blocks or a quarter of its groups.
    const int64_t k =
        std::min<int64_t>(n, 1 + static_cast<int64_t>(rng() % (trial % 4 == 1 ? 400 : 20)));
    for (const bool log_softmax : {true, false}) {
      for (int pick = 0; pick < 3; ++pick) {
        const auto token = static_cast<TokenId>(pick == 0 ? 0 : rng() % n);
        const int64_t shown = pick == 2 ? 0 : k;  // rank alone
        std::vector<TokenId> ids_fast(shown), ids_slow(shown), ids(shown);
        std::vector<float> out_fast(shown), out_slow(shown), out(shown);
        const auto slow =
            oracle().input_raw_logprobs(src, dtype, n, log_softmax, token, shown, ids_slow.data(),
                                        out_slow.data(), b.get(row.size()));
        const auto fast =
            cpu().input_raw_logprobs(src, dtype, n, log_softmax, token, shown, ids_fast.data(),
                                     out_fast.data(), a.get(row.size()));
        // The oracle's map is its snapshot's log_softmax; its rank and top-N are the snapshot's.
        const std::vector<float>& active = log_softmax ? snapshot : logits;
        for (int64_t i = 0; i < n; ++i)
          ASSERT_EQ(slow.values(logits[i]), active[i]) << "trial " << trial << " token " << i;
        EXPECT_EQ(slow.rank, oracle().rank_of(active.data(), n, token)) << "trial " << trial;
        oracle().top_n(active.data(), n, shown, ids.data(), out.data(), b.get(row.size()));
        EXPECT_EQ(ids_slow, ids) << "trial " << trial;
        EXPECT_EQ(out_slow, out) << "trial " << trial;
        // The cpu's map: the oracle's max, the log-sum within logprobs' 1e-5; its rank and top-N
        // exactly the oracle's over the values that map gives.
        EXPECT_EQ(fast.values.max, slow.values.max) << "trial " << trial;
        EXPECT_NEAR(fast.values.log_sum, slow.values.log_sum, 1e-5f) << "trial " << trial;
        std::vector<float> fast_active(row.size());
        for (int64_t i = 0; i < n; ++i) fast_active[i] = fast.values(logits[i]);
        EXPECT_EQ(fast.rank, oracle().rank_of(fast_active.data(), n, token))
            << "trial " << trial << " token " << token << " log_softmax " << log_softmax;
        oracle().top_n(fast_active.data(), n, shown, ids.data(), out.data(), b.get(row.size()));
        EXPECT_EQ(ids_fast, ids) << "trial " << trial << " log_softmax " << log_softmax;
        EXPECT_EQ(out_fast, out) << "trial " << trial << " log_softmax " << log_softmax;
        // The row's chunks run last to first: the same values (a split never changes a result).
        std::vector<TokenId> ids_split(shown);
        std::vector<float> out_split(shown);
        const auto split =
            cpu().input_raw_logprobs(src, dtype, n, log_softmax, token, shown, ids_split.data(),
                                     out_split.data(), a.get(row.size()), nullptr, kBackwards);
        EXPECT_EQ(split.values.max, fast.values.max) << "trial " << trial;
        EXPECT_EQ(split.values.log_sum, fast.values.log_sum) << "trial " << trial;
        EXPECT_EQ(split.rank, fast.rank) << "trial " << trial;
        EXPECT_EQ(ids_split, ids_fast) << "trial " << trial;
        EXPECT_EQ(out_split, out_fast) << "trial " << trial;
      }
    }
  }
  EXPECT_GT(merged_rows, 150);  // the rounding-ties rows did merge values
}

// Top-p alone (p) at temperature t over a row of n, as the input draw takes it.
lastmile::detail::DrawParams top_p_alone(int64_t n, float t, float p) {
  lastmile::detail::DrawParams params;
  params.temperature = t;
  params.top_k = n;
  params.apply_top_p = true;
  params.top_p = p;
  return params;
}

// Top-p alone drawn straight from the caller's row src: never declined (unless `may_decline`: a
// band that may pass the lists' room), the same token with the row split in chunks, and the
// oracle's steps' token unless u sits within rounding of a CDF step. Whether it answered.
bool expect_top_p_draw_from_input(const void* src, lastmile::DType dtype, int64_t n,
                                  const lastmile::detail::DrawParams& params, double u, int trial,
                                  bool may_decline = false) {
  Scratch a(cpu()), b(oracle());
  std::vector<float> x(static_cast<size_t>(n));
  oracle().convert_row_divided(src, dtype, x.data(), n, params.temperature);
  oracle().apply_top_k_top_p(x.data(), n, n, true, params.top_p, b.get(x.size()));
  const TokenId fast = cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial);
  if (fast == lastmile::detail::kNoInputDraw) {
    EXPECT_TRUE(may_decline) << "trial " << trial;
    return false;
  }
  EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kBackwards), fast);
  expect_consistent_draw(x, u, fast, oracle().draw(x.data(), n, u, b.get(x.size())));
  return true;
}

// Top-p alone on flat rows (most tokens kept: the band is not a short list to the top) is drawn
// from the input too, by blocks: never declined, and the oracle's token unless u sits within
// rounding of a CDF step.
TEST(CpuBackendProperty, DrawFromInputTopPOnFlatRowsEqualsTheOraclesSteps) {
  std::mt19937_64 rng(19);
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t n = trial % 2 ? 40000 : 4097 + static_cast<int64_t>(rng() % 9000);
    std::normal_distribution<float> body(0.0f, trial % 3 == 0 ? 0.3f : 1.0f);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = body(rng);
    if (trial % 5 == 0) row[rng() % row.size()] = -kInf;
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 1.0f);
    const lastmile::detail::DrawParams params = top_p_alone(
        n, trial % 4 == 0 ? 1.0f : 0.7f, std::uniform_real_distribution<float>(0.3f, 0.99f)(rng));
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    expect_top_p_draw_from_input(src, dtype, n, params, u, trial);
  }
}

// Top-p where the crossing bucket of probabilities holds more entries than a worker's keys (an
// eighth of the row, sort_keys_size): rows on three levels a quarter apart, a third of the row
// each, so the bucket holds a third of it and is walked in sorted chunks, or, past the lists'
// room (a quarter of the row), the row is walked in the oracle's order. Working-row top-p keeps
// the oracle's set, and the draw from the caller's row gives the oracle's token (every dtype)
// or declines a band past the room.
TEST(CpuBackendProperty, TopPOverABandOfEqualProbabilitiesLongerThanTheKeysIsTheOraclesWalk) {
  std::mt19937_64 rng(37);
  int answered = 0;
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = trial % 3 == 0 ? 40000 : 4097 + static_cast<int64_t>(rng() % 9000);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = 0.25f * static_cast<float>(rng() % 3);
    if (trial % 4 == 0) row[rng() % row.size()] = 6.0f;  // a head over the levels
    const float p = std::uniform_real_distribution<float>(0.05f, 0.95f)(rng);
    expect_top_p_matches(row, p, trial);
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 1.0f);
    const lastmile::detail::DrawParams params = top_p_alone(n, trial % 2 ? 1.0f : 0.7f, p);
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    answered += expect_top_p_draw_from_input(src, dtype, n, params, u, trial, true);
  }
  EXPECT_GT(answered, 3);  // 5 of them: the rest list a band past the room
}

// Top-p over a row whose kept entries are all equal (a padding row of zeros, some of them -0; some
// rows with -inf entries too; some after a top-k, which keeps every tie): every q is 1 / count and
// the walk's order among equals is the larger id first, so the kept set is the oracle's exactly:
// the smallest ids, as many as the cumulative rule keeps. These rows once went through the
// chunked walk of the whole row (some 20 ms at 128k).
TEST(CpuBackendProperty, TopPOverARowOfEqualEntriesIsTheOraclesSet) {
  std::mt19937_64 rng(41);
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = trial % 4 == 0 ? 131072 : 1 + static_cast<int64_t>(rng() % 40000);
    const float value = trial % 3 == 0 ? 0.0f : std::uniform_real_distribution<float>(-20, 20)(rng);
    std::vector<float> row(static_cast<size_t>(n), value);
    if (value == 0.0f && trial % 2 == 0)
      for (float& v : row) v = rng() % 2 ? -0.0f : 0.0f;
    if (trial % 2 == 1)
      for (int64_t i = 0; i < n / 3; ++i) row[rng() % row.size()] = -kInf;
    const int64_t k = trial % 3 == 2 ? 1 + static_cast<int64_t>(rng() % n) : n;
    const float p = trial % 5 == 0 ? (trial % 10 == 0 ? 1e-9f : 0.9999f)
                                   : std::uniform_real_distribution<float>(0.01f, 0.99f)(rng);
    Scratch a(cpu()), b(oracle());
    std::vector<float> fast = row, slow = row;
    cpu().apply_top_k_top_p(fast.data(), n, k, true, p, a.get(row.size()));
    oracle().apply_top_k_top_p(slow.data(), n, k, true, p, b.get(row.size()));
    int64_t kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(std::isinf(fast[i]), std::isinf(slow[i])) << "trial " << trial << " id " << i;
      kept += !std::isinf(slow[i]);
    }
    if (std::count(row.begin(), row.end(), value) > 0) {
      EXPECT_GE(kept, 1) << "trial " << trial;
    }
  }
}

// A flat row's band is guessed from spread samples (64 runs of 16 entries, run r from
// r * (n / 64) down to a multiple of 16) before the statistics pass marks it. Rows of N(0, T)
// (quotients N(0, 1), flat at every temperature), in three kinds: plain; on a grid of 1/16 (over
// 256 equal probabilities at the crossing, so the band is not narrowed); and a third -inf (three
// whole blocks of it, the rest scattered; with p near 1 the band starts at -inf). In two thirds
// of them the samples are shifted by 3 up or down, so the guessed band lies above the crossing
// (a token below it stays) or below it (the crossing lies above it): the draw must see that and
// decide otherwise (a mutant that trusts the band either way fails here). Always the oracle's
// token, and the same with the row split in chunks.
TEST(CpuBackendProperty, DrawFromInputTopPOnFlatRowsChecksTheGuessedBand) {
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 72; ++trial) {
    const int64_t n = 40000 + static_cast<int64_t>(rng() % 20000);
    const float temperature = trial % 4 < 2 ? 1.0f : 0.7f;
    std::normal_distribution<float> body(0.0f, temperature);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = body(rng);
    const int kind = trial % 3;
    if (kind == 1) {
      for (float& v : row) v = std::round(v * 16.0f) / 16.0f;
    } else if (kind == 2) {
      for (size_t start : {size_t{0}, size_t{8192}, row.size() / 2048 * 2048 - 2048})
        std::fill(row.begin() + start, row.begin() + start + 2048, -kInf);
      for (float& v : row)
        if (rng() % 4 == 0) v = -kInf;
    }
    const int shift = trial / 3 % 3;  // none, up, down
    for (size_t run = 0; run < 64 && shift > 0; ++run)
      for (size_t j = 0; j < 16; ++j)
        row[run * (row.size() / 64) / 16 * 16 + j] += shift == 1 ? 3 : -3;
    const auto dtype = static_cast<lastmile::DType>(trial % 5 % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 1.0f);
    const lastmile::detail::DrawParams params = top_p_alone(
        n, temperature,
        kind == 2 && trial % 2 ? std::uniform_real_distribution<float>(0.99f, 0.999f)(rng)
                               : std::uniform_real_distribution<float>(0.3f, 0.99f)(rng));
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    expect_top_p_draw_from_input(src, dtype, n, params, u, trial);
  }
}

// Top-p alone on peaked rows (a head of 40 lifted 6..16 over a normal body, as the bench's) is
// drawn from the input after reading only the blocks that can hold the band, when the lowest kept
// logit lies within 2 of the ceiling the block masses give, else from the band guessed from
// samples; every fifth row puts most of the mass in one block far below its top, where the
// blocks' band is tried and fails (a mutant that skips that check fails here). Either way the
// kept set is the oracle's: u at the middle of each of the lowest kept tokens' CDF steps (and of
// some others) must draw that token. Both cases must occur.
TEST(CpuBackendProperty, DrawFromInputTopPOnPeakedRowsKeepsTheOraclesSet) {
  using lastmile::detail::cpu_selection::block_size;
  std::mt19937_64 rng(23);
  Scratch a(cpu()), b(oracle());
  int near_ceiling = 0, far_below = 0;
  for (int trial = 0; trial < 120; ++trial) {
    const int64_t n = trial % 3 == 0 ? 128256 : 20000 + static_cast<int64_t>(rng() % 30000);
    std::normal_distribution<float> body(0.0f, trial % 4 == 0 ? 1.0f : 2.5f);
    std::uniform_real_distribution<float> lift(6.0f, 16.0f);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = body(rng);
    for (int i = 0; i < 40; ++i) row[rng() % row.size()] += lift(rng);
    if (trial % 5 == 4) {  // a few blocks hold all the mass, most of it far below the top two
      for (float& v : row) v -= 40.0f;
      const size_t top = rng() % row.size(), second = rng() % row.size();
      for (int i = 0; i < 1000; ++i) row[(top + rng() % 1500) % row.size()] = -6.0f + body(rng) / 8;
      row[top] = 0.0f;
      row[second] = -1.0f;
    }
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 2.0f);
    const lastmile::detail::DrawParams params = top_p_alone(
        n, trial % 2 ? 1.0f : 0.7f, std::uniform_real_distribution<float>(0.5f, 0.99f)(rng));
    std::vector<float> x(row.size());
    oracle().convert_row_divided(src, dtype, x.data(), n, params.temperature);
    std::vector<float> kept = x;
    oracle().apply_top_k_top_p(kept.data(), n, n, true, params.top_p, b.get(x.size()));
    // Which case: the lowest kept logit against the blocks' ceiling (blocks by ascending max
    // until their masses pass 1 - p), in double.
    const double max = *std::max_element(x.begin(), x.end());
    const auto block = static_cast<int64_t>(block_size(n));
    std::vector<std::pair<double, double>> blocks;  // (max, mass)
    double total = 0;
    for (int64_t start = 0; start < n; start += block) {
      double block_max = -kInf, mass = 0;
      for (int64_t i = start; i < std::min(n, start + block); ++i) {
        block_max = std::max<double>(block_max, x[i]);
        mass += std::exp(x[i] - max);
      }
      blocks.emplace_back(block_max, mass);
      total += mass;
    }
    std::sort(blocks.begin(), blocks.end());
    double cumulative = 0, ceiling = max;
    for (const auto& [block_max, mass] : blocks)
      if ((cumulative += mass) > (1.0 - params.top_p) * total) {
        ceiling = block_max;
        break;
      }
    double lowest_kept = kInf;
    for (float v : kept)
      if (v != -kInf) lowest_kept = std::min<double>(lowest_kept, v);
    if (lowest_kept >= ceiling - 1.9)
      ++near_ceiling;  // the blocks' band holds
    else if (lowest_kept < ceiling - 2.1)
      ++far_below;  // a token below it stays
    // The oracle's CDF over its kept set, in id order; u at the middle of the steps of the 8
    // lowest kept tokens and of 8 others.
    std::vector<TokenId> kept_ids;
    for (int64_t i = 0; i < n; ++i)
      if (kept[i] != -kInf) kept_ids.push_back(static_cast<TokenId>(i));
    std::vector<TokenId> probes = kept_ids;
    std::sort(probes.begin(), probes.end(), [&](TokenId l, TokenId r) { return x[l] < x[r]; });
    probes.resize(std::min<size_t>(probes.size(), 8));
    for (int i = 0; i < 8; ++i) probes.push_back(kept_ids[rng() % kept_ids.size()]);
    double kept_total = 0;
    for (TokenId i : kept_ids) kept_total += std::exp(x[i] - max);
    for (const TokenId probe : probes) {
      double before = 0;
      for (TokenId i : kept_ids) {
        if (i == probe) break;
        before += std::exp(x[i] - max);
      }
      const double u = (before + 0.5 * std::exp(x[probe] - max)) / kept_total;
      const TokenId fast =
          cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial);
      ASSERT_NE(fast, lastmile::detail::kNoInputDraw) << "trial " << trial;
      EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kBackwards), fast)
          << "trial " << trial;
      expect_consistent_draw(kept, u, fast, probe);
      EXPECT_EQ(fast, oracle().draw(kept.data(), n, u, b.get(x.size()))) << "trial " << trial;
    }
  }
  EXPECT_GE(near_ceiling, 20);
  EXPECT_GE(far_below, 5);
}

// A u at the very top of the CDF on a flat row peaked mid-vocabulary: the blocks past the last
// kept token are all masked, and their kept mass (estimated from sums) may not be exactly 0; the
// draw must still be the last kept token, as the oracle's, never a masked one (review finding).
TEST(CpuBackendProperty, DrawFromInputTopPAtTheEndOfTheCdfIsTheLastKeptToken) {
  Scratch a(cpu()), b(oracle());
  for (const int64_t n : {40000, 128256}) {
    std::vector<float> x(static_cast<size_t>(n));
    const float slope = 60.0f / static_cast<float>(n);  // about e^-30 at the ends: a long band
    for (int64_t i = 0; i < n; ++i)
      x[static_cast<size_t>(i)] = -std::abs(static_cast<float>(i - n / 2)) * slope;
    for (const float top_p : {0.3f, 0.5f, 0.8f}) {
      lastmile::detail::DrawParams params;
      params.top_k = n;
      params.apply_top_p = true;
      params.top_p = top_p;
      std::vector<float> kept = x;
      oracle().apply_top_k_top_p(kept.data(), n, n, true, top_p, b.get(x.size()));
      for (const double u : {1.0 - 1e-9, 1.0 - 1e-12, 1.0 - 1e-15}) {
        const TokenId fast = cpu().draw_from_input(x.data(), lastmile::DType::f32, n, params, u,
                                                   a.get(x.size()), kSerial);
        ASSERT_GE(fast, 0) << "n " << n << " p " << top_p;
        EXPECT_NE(kept[static_cast<size_t>(fast)], -kInf)
            << "n " << n << " p " << top_p << " u " << u << " drew masked token " << fast;
        EXPECT_EQ(fast, oracle().draw(kept.data(), n, u, b.get(x.size())))
            << "n " << n << " p " << top_p << " u " << u;
      }
    }
  }
}

// A p so small that 1 - p rounds to 1 in float32 keeps only the largest token (spec §9.3). A row
// too short to be sampled takes the dense path with its band to the top, where the bisection over
// q would pass the largest's q when every mass rounds to at most 1: it must stop below it. N(0, 1)
// rows of 300 to 4000 tokens (over the 256 entries the bisection leaves to mask_band), every dtype.
TEST(CpuBackendProperty, DrawFromInputTopPOfTinyPOnAShortRowDrawsTheLargest) {
  std::mt19937_64 rng(43);
  Scratch a(cpu());
  for (int trial = 0; trial < 60; ++trial) {
    const int64_t n = 300 + static_cast<int64_t>(rng() % 3700);
    std::normal_distribution<float> body(0.0f, 1.0f);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = body(rng);
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 1.0f);
    std::vector<float> x(static_cast<size_t>(n));
    oracle().convert_row_divided(src, dtype, x.data(), n, 1.0f);
    const auto largest = static_cast<TokenId>(std::max_element(x.begin(), x.end()) - x.begin());
    const lastmile::detail::DrawParams params = top_p_alone(n, 1.0f, trial % 2 ? 1e-9f : 1e-8f);
    for (const double u : {1e-9, 0.5, 1.0 - 1e-9}) {
      EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial), largest)
          << "trial " << trial << " n " << n << " u " << u;
    }
  }
}

// Top-k with k at most a quarter of the row's groups takes the k-th largest group max as its
// threshold, drawing from the caller's row and on a working row (top-k / top-p, top-N). Rows
// that stress it, each also drawn at 8 values of u against the oracle's steps:
// LLM-shaped; the largest entries packed into a few neighbouring groups (most groups' maxima then
// lie far below the k-th entry); a value repeated across groups so the k-th falls inside the
// ties (all kept, spec §9.2); and rows with fewer than k finite entries (the k-th is -inf).
// Group sizes 64 to 1024, a short last group, every dtype, temperatures 1 and not, top-p or not.
TEST(CpuBackendProperty, DrawFromInputTopKByGroupMaximaEqualsTheOraclesSteps) {
  std::mt19937_64 rng(21);
  Scratch a(cpu()), b(oracle());
  const int64_t sizes[] = {12800, 40001, 65573, 200003, 300001, int64_t{1} << 20};
  // Groups of 64, 64, 128, 256, 512 and 1024 entries.
  const int64_t groups[] = {200, 626, 513, 782, 586, 1024};
  for (int trial = 0; trial < 53; ++trial) {
    // Every shape at every size but the largest (a few rows of 2^20 entries: the oracle sorts).
    const size_t which = trial < 50 ? static_cast<size_t>(trial / 5) % 5 : 5;
    const int64_t n = sizes[which];
    const int shape = trial % 5;
    const int64_t k = shape == 4 ? groups[which] / 4 : 1 + static_cast<int64_t>(rng() % 50);
    std::normal_distribution<float> body(0.0f, 2.0f);
    std::vector<float> row(static_cast<size_t>(n));
    for (float& v : row) v = body(rng);
    switch (shape) {
      case 0:  // LLM-shaped
        for (int i = 0; i < 30; ++i) row[rng() % n] += 8.0f;
        break;
      case 1: {  // the 3k largest packed from a random id on
        const int64_t from = static_cast<int64_t>(rng() % static_cast<uint64_t>(n - 3 * k));
        for (int64_t i = 0; i < 3 * k; ++i) row[from + i] = 20.0f + body(rng);
        break;
      }
      case 2: {  // one value at k / 2 + 1 + k ids spread over the row, k / 2 entries above it
        for (int64_t i = 0; i < k / 2; ++i) row[rng() % n] = 30.0f + body(rng) * 0.1f;
        for (int64_t i = 0; i < k + 1; ++i) row[rng() % n] = 25.0f;
        break;
      }
      case 3: {  // fewer than k finite entries
        std::fill(row.begin(), row.end(), -kInf);
        for (int64_t i = 0; i < k / 2; ++i) row[rng() % n] = body(rng);
        break;
      }
      case 4:  // the largest k the groups allow
        for (int i = 0; i < 300; ++i) row[rng() % n] += 8.0f;
        break;
    }
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 8.0f);
    lastmile::detail::DrawParams params;
    params.temperature = trial % 2 ? 1.0f : 0.7f;
    params.top_k = k;
    params.apply_top_p = trial % 4 < 2;
    params.top_p = 0.8f;
    std::vector<float> converted(row.size());
    oracle().convert_row_divided(src, dtype, converted.data(), n, params.temperature);
    std::vector<float> x = converted, fast = converted;
    oracle().apply_top_k_top_p(x.data(), n, k, params.apply_top_p, params.top_p, b.get(x.size()));
    // The working-row kernels take the same groups: top-k / top-p and top-N on the converted row.
    cpu().apply_top_k_top_p(fast.data(), n, k, params.apply_top_p, params.top_p, a.get(x.size()));
    ASSERT_EQ(fast, x) << "trial " << trial << " shape " << shape << " n " << n << " k " << k;
    std::vector<TokenId> ids_fast(k), ids_slow(k);
    std::vector<float> values_fast(k), values_slow(k);
    cpu().top_n(converted.data(), n, k, ids_fast.data(), values_fast.data(), a.get(x.size()));
    oracle().top_n(converted.data(), n, k, ids_slow.data(), values_slow.data(), b.get(x.size()));
    EXPECT_EQ(ids_fast, ids_slow) << "trial " << trial << " shape " << shape;
    EXPECT_EQ(values_fast, values_slow) << "trial " << trial << " shape " << shape;
    for (int draw = 0; draw < 8; ++draw) {
      const double u = (draw + std::uniform_real_distribution<double>(0.0, 1.0)(rng)) / 8;
      const TokenId drawn =
          cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial);
      ASSERT_EQ(drawn, oracle().draw(x.data(), n, u, b.get(x.size())))
          << "trial " << trial << " shape " << shape << " n " << n << " k " << k << " u " << u;
      EXPECT_EQ(cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kBackwards), drawn)
          << "trial " << trial;
    }
  }
}

// A working row holding +inf (the steps report it, but the kernels stay defined): the group
// maxima decline it and the sampled threshold decides, as the oracle.
TEST(CpuBackendProperty, WorkingRowTopKWithPlusInfEqualsTheOracle) {
  std::mt19937_64 rng(22);
  std::normal_distribution<float> body(0.0f, 2.0f);
  Scratch a(cpu()), b(oracle());
  std::vector<float> x(40000);
  for (float& v : x) v = body(rng);
  for (const size_t at : {7, 20000, 39999}) x[at] = kInf;
  const auto n = static_cast<int64_t>(x.size());
  std::vector<float> fast = x, slow = x;
  cpu().apply_top_k_top_p(fast.data(), n, 5, false, 1.0f, a.get(x.size()));
  oracle().apply_top_k_top_p(slow.data(), n, 5, false, 1.0f, b.get(x.size()));
  EXPECT_EQ(fast, slow);
  std::vector<TokenId> ids_fast(5), ids_slow(5);
  std::vector<float> values_fast(5), values_slow(5);
  cpu().top_n(x.data(), n, 5, ids_fast.data(), values_fast.data(), a.get(x.size()));
  oracle().top_n(x.data(), n, 5, ids_slow.data(), values_slow.data(), b.get(x.size()));
  EXPECT_EQ(ids_fast, ids_slow);
  EXPECT_EQ(values_fast, values_slow);
}

// Finite entries whose sums overflow (the maxima pass checks the sum of four vectors: a run of 64
// such entries fills every lane of several) are not +inf: the row is checked again entry by
// entry and drawn, on the paths that read maxima first (top-k's groups, min_p's blocks).
TEST(CpuBackendProperty, DrawFromInputTakesHugeFiniteEntries) {
  Scratch a(cpu()), b(oracle());
  for (const int64_t n : {40000, 300001}) {
    // A body near -20 without a tie run: top-k's k-th among equal maxima would list it whole,
    // past the lists' room (which the steps decide).
    std::vector<float> x(static_cast<size_t>(n));
    for (size_t i = 0; i < x.size(); ++i) x[i] = -20.0f - static_cast<float>(i % 1024) * 1e-3f;
    for (size_t i = 0; i < 64; ++i) x[1000 + i] = 3e38f - static_cast<float>(i) * 1e36f;
    for (int shape = 0; shape < 4; ++shape) {
      lastmile::detail::DrawParams params;
      params.top_k = shape % 2 == 0 ? 5 : n;
      params.min_p = shape % 2 == 1 ? 0.5f : 0.0f;
      params.temperature = shape < 2 ? 1.0f : 2.0f;  // the quotients stay finite
      std::vector<float> y(x.size());
      oracle().convert_row_divided(x.data(), lastmile::DType::f32, y.data(), n, params.temperature);
      if (params.min_p > 0.0f) oracle().apply_min_p(y.data(), n, params.min_p);
      oracle().apply_top_k_top_p(y.data(), n, params.top_k, false, 1.0f, b.get(x.size()));
      for (const double u : {0.1, 0.5, 0.9}) {
        EXPECT_EQ(cpu().draw_from_input(x.data(), lastmile::DType::f32, n, params, u,
                                        a.get(x.size()), kBackwards),
                  oracle().draw(y.data(), n, u, b.get(x.size())))
            << "n " << n << " shape " << shape << " u " << u;
      }
    }
  }
}

// NaN or +inf in the caller's row, or made by the division, sends the row to the steps (which
// name the cause), on every path and dtype; 40001 entries end in a short group of one.
TEST(CpuBackendProperty, DrawFromInputDeclinesBadRows) {
  Scratch a(cpu());
  for (const int64_t n : {7, 1000, 40000, 40001}) {
    const bool long_row = n >= 40000;
    // Offsets that put the bad entry in each vector of the maxima pass's groups of four (8 or 4
    // lanes: the pass checks each four vectors' sum), and the last entry.
    for (const size_t offset :
         {size_t{0}, size_t{9}, size_t{13}, size_t{22}, size_t{31}, SIZE_MAX}) {
      for (const float bad : {std::nanf(""), kInf, 3e38f}) {
        // Flat, then peaked far from the bad entry: min_p's blocks' maxima would read only the
        // peak's block, had their pass not checked the row.
        std::vector<float> x(static_cast<size_t>(n), long_row ? -20.0f : 0.5f);
        x[0] = 0.5f;
        x[std::min(static_cast<size_t>(n / 2) + offset, static_cast<size_t>(n) - 1)] = bad;
        for (int shape = 0; shape < 3; ++shape) {
          for (const auto dtype : {lastmile::DType::f32, lastmile::DType::bf16}) {
            std::vector<uint16_t> halves;  // bf16 of 3e38 is about 3e38: the division overflows
            const void* src = caller_row(x, dtype, halves, 1.0f);
            lastmile::detail::DrawParams params;
            params.temperature = 0.5f;  // 3e38 / 0.5 overflows
            params.top_k = shape == 2 ? 5 : n;
            params.min_p = shape == 1 ? 0.1f : 0.0f;
            EXPECT_EQ(
                cpu().draw_from_input(src, dtype, n, params, 0.5, a.get(x.size()), kBackwards),
                lastmile::detail::kNoInputDraw)
                << "n " << n << " bad " << bad << " shape " << shape << " offset " << offset
                << " dtype " << static_cast<int>(dtype);
          }
        }
      }
    }
  }
}

TEST(CpuBackendProperty, LogSoftmaxWithin1e5AndMinPKeepsTheOraclesSet) {
  std::mt19937_64 rng(13);
  int64_t compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const std::vector<float> x = random_row(rng);
    const auto n = static_cast<int64_t>(x.size());
    std::vector<float> fast = x, slow = x;
    cpu().log_softmax(fast.data(), n);
    oracle().log_softmax(slow.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      if (std::isinf(slow[i])) {
        ASSERT_EQ(fast[i], slow[i]);
      } else {
        ASSERT_NEAR(fast[i], slow[i], 1e-5) << "trial " << trial << " token " << i;
        ++compared;
      }
    }
    const float min_p = std::uniform_real_distribution<float>(0.001f, 0.5f)(rng);
    fast = x;
    slow = x;
    cpu().apply_min_p(fast.data(), n, min_p);
    oracle().apply_min_p(slow.data(), n, min_p);
    ASSERT_EQ(fast, slow) << "trial " << trial << " min_p " << min_p;
  }
  EXPECT_GT(compared, 100000);
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

// min_p's draw from a caller's row skips the softmax's sum only when no entry lies in min_p_cut's
// bracket; entries planted in it must be decided as the statistics pass decides them, with its
// sum (caller_row_softmax's, the same pass). Rows of 8 blocks: a body far below the cut; the max
// 0, every float of the bracket (up to 24) and the next one below it at random ids of one block.
// The token for 16 values of u across (0, 1) must be the oracle's draw over the row masked by that
// decision; planted entries kept and masked by the sum must both occur.
TEST(CpuBackendProperty, DrawFromInputMinPDecidesItsBracketWithTheSum) {
  namespace sel = lastmile::detail::cpu_selection;
  std::mt19937_64 rng(20);
  Scratch a(cpu()), b(oracle());
  const int64_t n = 16384;
  int kept_by_sum = 0, masked_by_sum = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<float> x(static_cast<size_t>(n));
    const float body = -9.0f - 5.0f * std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    for (float& v : x) v = body - std::uniform_real_distribution<float>(0.0f, 1.0f)(rng);
    std::vector<size_t> ids(2048);  // within one block, so that few groups' maxima reach the cut
    std::iota(ids.begin(), ids.end(), 2048 * (rng() % 8));
    std::shuffle(ids.begin(), ids.end(), rng);
    x[ids[0]] = 0.0f;
    const float min_p = std::uniform_real_distribution<float>(0.3f, 0.9f)(rng);
    const sel::MinPCut cut = sel::min_p_cut(0.0f, min_p);
    size_t planted = 1;
    for (float v = std::nextafter(cut.masked_below, -kInf); v <= cut.kept_from && planted <= 25;
         v = std::nextafter(v, kInf))
      x[ids[planted++]] = v;
    float max = 0;
    double total = 0;
    lastmile::detail::BlockMaxima maxima;
    ASSERT_TRUE(sel::caller_row_softmax(x.data(), lastmile::DType::f32, n, &max, &total, &maxima));
    const auto inv_sum = static_cast<float>(1.0 / total);
    std::vector<float> masked = x;
    for (size_t i = 1; i < planted; ++i) {
      const float v = x[ids[i]];
      const bool kept = !(std::exp(v - max) * inv_sum < min_p * inv_sum);
      if (!kept) masked[ids[i]] = -kInf;
      kept_by_sum += kept && v < cut.kept_from;
      masked_by_sum += !kept && v >= cut.masked_below;
    }
    for (float& v : masked)
      if (v < cut.masked_below) v = -kInf;
    lastmile::detail::DrawParams params;
    params.top_k = n;
    params.min_p = min_p;
    for (int k = 0; k < 16; ++k) {
      const double u = (k + 0.5) / 16;
      const TokenId fast = cpu().draw_from_input(x.data(), lastmile::DType::f32, n, params, u,
                                                 a.get(x.size()), kSerial);
      ASSERT_EQ(fast, oracle().draw(masked.data(), n, u, b.get(x.size())))
          << "trial " << trial << " u " << u << " min_p " << min_p;
    }
  }
  EXPECT_GT(kept_by_sum, 10);
  EXPECT_GT(masked_by_sum, 10);
}

// min_p alone on LLM-shaped rows (an N(0, 2.5) body under a head of 40 tokens lifted by 6..16),
// which min_p decides by group maxima with no Exp pass, at vocabularies whose row blocks of 2048
// were too few for that (1000, 4097, 32000) and at 128256: every dtype, temperatures 1 and not.
// The token must be the oracle's over its min_p-masked row; split backwards, the same token.
TEST(CpuBackendProperty, DrawFromInputMinPOnLlmRowsEqualsTheOraclesSteps) {
  std::mt19937_64 rng(21);
  const int64_t sizes[] = {1000, 4097, 32000, 128256};
  for (int trial = 0; trial < 80; ++trial) {
    const int64_t n = sizes[trial % 4];
    std::vector<float> row(static_cast<size_t>(n));
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (float& v : row) v = body(rng);
    for (int i = 0; i < 40; ++i)
      row[rng() % row.size()] += std::uniform_real_distribution<float>(6.0f, 16.0f)(rng);
    const auto dtype = static_cast<lastmile::DType>(trial / 4 % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 8.0f);
    lastmile::detail::DrawParams params;
    params.temperature = trial % 2 == 0 ? 1.0f : 0.7f;
    params.top_k = n;
    params.min_p = std::uniform_real_distribution<float>(0.02f, 0.5f)(rng);
    std::vector<float> x(row.size());
    oracle().convert_row_divided(src, dtype, x.data(), n, params.temperature);
    oracle().apply_min_p(x.data(), n, params.min_p);
    const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
    expect_min_p_draw_from_input(src, dtype, n, params, u, x, trial);
  }
}

// Blocks read and lists lowered through working_row_of's rows (the tests run serially).
int g_working_reads = 0, g_lowered_lists = 0;

// A PenalisedRow over the caller's float32 row src whose working row after step 6 is `working`:
// reads copy its blocks; lower checks that each listed value is the caller's entry (and the ids
// ascending), then hands back the working row's.
// seen, if not null: the ids it hands PenalisedRow::seen (the tokens step 6 may change).
lastmile::detail::PenalisedRow working_row_of(const std::vector<float>& src,
                                              const std::vector<float>& working,
                                              const std::vector<TokenId>* seen = nullptr) {
  struct Rows {
    const std::vector<float>* src;
    const std::vector<float>* working;
    const std::vector<TokenId>* seen;
  };
  static thread_local Rows rows;
  rows = {&src, &working, seen};
  return {src.data(), lastmile::DType::f32, &rows,
          [](void* context, int64_t start, int64_t count, float* out) {
            const std::vector<float>& w = *static_cast<Rows*>(context)->working;
            ++g_working_reads;
            std::copy(w.begin() + start, w.begin() + start + count, out);
          },
          [](void* context, const int32_t* ids, float* values, size_t count) {
            const Rows& r = *static_cast<Rows*>(context);
            ++g_lowered_lists;
            for (size_t i = 0; i < count; ++i) {
              ASSERT_TRUE(i == 0 || ids[i - 1] < ids[i]) << "ids ascending";
              const auto id = static_cast<size_t>(ids[i]);
              ASSERT_EQ(std::bit_cast<uint32_t>(values[i]), std::bit_cast<uint32_t>((*r.src)[id]))
                  << "the caller's entry " << id;
              values[i] = (*r.working)[id];
            }
          },
          seen == nullptr ? nullptr : +[](void* context, std::span<const TokenId> spans[3]) {
            spans[0] = *static_cast<Rows*>(context)->seen;
            return true;
          }};
}

// draw_from_penalised_input over working_row_of(src, working) with uniform u, asking for the raw
// summary or not: kNoInputDraw (declined, counted) or draw_from_input's token over the working
// row with the same u (answered, counted); a summary asked for must be summarise_row's of src.
void expect_the_working_rows_draw(const std::vector<float>& src, const std::vector<float>& working,
                                  const lastmile::detail::DrawParams& params, double u,
                                  bool summarised, Scratch& a, Scratch& b, int* answered,
                                  int* declined, const std::string& where) {
  const auto n = static_cast<int64_t>(src.size());
  lastmile::detail::RawRowSummary summary, expected;
  const TokenId fast =
      cpu().draw_from_penalised_input(working_row_of(src, working), n, params, u, a.get(src.size()),
                                      summarised ? &summary : nullptr, kSerial);
  if (summarised) {
    ASSERT_TRUE(cpu().summarise_row(src.data(), lastmile::DType::f32, n, &expected, kSerial));
    ASSERT_TRUE(summary.known) << where;
    EXPECT_EQ(summary.values.max, expected.values.max) << where;
    EXPECT_EQ(summary.values.log_sum, expected.values.log_sum) << where;
  }
  if (fast == lastmile::detail::kNoInputDraw) {
    ++*declined;
    return;
  }
  ++*answered;
  EXPECT_EQ(fast, cpu().draw_from_input(working.data(), lastmile::DType::f32, n, params, u,
                                        b.get(src.size()), kSerial))
      << where << " u " << u << " top_k " << params.top_k << " min_p " << params.min_p;
}

// The ids of src's 100 largest entries first, largest first (the rest after them).
std::vector<int64_t> largest_hundred_first(const std::vector<float>& src) {
  std::vector<int64_t> order(src.size());
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + 100, order.end(),
                    [&](int64_t x, int64_t y) { return src[x] > src[y]; });
  return order;
}

// src's working row after a step 6 that lowers entries, by `kind`: the largest 3 (0), 60 of the
// largest 100 (1) or 200 at random (2), each as a repetition penalty of 1.3 would, then by 0.5 to
// 8 more. order: largest_hundred_first(src).
std::vector<float> lowered_working_row(const std::vector<float>& src,
                                       const std::vector<int64_t>& order, int kind,
                                       std::mt19937_64& rng) {
  std::vector<float> working = src;
  std::uniform_real_distribution<float> drop(0.5f, 8.0f);
  const int lowered = kind == 0 ? 3 : kind == 1 ? 60 : 200;
  for (int i = 0; i < lowered; ++i) {
    const int64_t id = kind == 0   ? order[i]
                       : kind == 1 ? order[rng() % 100]
                                   : static_cast<int64_t>(rng() % src.size());
    working[id] = working[id] > 0 ? working[id] / 1.3f : working[id] * 1.3f;
    working[id] -= drop(rng);
  }
  return working;
}

// draw_from_penalised_input reads a working row only through its blocks, bounded by the caller's
// row: its token must be draw_from_input's over that working row whenever it answers. Caller's
// rows with a head of 3 or 30 tokens, or flat; the working row lowers 200 entries, the largest few
// among them (the max moves to another block); some rows plant an entry within rounding of min_p's
// cut (the backend must decline: only the sum decides it). min_p from 1e-3 (most blocks reach the
// cut: declined) to 0.5, temperatures 1 and not, with and without the raw summary, whose terms must
// be summarise_row's. Rows whose max keeps its place draw from a list of the entries near it, the
// others from their blocks. A shape it does not serve is declined before any read.
TEST(CpuBackendProperty, DrawFromPenalisedInputEqualsTheDrawFromTheWorkingRow) {
  namespace sel = lastmile::detail::cpu_selection;
  std::mt19937_64 rng(21);
  Scratch a(cpu()), b(oracle());
  int answered = 0, declined = 0;
  for (int trial = 0; trial < 300; ++trial) {
    const int64_t sizes[] = {8195, 16384, 40000};  // 5 blocks (the last of 3 tokens), 8, 20
    const int64_t n = sizes[trial / 3 % 3];
    std::normal_distribution<float> body(0.0f, 1.0f);
    std::vector<float> src(static_cast<size_t>(n));
    for (float& v : src) v = body(rng);
    if (trial % 5 != 0)  // a head of 3 or 30 tokens
      for (int i = 0; i < (trial % 2 == 0 ? 3 : 30); ++i) src[rng() % n] += 14.0f;
    std::vector<float> working = src;
    std::vector<int64_t> order(src.size());
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + 4, order.end(),
                      [&](int64_t x, int64_t y) { return src[x] > src[y]; });
    for (int i = 0; i < 200; ++i) {
      const int64_t id = i < 3 ? order[i] : static_cast<int64_t>(rng() % n);
      working[id] -= 0.5f + std::uniform_real_distribution<float>(0.0f, 6.0f)(rng);
    }
    lastmile::detail::DrawParams params;
    params.temperature = trial % 3 == 0 ? 1.0f : (trial % 3 == 1 ? 0.7f : 1.6f);
    params.top_k = n;
    const float min_ps[] = {0.05f, 0.3f, 0.5f, 1e-3f};
    params.min_p = min_ps[trial % 4];
    if (params.temperature == 1.0f && trial % 2 == 0) {  // an entry in the cut's range
      // The max made 0, where logits are finest: the range holds a float or two.
      const float max = *std::max_element(working.begin(), working.end());
      for (float& v : working) v -= max;
      for (float& v : src) v -= max;
      const sel::MinPCut cut = sel::min_p_cut(0.0f, params.min_p);
      if (cut.masked_below < cut.kept_from) working[order[3]] = cut.masked_below;
      src[order[3]] = std::max(src[order[3]], working[order[3]]);
    }
    for (const bool summarised : {false, true})
      for (int k = 0; k < 8; ++k)
        expect_the_working_rows_draw(src, working, params, (k + 0.5) / 8, summarised, a, b,
                                     &answered, &declined, "trial " + std::to_string(trial));
    const int reads = g_working_reads, lowered = g_lowered_lists;
    params.top_k = 50;  // min_p with top-k: not served
    EXPECT_EQ(cpu().draw_from_penalised_input(working_row_of(src, working), n, params, 0.5,
                                              a.get(src.size()), nullptr, kSerial),
              lastmile::detail::kNoInputDraw);
    EXPECT_EQ(g_working_reads, reads);
    EXPECT_EQ(g_lowered_lists, lowered);
  }
  EXPECT_GT(answered, 2000);  // 624 without the list of the entries near the max
  EXPECT_GT(declined, 2000);
}

// Top-k (then top-p) from a penalised row lists its candidates from the caller's row and lowers
// them through PenalisedRow::lower: its token must be draw_from_input's over the working row
// whenever it answers. LLM-shaped rows (a body and 40 lifted tokens); the working row lowers the
// largest 3, 60 of the largest 100 (most candidates drop: it must decline, or still be right),
// or 200 at random; top-k 1, 20 and 50, with top-p 0.9 or not, temperatures 1 and 0.7; some rows
// hold ties among the largest. A row with NaN is declined (the steps report it).
TEST(CpuBackendProperty, PenalisedTopKDrawEqualsTheDrawFromTheWorkingRow) {
  std::mt19937_64 rng(23);
  Scratch a(cpu()), b(oracle());
  int answered = 0, declined = 0;
  for (int trial = 0; trial < 90; ++trial) {
    const int64_t n = trial % 2 == 0 ? 40000 : 128256;
    std::vector<float> src(static_cast<size_t>(n));
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (float& v : src) v = body(rng);
    for (int i = 0; i < 40; ++i)
      src[rng() % n] += std::uniform_real_distribution<float>(6.0f, 16.0f)(rng);
    if (trial % 5 == 0)  // ties among the largest
      for (int i = 0; i < 6; ++i) src[rng() % n] = 25.0f;
    const std::vector<int64_t> order = largest_hundred_first(src);
    const std::vector<float> working = lowered_working_row(src, order, trial % 3, rng);
    lastmile::detail::DrawParams params;
    const int64_t top_ks[] = {1, 20, 50};
    params.top_k = top_ks[trial / 3 % 3];
    params.temperature = trial % 4 < 2 ? 1.0f : 0.7f;
    params.apply_top_p = trial % 7 < 4;
    params.top_p = 0.9f;
    const int lowered_before = g_lowered_lists;
    for (int k = 0; k < 6; ++k)  // the raw summary learned on the way (odd k), or not asked
      expect_the_working_rows_draw(src, working, params, (k + 0.5) / 6, k % 2 == 1, a, b, &answered,
                                   &declined, "trial " + std::to_string(trial));
    EXPECT_GT(g_lowered_lists, lowered_before) << "trial " << trial;
    src[static_cast<size_t>(order[50])] = std::numeric_limits<float>::quiet_NaN();
    EXPECT_EQ(cpu().draw_from_penalised_input(working_row_of(src, working), n, params, 0.5,
                                              a.get(src.size()), nullptr, kSerial),
              lastmile::detail::kNoInputDraw);
  }
  EXPECT_GT(answered, 400);
  EXPECT_GT(declined, 10);
}

// Top-p alone from a penalised row lists the entries within 10 of the raw max, lowers them, and
// bounds the rest by the raw summary's total: its token must be draw_from_input's over the working
// row whenever it answers. LLM-shaped rows (a body of N(0, 2.5) and 40 lifted tokens, or a body of
// N(0, 4) whose top reaches the list), flat N(0, 1) rows (the body decides: it must decline, or
// still be right), some with ties among the largest, a quarter in bf16's values (ties all through
// the row); the working row lowers the largest 3, 60 of the largest 100, or 200 at random; top-p
// 0.5 to 0.99 at temperatures 0.7, 1 and 1.6. Not asked for the raw summary (no logprobs), it
// learns one and gives what it gives with it, the same token or a decline; a row with NaN is
// declined either way.
TEST(CpuBackendProperty, PenalisedTopPDrawEqualsTheDrawFromTheWorkingRow) {
  std::mt19937_64 rng(29);
  Scratch a(cpu()), b(oracle());
  int answered = 0, declined = 0;
  for (int trial = 0; trial < 144; ++trial) {  // every shape, temperature, top-p and size
    const int64_t n = trial / 72 == 0 ? 40000 : 128256;
    std::vector<float> src(static_cast<size_t>(n));
    const int shape = trial % 6;  // 0-3: LLM-shaped, 4: a wide body, 5: flat
    std::normal_distribution<float> body(0.0f, shape == 5 ? 1.0f : shape == 4 ? 4.0f : 2.5f);
    for (float& v : src) v = body(rng);
    if (shape != 5)
      for (int i = 0; i < 40; ++i)
        src[rng() % n] += std::uniform_real_distribution<float>(6.0f, 16.0f)(rng);
    if (trial % 7 == 0)  // ties among the largest
      for (int i = 0; i < 6; ++i) src[rng() % n] = 25.0f;
    if (trial % 4 == 3)  // bf16's values: ties everywhere
      for (float& v : src) v = std::bit_cast<float>(std::bit_cast<uint32_t>(v) & 0xffff0000u);
    const std::vector<int64_t> order = largest_hundred_first(src);
    const int kind = static_cast<int>(rng() % 3);
    const std::vector<float> working = lowered_working_row(src, order, kind, rng);
    lastmile::detail::DrawParams params;
    params.top_k = n;
    params.apply_top_p = true;
    const float top_ps[] = {0.5f, 0.9f, 0.95f, 0.99f};
    params.top_p = top_ps[trial / 18 % 4];
    const float temperatures[] = {0.7f, 1.0f, 1.6f};
    params.temperature = temperatures[trial / 6 % 3];
    const std::string where = "trial " + std::to_string(trial);
    for (int k = 0; k < 8; ++k) {
      const double u = (k + 0.5) / 8;
      expect_the_working_rows_draw(src, working, params, u, true, a, b, &answered, &declined,
                                   where);
      lastmile::detail::RawRowSummary summary;
      EXPECT_EQ(cpu().draw_from_penalised_input(working_row_of(src, working), n, params, u,
                                                a.get(src.size()), nullptr, kSerial),
                cpu().draw_from_penalised_input(working_row_of(src, working), n, params, u,
                                                a.get(src.size()), &summary, kSerial))
          << where << " u " << u;
    }
    src[static_cast<size_t>(order[50])] = std::numeric_limits<float>::quiet_NaN();
    for (bool summarised : {false, true}) {
      lastmile::detail::RawRowSummary summary;
      EXPECT_EQ(cpu().draw_from_penalised_input(working_row_of(src, working), n, params, 0.5,
                                                a.get(src.size()), summarised ? &summary : nullptr,
                                                kSerial),
                lastmile::detail::kNoInputDraw)
          << where;
    }
  }
  EXPECT_GT(answered, 400);
  EXPECT_GT(declined, 50);
}

// Where the raw summary's bound leaves top-p's call open (a max standing low: hundreds listed,
// their walk close to the cut), a row whose seen tokens are at hand is retried with the unlisted
// weight itself, at most the caller's unlisted entries' and at least that less the seen ones'.
// The bench mix's shape (LLM-shaped 128k rows, top-p 0.95 at T 0.8), the working row lowering
// 2000 tokens at random (some twice) as penalties would, or 20000 by up to 12 (the seen tokens
// then hold a large share of the unlisted weight): the token must be the working row's whenever
// it answers, and the same as without the list where that answered; the retry must answer many
// the bound left open.
TEST(CpuBackendProperty, PenalisedTopPRetriesWithTheUnlistedWeightItself) {
  std::mt19937_64 rng(41);
  Scratch a(cpu()), b(oracle());
  int open = 0, decided_on_retry = 0;
  for (int trial = 0; trial < 48; ++trial) {
    const int64_t n = 128256;
    std::vector<float> src(static_cast<size_t>(n));
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (float& v : src) v = body(rng);
    for (int i = 0; i < 40; ++i)
      src[rng() % n] += std::uniform_real_distribution<float>(6.0f, 16.0f)(rng);
    std::vector<float> working = src;
    std::vector<TokenId> seen(trial % 3 == 2 ? 20000 : 2000);
    std::uniform_real_distribution<float> drop(0.0f, trial % 3 == 2 ? 12.0f : 0.3f);
    for (TokenId& id : seen) {
      id = static_cast<TokenId>(rng() % n);
      float& v = working[static_cast<size_t>(id)];
      v = (v > 0 ? v / 1.1f : v * 1.1f) - drop(rng);
    }
    lastmile::detail::DrawParams params;
    params.top_k = n;
    params.apply_top_p = true;
    params.top_p = 0.95f;
    params.temperature = 0.8f;
    for (int k = 0; k < 4; ++k) {
      const double u = (k + 0.5) / 4;
      const std::string where = "trial " + std::to_string(trial) + " u " + std::to_string(u);
      lastmile::detail::RawRowSummary summary;
      const TokenId bound = cpu().draw_from_penalised_input(
          working_row_of(src, working), n, params, u, a.get(src.size()), &summary, kSerial);
      const TokenId retried = cpu().draw_from_penalised_input(
          working_row_of(src, working, &seen), n, params, u, a.get(src.size()), &summary, kSerial);
      if (bound != lastmile::detail::kNoInputDraw) {
        EXPECT_EQ(retried, bound) << where;
        continue;
      }
      ++open;
      if (retried == lastmile::detail::kNoInputDraw) continue;
      ++decided_on_retry;
      EXPECT_EQ(retried, cpu().draw_from_input(working.data(), lastmile::DType::f32, n, params, u,
                                               b.get(src.size()), kSerial))
          << where;
    }
  }
  EXPECT_GT(open, 20);
  EXPECT_GT(decided_on_retry, open * 3 / 4);
}

// The retry's range for the unlisted weight: the caller's unlisted entries' weights, less the
// seen tokens' among them. A max at 0 (token 1000), token 5 at -3, 2000 unlisted tokens at -11
// (their mass 0.0334, against token 5's 0.0498) over a body at -40; top-p's cut keeps token 5
// only if enough of that mass stays. With a tenth of the 2000 seen and lowered to -40, at least
// 0.0301 stays: token 5 kept, and u 0.02 draws it (first in id order), where the bound alone (the
// mass anywhere from 0) declined. With all 2000 seen, none need stay: the call stays open (a
// retry that ignored what the seen tokens may have lost would keep token 5; the working row masks
// it and draws token 1000).
TEST(CpuBackendProperty, PenalisedTopPRetryAllowsForTheSeenTokensWeight) {
  const int64_t n = 40000;
  std::vector<float> src(static_cast<size_t>(n), -40.0f);
  src[1000] = 0.0f;
  src[5] = -3.0f;
  for (size_t i = 2000; i < 4000; ++i) src[i] = -11.0f;
  Scratch a(cpu()), b(oracle());
  for (const int seen_count : {200, 2000}) {
    std::vector<float> working = src;
    std::vector<TokenId> seen;
    for (int i = 0; i < seen_count; ++i) {
      seen.push_back(2000 + i);
      working[static_cast<size_t>(2000 + i)] = -40.0f;
    }
    lastmile::detail::DrawParams params;
    params.top_k = n;
    params.apply_top_p = true;
    params.top_p = seen_count == 200 ? 0.935f : 0.938f;
    const TokenId expected = cpu().draw_from_input(working.data(), lastmile::DType::f32, n, params,
                                                   0.02, b.get(src.size()), kSerial);
    EXPECT_EQ(expected, seen_count == 200 ? 5 : 1000);
    lastmile::detail::RawRowSummary summary;
    EXPECT_EQ(cpu().draw_from_penalised_input(working_row_of(src, working), n, params, 0.02,
                                              a.get(src.size()), &summary, kSerial),
              lastmile::detail::kNoInputDraw)
        << "the bound alone, " << seen_count << " seen";
    EXPECT_EQ(cpu().draw_from_penalised_input(working_row_of(src, working, &seen), n, params, 0.02,
                                              a.get(src.size()), &summary, kSerial),
              seen_count == 200 ? expected : lastmile::detail::kNoInputDraw)
        << seen_count << " seen";
  }
}

// Listed entries that step 6 lowers below the list's bound (raw max - 10) stay in top-p's total:
// a max at 0 (token 1000), token 5 at -3, and 100 tokens at -9 lowered to -10.5, over a body at
// -40. Top-p's cut sits halfway through the lowered tokens' mass above token 5's weight, so token 5
// is kept only because their mass counts; u 0.02 then draws it (it comes first in id order).
// Leaving their mass out masks token 5 and draws token 1000. A cut at token 5's cumulative sum,
// or u at its boundary with token 1000, is too close to call: declined.
TEST(CpuBackendProperty, PenalisedTopPCountsTheListedEntriesLoweredBelowTheList) {
  const int64_t n = 40000;
  std::vector<float> src(static_cast<size_t>(n), -40.0f);
  src[1000] = 0.0f;
  src[5] = -3.0f;
  std::vector<float> working = src;
  for (size_t i = 2000; i < 2100; ++i) {
    src[i] = -9.0f;
    working[i] = -10.5f;
  }
  const double lowered_mass = 100 * std::exp(-10.5), weight_5 = std::exp(-3.0);
  lastmile::detail::DrawParams params;
  params.top_k = n;
  params.apply_top_p = true;
  params.top_p =
      static_cast<float>(1.0 - (weight_5 + lowered_mass / 2) / (1.0 + weight_5 + lowered_mass));
  Scratch a(cpu()), b(oracle());
  int answered = 0, declined = 0;
  expect_the_working_rows_draw(src, working, params, 0.02, true, a, b, &answered, &declined, "u");
  EXPECT_EQ(answered, 1);
  EXPECT_EQ(cpu().draw_from_input(working.data(), lastmile::DType::f32, n, params, 0.02,
                                  b.get(src.size()), kSerial),
            5);
  expect_the_working_rows_draw(src, working, params, weight_5 / (1.0 + weight_5), true, a, b,
                               &answered, &declined, "u at the boundary");
  EXPECT_EQ(declined, 1);
  params.top_p =
      static_cast<float>(1.0 - (weight_5 + lowered_mass) / (1.0 + weight_5 + lowered_mass));
  expect_the_working_rows_draw(src, working, params, 0.02, true, a, b, &answered, &declined,
                               "the cut at token 5");
  EXPECT_EQ(declined, 2);
  EXPECT_EQ(answered, 1);
}

// The bound is strict: with T != 1 an unlisted entry just below the bound m can have m's own
// quotient. Top-k 1 at T 1.1 over a row of zeros with two entries at m (the 2nd largest group
// max), one lowered below it, and an unlisted entry at the float below m whose quotient rounds to
// m's: only that entry and the unlowered one tie for the top, so the draw must keep both (the
// working row's draw does), or decline. Counting quotients equal to the bound's as above it keeps
// only the listed one.
TEST(CpuBackendProperty, PenalisedTopKBoundIsStrictUnderTheDivision) {
  const float t = 1.1f;
  float m = 5.0f;  // in [4.4, 8), m / 1.1's floats are coarser than the inputs': a collision
  while ((std::nextafter(m, 0.0f) / t) != (m / t)) m = std::nextafter(m, 8.0f);
  ASSERT_LT(m, 8.0f);
  const int64_t n = 4096;  // 64 groups of 64
  std::vector<float> src(static_cast<size_t>(n), 0.0f);
  src[10] = std::nextafter(m, 0.0f);  // unlisted (below m), the lowest id of the tie
  src[200] = m;                       // listed, kept
  src[300] = m;                       // listed, lowered
  std::vector<float> working = src;
  working[300] = 1.0f;
  lastmile::detail::DrawParams params;
  params.top_k = 1;
  params.temperature = t;
  Scratch a(cpu()), b(oracle());
  int answered = 0, declined = 0;
  for (const double u : {0.25, 0.75})  // the working row's draw: token 10, then 200
    expect_the_working_rows_draw(src, working, params, u, false, a, b, &answered, &declined, "u");
  EXPECT_EQ(cpu().draw_from_input(working.data(), lastmile::DType::f32, n, params, 0.25,
                                  b.get(src.size()), kSerial),
            10);
  EXPECT_EQ(declined, 2);  // only the quotient at the bound is above it: fewer than k
}

// A Sampler's config for `rows` rows of `vocab` on `backend`.
lastmile::SamplerConfig backend_config(int64_t vocab, int64_t rows, lastmile::BackendKind backend) {
  lastmile::SamplerConfig config;
  config.vocab_size = vocab;
  config.max_batch = rows;
  config.backend = backend;
  return config;
}

// Rows of logits for a Sampler, their histories and the batch to fill: the penalised rows'
// tests' set-up. view() reads them as fp32, or as bf16 by truncation.
struct PenalisedBatch {
  PenalisedBatch(int64_t vocab_size, int num_rows)
      : vocab(vocab_size),
        rows(num_rows),
        logits(static_cast<size_t>(vocab_size * num_rows)),
        histories(static_cast<size_t>(num_rows)) {}
  float* row(int r) { return logits.data() + r * vocab; }
  // The ids of row r's `count` largest entries, largest first.
  std::vector<int64_t> largest(int r, int count) {
    std::vector<int64_t> order(static_cast<size_t>(vocab));
    std::iota(order.begin(), order.end(), 0);
    const float* x = row(r);
    std::partial_sort(order.begin(), order.begin() + count, order.end(),
                      [x](int64_t a, int64_t b) { return x[a] > x[b]; });
    return order;
  }
  lastmile::LogitsView view(bool bf16) {
    if (!bf16) return lastmile::LogitsView::f32(logits.data(), rows, vocab);
    halves.clear();
    for (float v : logits)
      halves.push_back(static_cast<uint16_t>(std::bit_cast<uint32_t>(v) >> 16));
    return lastmile::LogitsView::bf16(halves.data(), rows, vocab);
  }

  int64_t vocab;
  int rows;
  std::vector<float> logits;
  std::vector<std::vector<lastmile::TokenId>> histories;
  lastmile::Batch batch;
  std::vector<uint16_t> halves;
};

// Every row's token from the cpu backend must be the oracle's, its logits read as bf16 or fp32.
void expect_the_oracles_tokens(PenalisedBatch& data, bool bf16, int trial) {
  const lastmile::LogitsView view = data.view(bf16);
  lastmile::Sampler fast(backend_config(data.vocab, data.rows, lastmile::BackendKind::cpu));
  lastmile::Sampler slow(backend_config(data.vocab, data.rows, lastmile::BackendKind::reference));
  const lastmile::SamplerOutput& a = fast.sample(view, data.batch);
  const lastmile::SamplerOutput& b = slow.sample(view, data.batch);
  for (int r = 0; r < data.rows; ++r)
    EXPECT_EQ(a.sampled_token_ids[r], b.sampled_token_ids[r]) << "trial " << trial << " row " << r;
}

// Has the batch ask `count` logprobs in `mode`, or none.
void ask_logprobs(lastmile::Batch& batch, std::optional<lastmile::LogprobsMode> mode, int count) {
  batch.num_logprobs.reset();
  if (mode) batch.num_logprobs = count;
  batch.logprobs_mode = mode;
}

// The logprobs a batch may ask for without its greedy rows' working rows: none, raw logits (block
// maxima alone bound the argmax) and raw logprobs (the softmax's read learns them).
void for_each_raw_logprobs_request(lastmile::Batch& batch,
                                   const std::function<void(const std::string&)>& check) {
  for (std::optional<lastmile::LogprobsMode> mode :
       {std::optional<lastmile::LogprobsMode>{}, std::optional(lastmile::LogprobsMode::raw_logits),
        std::optional(lastmile::LogprobsMode::raw_logprobs)}) {
    ask_logprobs(batch, mode, 2);
    check(mode ? mode == lastmile::LogprobsMode::raw_logits ? "raw_logits" : "raw_logprobs"
               : "no logprobs");
  }
}

// Greedy rows that penalties alone edit, or nothing, take their argmax from the blocks whose
// caller's max could hold it, penalised alone (no working row), with or without raw logprobs. The
// history holds the largest tokens (the argmax moves to another block), equal values sit in
// several blocks (the lowest id wins), and some rows raise entries (negative penalties,
// repetition below 1, a logit bias: the steps, every block read); one bans the two largest (the
// steps, whose argmax reads the working row's blocks by the same bounds); two have no penalties.
// The token must be the oracle's on every row, fp32 and bf16.
TEST(CpuBackendProperty, GreedyRowsWithinTheirBlockBoundsGiveTheOraclesArgmax) {
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t vocab = trial % 3 == 0 ? 128256 : 40000 + static_cast<int64_t>(rng() % 5000);
    const int rows = 10;
    PenalisedBatch data(vocab, rows);
    std::vector<std::vector<lastmile::TokenId>>& histories = data.histories;
    lastmile::Batch& batch = data.batch;
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = body(rng);
      const float top = 12.0f + static_cast<float>(rng() % 4);
      for (int i = 0; i < 6; ++i) row[rng() % vocab] = top - static_cast<float>(i % 3);  // ties
      const std::vector<int64_t> order = data.largest(r, 8);
      for (int i = 0; i < 40; ++i)
        histories[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      for (int i = 0; i < r % 4; ++i)  // the largest few are in the history
        histories[r].push_back(static_cast<lastmile::TokenId>(order[i]));
      for (int i = 0; i < 4 && (r == 5 || r == 6); ++i)  // raised past the largest (below)
        histories[r].push_back(static_cast<lastmile::TokenId>(order[6]));
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.output_token_ids = histories[r];
      lastmile::RequestParams& p = request.params;
      p.temperature = 0.0f;
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 2.0f;
      if (r == 5) p.frequency_penalty = p.presence_penalty = -2.0f;  // raises the history
      if (r == 6) p.repetition_penalty = 0.2f;                       // raises positive logits
      if (r == 7) p.logit_bias = {{static_cast<lastmile::TokenId>(rng() % vocab), 30.0f}};
      if (r == 4)  // masks lower too: the steps, the working row's argmax by blocks
        p.bad_words_token_ids = {{static_cast<lastmile::TokenId>(order[0])},
                                 {static_cast<lastmile::TokenId>(order[1])}};
      if (r >= 8) p = greedy_params();  // no penalties
    }
    for_each_raw_logprobs_request(batch, [&](const std::string& mode) {
      SCOPED_TRACE(mode);
      expect_the_oracles_tokens(data, trial % 2 == 1, trial);
    });
  }
}

// Past 2^20 entries the blocks outgrow the bounds path (no summary; maxima of blocks over 2048):
// an unedited float32 greedy row takes its one checked read whatever the logprobs, the rest the
// steps. Ties across the row (the lowest id wins), a penalised row whose largest is in its history,
// fp32 and bf16: the oracle's tokens.
TEST(CpuBackendProperty, GreedyRowsPastTwoToTheTwentyGiveTheOraclesArgmax) {
  const int64_t vocab = (int64_t{1} << 20) + 5;
  PenalisedBatch data(vocab, 3);
  std::mt19937_64 rng(43);
  for (int r = 0; r < 3; ++r) {
    float* row = data.row(r);
    for (int64_t i = 0; i < vocab; ++i) row[i] = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    row[vocab - 1] = row[700000] = 20.0f;  // a tie: 700000 wins
    row[5] = 19.0f;
    lastmile::BatchRequest& request = data.batch.requests.emplace_back();
    request.params = greedy_params();
    if (r == 1) {  // 700000 and the last lowered below token 5
      data.histories[r] = {700000, static_cast<TokenId>(vocab - 1)};
      request.output_token_ids = data.histories[r];
      request.params.frequency_penalty = 2.0f;
    }
  }
  for (const bool bf16 : {false, true})
    for_each_raw_logprobs_request(data.batch, [&](const std::string& mode) {
      SCOPED_TRACE(mode);
      expect_the_oracles_tokens(data, bf16, bf16 ? 1 : 0);
    });
}

// Step 6's sparse penalties pick their factors without a branch: the same bits as the oracle on
// every kind of token (seen in the prompt only, counted 0-3 times, both), every sign of logit
// (+-0, +-inf, huge ones that a factor below 1 overflows, denormals) and every kind of penalty
// (repetition 1, above and below; frequency and presence of either sign or 0).
TEST(CpuBackendProperty, PenaltiesAreTheOraclesToTheBit) {
  std::mt19937_64 rng(41);
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, 3e38f, -3e38f, 1e-40f, -1e-40f};
  const float repetitions[] = {1.0f, 1.3f, 0.7f, 2.0f};
  const float others[] = {0.0f, 0.4f, -0.4f, 2.0f, -2.0f};
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 500;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x)
      v = rng() % 8 == 0 ? specials[rng() % 8] : std::normal_distribution<float>(0.0f, 5.0f)(rng);
    std::vector<lastmile::detail::TokenCount> counts;
    for (int64_t t = 0; t < n; ++t)
      if (rng() % 2 == 0)
        counts.push_back(
            {static_cast<TokenId>(t), static_cast<int32_t>(rng() % 4), rng() % 3 == 0});
    std::shuffle(counts.begin(), counts.end(), rng);
    const float repetition = repetitions[trial % 4];
    const float frequency = others[rng() % 5], presence = others[rng() % 5];
    std::vector<float> fast = x, slow = x;
    cpu().apply_penalties(fast.data(), counts, repetition, frequency, presence);
    oracle().apply_penalties(slow.data(), counts, repetition, frequency, presence);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(fast[i]), std::bit_cast<uint32_t>(slow[i]))
          << "trial " << trial << " token " << i << " from " << x[i];
  }
}

// The penalised blocks find a block's tokens by scanning the prompt and history for the first
// reads, by buckets after (PenalisedBlocks::kScannedReads). Each block holds a peak above the
// body; rows penalise every peak (every block is read: buckets), the two highest (two or three
// reads: scans, at times buckets) or none (one read), through the prompt (repetition only, repeats
// counting once), the output (1-3 times) and drafts (counted only when predicting the bonus token),
// with peaks at a block's first and last entries and in the last, short block. The token must be
// the oracle's, fp32 and bf16, with and without the bonus token, and whatever raw logprobs the
// batch asks for.
TEST(CpuBackendProperty, PenalisedBlocksScannedOrBucketedGiveTheOraclesArgmax) {
  std::mt19937_64 rng(37);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t vocab = 20480 * (1 + trial % 2) + 1 + static_cast<int64_t>(rng() % 2000);
    const int rows = 8;
    const int64_t blocks = (vocab + 2047) / 2048;
    PenalisedBatch data(vocab, rows);
    lastmile::Batch& batch = data.batch;
    batch.predict_bonus_token = trial % 4 >= 2;
    std::vector<std::vector<lastmile::TokenId>> prompts(rows), drafts(rows);
    std::uniform_real_distribution<float> above(10.0f, 10.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = std::normal_distribution<float>(0.0f, 1.0f)(rng);
      std::vector<lastmile::TokenId> peaks;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t size = std::min<int64_t>(2048, vocab - b * 2048);
        const int64_t at = b % 3 == 0   ? 0
                           : b % 3 == 1 ? size - 1
                                        : static_cast<int64_t>(rng() % size);
        peaks.push_back(static_cast<lastmile::TokenId>(b * 2048 + at));
        row[peaks.back()] = above(rng);
      }
      // Rows 0-4 penalise every peak, 5-6 the two highest, 7 none.
      const size_t penalised = r < 5 ? peaks.size() : r < 7 ? 2 : 0;
      std::vector<lastmile::TokenId> by_value = peaks;
      std::sort(by_value.begin(), by_value.end(),
                [row](lastmile::TokenId a, lastmile::TokenId b) { return row[a] > row[b]; });
      std::vector<lastmile::TokenId>& output = data.histories[r];
      for (int i = 0; i < 100; ++i) {  // the body's tokens, some repeated
        output.push_back(static_cast<lastmile::TokenId>(rng() % vocab));
        prompts[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      }
      for (size_t i = 0; i < penalised; ++i) {
        const lastmile::TokenId id = by_value[i];
        switch (rng() % 4) {
          case 0:  // the prompt, twice: repetition once
            prompts[r].push_back(id);
            prompts[r].push_back(id);
            break;
          case 1:  // drafts: counted only with the bonus token
            drafts[r].push_back(id);
            break;
          default:  // the output, 1-3 times, and at times the prompt too
            for (uint64_t k = 0; k <= rng() % 3; ++k) output.push_back(id);
            if (rng() % 2 == 0) prompts[r].push_back(id);
        }
      }
      std::shuffle(output.begin(), output.end(), rng);
      std::shuffle(prompts[r].begin(), prompts[r].end(), rng);
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.prompt_token_ids = prompts[r];
      request.output_token_ids = output;
      request.spec_token_ids = drafts[r];
      lastmile::RequestParams& p = request.params;
      p.temperature = 0.0f;
      p.repetition_penalty = r % 2 == 0 ? 1.0f + 0.1f * static_cast<float>(r) : 1.0f;
      p.frequency_penalty = r % 3 == 0 ? 0.0f : 0.2f + 0.1f * static_cast<float>(r);
      p.presence_penalty = r == 4 ? 0.0f : 0.15f;
    }
    for_each_raw_logprobs_request(batch, [&](const std::string& mode) {
      SCOPED_TRACE(mode);
      expect_the_oracles_tokens(data, trial % 2 == 1, trial);
    });
  }
}

// The batch's tokens with processed logprobs (the steps draw the working row), with raw logprobs
// (3) and with none (the penalised rows' input paths, with the raw summary and without): the
// same in all three.
void expect_the_same_tokens_in_every_mode(lastmile::Sampler& sampler,
                                          const lastmile::LogitsView& view, lastmile::Batch& batch,
                                          int trial) {
  auto tokens = [&](std::optional<lastmile::LogprobsMode> mode) {
    ask_logprobs(batch, mode, 3);
    const lastmile::SamplerOutput& out = sampler.sample(view, batch);
    return std::vector<TokenId>(out.sampled_token_ids.begin(), out.sampled_token_ids.end());
  };
  const std::vector<TokenId> working = tokens(lastmile::LogprobsMode::processed_logprobs);
  EXPECT_EQ(tokens(lastmile::LogprobsMode::raw_logprobs), working) << "trial " << trial;
  EXPECT_EQ(tokens(std::nullopt), working) << "trial " << trial;
}

// A random row that only penalties edit draws from the caller's row and its penalised blocks in
// raw-mode batches (with the raw summary) and in batches without logprobs (block maxima), with
// no working row; processed logprobs read the working row, so the steps draw it there. The
// token must be the same in all three, fp32 and bf16: histories hold the largest tokens and
// repeats (frequency counts above 1); half the rows have their head in block 1 and the last,
// short block (the blocks path answers), half across the row (it declines).
TEST(CpuBackendProperty, PenalisedMinPRowsDrawTheWorkingRowsTokenInEveryMode) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t vocab = trial % 4 == 0 ? 128256 : 30000 + static_cast<int64_t>(rng() % 5000);
    const int rows = 12;
    PenalisedBatch data(vocab, rows);
    std::vector<std::vector<lastmile::TokenId>>& histories = data.histories;
    lastmile::Batch& batch = data.batch;
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = body(rng);
      if (r % 2 == 0) {  // a head in block 1 and the last, short block: the blocks path answers
        for (int i = 0; i < 4; ++i) row[2048 + rng() % 2048] += 12.0f;
        for (int i = 0; i < 4; ++i) row[vocab - 1 - static_cast<int64_t>(rng() % 100)] += 12.0f;
      } else {  // a head across the row: most blocks reach the cut, the steps decide
        for (int i = 0; i < 30; ++i) row[rng() % vocab] += 8.0f;
      }
      const std::vector<int64_t> order = data.largest(r, 6);
      for (int i = 0; i < 60; ++i)
        histories[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      for (int i = 0; i < 3 * (r % 3); ++i)  // the largest, some more than once
        histories[r].push_back(static_cast<lastmile::TokenId>(order[i % 4]));
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.output_token_ids = histories[r];
      lastmile::RequestParams& p = request.params;
      p.seed = 1000 + static_cast<uint64_t>(r);
      p.temperature = r % 3 == 0 ? 1.0f : 0.6f + 0.2f * static_cast<float>(r % 5);
      p.min_p = r % 4 == 3 ? 0.5f : 0.05f;
      p.repetition_penalty = r % 2 == 0 ? 1.2f : 1.0f;
      p.frequency_penalty = r % 3 == 1 ? 0.0f : 0.4f;
      p.presence_penalty = 0.3f;
    }
    lastmile::Sampler sampler(backend_config(vocab, rows, lastmile::BackendKind::cpu));
    expect_the_same_tokens_in_every_mode(sampler, data.view(trial % 2 == 1), batch, trial);
  }
}

// Penalised LLM-shaped rows whose sampling(r, p) sets row r's sampling parameters, in raw-mode
// batches (the penalised paths list from the caller's row and lower through
// PenalisedBlocks::lower_listed) and in batches without logprobs; processed logprobs read the
// working row, so the steps draw it there. The tokens must be the same in all three, fp32 and
// bf16, over several seeds. The largest tokens sit in the prompt (repetition only, some twice),
// the output (counted 1-3 times) and the drafts (counted only when predicting the bonus token), so
// lowering them changes which survive.
template <class Sampling>
void expect_penalised_llm_rows_in_every_mode(std::mt19937_64& rng, Sampling sampling) {
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t vocab = trial % 4 == 0 ? 128256 : 30000 + static_cast<int64_t>(rng() % 5000);
    const int rows = 12;
    PenalisedBatch data(vocab, rows);
    lastmile::Batch& batch = data.batch;
    batch.predict_bonus_token = trial % 2 == 0;
    std::vector<std::vector<lastmile::TokenId>> prompts(rows), drafts(rows);
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = body(rng);
      for (int i = 0; i < 40; ++i)
        row[rng() % vocab] += std::uniform_real_distribution<float>(6.0f, 16.0f)(rng);
      const std::vector<int64_t> order = data.largest(r, 12);
      std::vector<lastmile::TokenId>& output = data.histories[r];
      for (int i = 0; i < 80; ++i) {
        output.push_back(static_cast<lastmile::TokenId>(rng() % vocab));
        prompts[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      }
      for (int i = 0; i < 8; ++i) {
        const auto id = static_cast<lastmile::TokenId>(order[static_cast<size_t>(i)]);
        switch ((i + r) % 4) {
          case 0:
            prompts[r].insert(prompts[r].end(), {id, id});
            break;
          case 1:
            drafts[r].push_back(id);
            break;
          default:
            for (uint64_t k = 0; k <= rng() % 3; ++k) output.push_back(id);
        }
      }
      std::shuffle(output.begin(), output.end(), rng);
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.prompt_token_ids = prompts[r];
      request.output_token_ids = output;
      request.spec_token_ids = drafts[r];
      lastmile::RequestParams& p = request.params;
      sampling(r, p);
      p.repetition_penalty = r % 5 == 0 ? 1.0f : 1.5f;
      p.frequency_penalty = r % 3 == 1 ? 0.0f : 1.5f;
      p.presence_penalty = 1.0f;
    }
    const lastmile::LogitsView view = data.view(trial % 2 == 1);
    lastmile::Sampler sampler(backend_config(vocab, rows, lastmile::BackendKind::cpu));
    for (uint64_t seeds = 0; seeds < 4; ++seeds) {
      for (int r = 0; r < rows; ++r) batch.requests[r].params.seed = 1000 * seeds + r;
      expect_the_same_tokens_in_every_mode(sampler, view, batch, trial);
    }
  }
}

// Top-k rows (then top-p on some) list their candidates.
TEST(CpuBackendProperty, PenalisedTopKRowsDrawTheWorkingRowsTokenInEveryMode) {
  std::mt19937_64 rng(35);
  expect_penalised_llm_rows_in_every_mode(rng, [](int r, lastmile::RequestParams& p) {
    p.temperature = r % 3 == 0 ? 1.0f : 0.7f;
    p.top_k = std::array<int64_t, 4>{2, 5, 20, 50}[static_cast<size_t>(r % 4)];
    if (r % 2 == 1) p.top_p = 0.9f;
  });
}

// Penalised top-p rows list the entries near the raw max and bound the rest by the raw summary
// (raw-mode batches), the same rows as above.
TEST(CpuBackendProperty, PenalisedTopPRowsDrawTheWorkingRowsTokenInEveryMode) {
  std::mt19937_64 rng(41);
  expect_penalised_llm_rows_in_every_mode(rng, [](int r, lastmile::RequestParams& p) {
    p.temperature = std::array<float, 3>{0.7f, 0.8f, 1.0f}[static_cast<size_t>(r % 3)];
    p.top_p = std::array<float, 4>{0.5f, 0.9f, 0.95f, 0.99f}[static_cast<size_t>(r % 4)];
  });
}

// lower_listed must give step 6's bits: token A (in the prompt, and twice in the output) is
// lowered to exactly the value of token B, computed by the backend's penalties as step 6 applies
// them, so top-k 1 keeps both and the draw picks either by u. A bit off and one of them alone
// would survive. The listed path (raw logprobs) must draw the steps' tokens (processed logprobs),
// and both tokens must come up over the seeds, at temperatures 1 and 0.8.
TEST(CpuBackendProperty, PenalisedTopKListIsLoweredToStepSixsBits) {
  constexpr int64_t kVocab = 40000;
  constexpr int kRows = 8;
  constexpr TokenId kA = 100, kB = 101, kC = 5000;  // A and B share a group: C bounds the list
  const float repetition = 1.3f, frequency = 0.2f, presence = 0.1f;
  float b = 9.1f;
  const std::vector<lastmile::detail::TokenCount> seen = {{0, 0, true}}, counted = {{0, 2, false}};
  cpu().apply_penalties(&b, seen, repetition, 0.0f, 0.0f);  // as lower_listed and step 6 do
  cpu().apply_penalties(&b, counted, 1.0f, frequency, presence);
  ASSERT_GT(b, 5.0f);
  std::vector<float> logits(static_cast<size_t>(kRows * kVocab), 0.0f);
  for (int r = 0; r < kRows; ++r) {
    logits[r * kVocab + kA] = 9.1f;
    logits[r * kVocab + kB] = b;
    logits[r * kVocab + kC] = 5.0f;
  }
  const std::vector<TokenId> prompt = {kA, 7}, output = {kA, 9, kA};
  lastmile::Batch batch;
  for (int r = 0; r < kRows; ++r) {
    lastmile::BatchRequest& request = batch.requests.emplace_back();
    request.prompt_token_ids = prompt;
    request.output_token_ids = output;
    lastmile::RequestParams& p = request.params;
    p.temperature = r % 2 == 0 ? 1.0f : 0.8f;
    p.top_k = 1;
    p.repetition_penalty = repetition;
    p.frequency_penalty = frequency;
    p.presence_penalty = presence;
  }
  lastmile::Sampler sampler(backend_config(kVocab, kRows, lastmile::BackendKind::cpu));
  const auto view = lastmile::LogitsView::f32(logits.data(), kRows, kVocab);
  std::set<TokenId> drawn;
  for (uint64_t seeds = 0; seeds < 8; ++seeds) {
    for (int r = 0; r < kRows; ++r) batch.requests[r].params.seed = 100 * seeds + r;
    expect_the_same_tokens_in_every_mode(sampler, view, batch, static_cast<int>(seeds));
    const lastmile::SamplerOutput& out = sampler.sample(view, batch);
    drawn.insert(out.sampled_token_ids.begin(), out.sampled_token_ids.end());
  }
  EXPECT_EQ(drawn, (std::set<TokenId>{kA, kB}));
}

// Steps a RequestBatch of 4 penalised rows 24 times against a Sampler that reads the working row
// (processed logprobs), given the same histories: the RequestBatch's rows take the penalised
// input paths (raw logprobs), which read its kept seen bitmap and output counts instead of
// counting the history, and their tokens must be the Sampler's at every step. Each step's logits
// are N(0, 1) with `head` at 10 + N(0, 1) (from rng); sampling(r, p) sets row r's sampling
// parameters; the penalties, 2 logprobs and a prompt holding head[r] are the same for all. The
// draws keep picking the head, so its counts grow past 1: it must make over half of every row's
// tokens.
template <class Sampling>
void expect_request_batch_draws_the_working_rows_tokens(int64_t vocab,
                                                        const std::vector<lastmile::TokenId>& head,
                                                        uint64_t seed, std::mt19937_64& rng,
                                                        Sampling sampling) {
  constexpr int kRows = 4, kSteps = 24;
  lastmile::SamplerConfig stateful_config =
      backend_config(vocab, kRows, lastmile::BackendKind::cpu);
  stateful_config.logprobs_mode = lastmile::LogprobsMode::raw_logprobs;
  lastmile::RequestBatch stateful(stateful_config);
  lastmile::Sampler stateless(backend_config(vocab, kRows, lastmile::BackendKind::cpu));
  std::vector<lastmile::RequestParams> params(kRows);
  std::vector<std::vector<lastmile::TokenId>> prompts(kRows), outputs(kRows);
  for (int r = 0; r < kRows; ++r) {
    lastmile::RequestParams& p = params[r];
    p.seed = seed + static_cast<uint64_t>(r);
    p.temperature = r % 2 == 0 ? 1.0f : 0.8f;
    sampling(r, p);
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
    p.logprobs = 2;
    prompts[r] = {head[static_cast<size_t>(r)], 5, 9};
    stateful.add(std::array<const char*, kRows>{"r0", "r1", "r2", "r3"}[r], p, prompts[r]);
  }
  std::normal_distribution<float> body(0.0f, 1.0f);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> logits(static_cast<size_t>(kRows * vocab));
    for (float& v : logits) v = body(rng);
    for (int r = 0; r < kRows; ++r)
      for (lastmile::TokenId id : head) logits[r * vocab + id] = 10.0f + body(rng);
    const auto view = lastmile::LogitsView::f32(logits.data(), kRows, vocab);
    lastmile::Batch batch;
    batch.num_logprobs = 2;
    batch.logprobs_mode = lastmile::LogprobsMode::processed_logprobs;
    for (int r = 0; r < kRows; ++r) {
      lastmile::BatchRequest& b = batch.requests.emplace_back();
      b.params = params[r];
      b.prompt_token_ids = prompts[r];
      b.output_token_ids = outputs[r];
    }
    const lastmile::SamplerOutput& expected = stateless.sample(view, batch);
    const lastmile::SamplerOutput& actual = stateful.step(view);
    for (int r = 0; r < kRows; ++r) {
      ASSERT_EQ(actual.sampled_token_ids[r], expected.sampled_token_ids[r])
          << "step " << step << " row " << r;
      outputs[r].push_back(expected.sampled_token_ids[r]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    EXPECT_GT(std::count_if(outputs[r].begin(), outputs[r].end(),
                            [&](lastmile::TokenId t) {
                              return std::find(head.begin(), head.end(), t) != head.end();
                            }),
              kSteps / 2)
        << "row " << r;
}

// The penalised min_p rows from a RequestBatch (the blocks path): a head of 8 tokens in block 1
// and the last block (of one token), so the max moves between blocks.
TEST(CpuBackendProperty, PenalisedMinPRowsFromARequestBatchDrawTheWorkingRowsToken) {
  constexpr int64_t kVocab = 16385;  // 9 blocks, the last of one token
  std::mt19937_64 rng(33);
  std::vector<lastmile::TokenId> head;
  for (int i = 0; i < 7; ++i) head.push_back(static_cast<lastmile::TokenId>(2048 + rng() % 2048));
  head.push_back(kVocab - 1);  // two blocks reach the cut: the blocks path answers
  expect_request_batch_draws_the_working_rows_tokens(
      kVocab, head, 77, rng, [](int, lastmile::RequestParams& p) { p.min_p = 0.05f; });
}

// The penalised top-k rows from a RequestBatch (the listed path: lower_listed), two of them with
// top-p: the penalties reorder the head as its counts grow.
TEST(CpuBackendProperty, PenalisedTopKRowsFromARequestBatchDrawTheWorkingRowsToken) {
  constexpr int64_t kVocab = 40000;
  std::mt19937_64 rng(39);
  std::vector<lastmile::TokenId> head;
  for (int i = 0; i < 8; ++i) head.push_back(static_cast<lastmile::TokenId>(rng() % kVocab));
  expect_request_batch_draws_the_working_rows_tokens(kVocab, head, 91, rng,
                                                     [](int r, lastmile::RequestParams& p) {
                                                       p.top_k = r < 2 ? 4 : 12;
                                                       if (r % 2 == 1) p.top_p = 0.9f;
                                                     });
}

TEST(CpuBackendProperty, PenalisedTopPRowsFromARequestBatchDrawTheWorkingRowsToken) {
  constexpr int64_t kVocab = 40000;
  std::mt19937_64 rng(43);
  std::vector<lastmile::TokenId> head;
  for (int i = 0; i < 8; ++i) head.push_back(static_cast<lastmile::TokenId>(rng() % kVocab));
  expect_request_batch_draws_the_working_rows_tokens(
      kVocab, head, 93, rng, [](int r, lastmile::RequestParams& p) {
        p.temperature = 0.6f;  // the body's bound shrinks with the temperature: about half answer
        p.top_p = r < 2 ? 0.5f : 0.8f;
      });
}

TEST(CpuBackendProperty, SamplerGivesTheOraclesTokensAndLogprobs) {
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t vocab = trial % 2 ? 32001 : 1000;
    const int rows = 7;
    std::vector<float> logits;
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int64_t i = 0; i < rows * vocab; ++i) logits.push_back(body(rng));
    lastmile::Batch batch;
    batch.num_logprobs = 4;
    batch.logprobs_mode = trial % 3 ? lastmile::LogprobsMode::raw_logprobs
                                    : lastmile::LogprobsMode::processed_logprobs;
    for (int r = 0; r < rows; ++r) {
      lastmile::RequestParams& p = batch.requests.emplace_back().params;
      p.seed = rng();
      p.temperature = r == 0 ? 0.0f : 0.5f + static_cast<float>(r) * 0.1f;
      if (r % 3 == 1) p.top_k = 1 + static_cast<int32_t>(rng() % 100);
      if (r % 2 == 1) p.top_p = 0.5f + 0.1f * static_cast<float>(r % 5);
      if (r == 4) p.min_p = 0.05f;
    }
    const lastmile::LogitsView view = lastmile::LogitsView::f32(logits.data(), rows, vocab);
    lastmile::Sampler fast(backend_config(vocab, rows, lastmile::BackendKind::cpu));
    lastmile::Sampler slow(backend_config(vocab, rows, lastmile::BackendKind::reference));
    const lastmile::SamplerOutput& a = fast.sample(view, batch);
    const lastmile::SamplerOutput& b = slow.sample(view, batch);
    for (int r = 0; r < rows; ++r) {
      ASSERT_EQ(a.sampled_token_ids[r], b.sampled_token_ids[r])
          << "trial " << trial << " row " << r;
      for (int64_t c = 0; c < a.logprobs.width; ++c) {
        const float fast_value = a.logprobs.logprobs[r * a.logprobs.width + c];
        const float slow_value = b.logprobs.logprobs[r * b.logprobs.width + c];
        if (std::isinf(slow_value))
          EXPECT_EQ(fast_value, slow_value);
        else
          EXPECT_NEAR(fast_value, slow_value, 1e-5) << "trial " << trial << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace lastmile_test
