// The CPU backend's draw straight from a caller's row (Backend::draw_from_input) against the
// oracle's steps over the working row: the same token (up to a CDF step's rounding where the
// draw weighs with the vector exp), whichever order the row's chunks run in; top-k by group
// maxima and by sampled thresholds, top-k then top-p, huge and bad entries. Top-p alone and
// min_p: cpu_draw_from_input_top_p_test.cpp and cpu_draw_from_input_min_p_test.cpp.
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

}  // namespace
}  // namespace lastmile_test
