// The CPU backend's row kernels against the scalar oracle on random inputs (STYLE rule 5): 300
// random rows per property, LLM-shaped or flat, with random -inf masks and ties, vocab from 1 to
// 40000. Top-k and top-p keep the oracle's exact sets (top-p alone up to the rounding of a
// cumulative sum at its cut), raw logprobs read from the caller's row are the oracle's snapshot,
// log_softmax lies within 1e-5 and min-p keeps the oracle's set. The rest of the backend's
// properties: cpu_top_n_property_test.cpp (top-N), cpu_draw_from_input*_test.cpp (the draw from
// a caller's row), cpu_penalised_draw_test.cpp, cpu_sampler_property_test.cpp and
// cpu_penalised_modes_test.cpp (whole Sampler calls), cpu_selection_test.cpp; shared helpers in
// cpu_property.hpp.
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

}  // namespace
}  // namespace lastmile_test
