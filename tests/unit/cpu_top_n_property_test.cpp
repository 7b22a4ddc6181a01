// The CPU backend's top-N (logprobs' ranks and values) against the scalar oracle on random rows:
// the same ids in the same order, processed values to the bit and raw ones within 1e-5, for N
// from a few to past the lists' room, masked rows and rows of ties, argmax, rank and the draw
// with them. Shared helpers: cpu_property.hpp.
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

}  // namespace
}  // namespace lastmile_test
