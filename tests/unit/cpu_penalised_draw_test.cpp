// The CPU backend's draw from a penalised caller's row (Backend::draw_from_penalised_input), read
// through a PenalisedRow's callbacks, against the draw from the working row that steps 6 and 7b
// leave: min_p, top-k and top-p alone, the retries and bounds of top-p, top-k's strict bound.
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

}  // namespace
}  // namespace lastmile_test
