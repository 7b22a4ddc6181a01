// The CPU backend's top-p alone drawn from a caller's row against the oracle's steps: flat rows
// (the band guessed from samples and checked), peaked rows, bands of equal probabilities longer
// than the keys, rows of equal entries, the end of the CDF and tiny p.
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

// Top-p keeping a small share of a flat row (p 0.001-0.3: hundreds to thousands of tokens spread
// over it; the dense draw, and the banded one from p of some 0.05), where the blocks' kept weights
// can be a sliver of their mass: they must be summed from the kept entries, not
// taken as a block's mass less the masked one, whose rounding (some 1e-6 of the block) once moved
// the draw by 1.5e-4 of the kept mass (an independent review's row of seven levels, p 0.0027).
// Rows: those seven exact levels, with p half a top-level token off a whole number of them (a cut
// on a tie within rounding may keep one token more or fewer, as the README says); random levels
// with a little noise; a narrow normal body. The oracle's token unless u sits within 1e-6 of a
// CDF step.
TEST(CpuBackendProperty, DrawFromInputTopPKeepingASliverOfAFlatRowIsTheOraclesToken) {
  std::mt19937_64 rng(23);
  int answered = 0;
  for (int trial = 0; trial < 60; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    const int64_t n = trial % 2 ? 151936 : 20000 + static_cast<int64_t>(rng() % 40000);
    std::vector<float> row(static_cast<size_t>(n));
    float p =
        std::exp(std::uniform_real_distribution<float>(std::log(0.001f), std::log(0.3f))(rng));
    const float t = trial % 4 == 0 ? 0.5f : 1.0f;
    if (trial % 3 == 0) {  // the review's seven levels
      double total = 0;
      for (size_t j = 0; j < row.size(); ++j) {
        row[j] = -0.16f * static_cast<float>(j % 7) / 6.0f;
        total += std::exp(static_cast<double>(row[j] / t));
      }
      p = static_cast<float>((std::floor(p * total) + 0.5) / total);  // q of the top level: 1/total
    } else if (trial % 3 == 1) {  // random levels, a little noise
      std::uniform_real_distribution<float> level(-1.0f, 0.0f);
      std::normal_distribution<float> noise(0.0f, 1e-3f);
      std::array<float, 7> levels{};
      for (float& l : levels) l = level(rng);
      for (float& v : row) v = levels[rng() % levels.size()] + noise(rng);
    } else {
      std::normal_distribution<float> body(0.0f, 0.3f);
      for (float& v : row) v = body(rng);
    }
    const auto dtype = static_cast<lastmile::DType>(trial % 3);
    std::vector<uint16_t> halves;
    const void* src = caller_row(row, dtype, halves, 1.0f);
    const lastmile::detail::DrawParams params = top_p_alone(n, t, p);
    Scratch a(cpu()), b(oracle());
    std::vector<float> x(static_cast<size_t>(n));  // the oracle's processed row
    oracle().convert_row_divided(src, dtype, x.data(), n, t);
    oracle().apply_top_k_top_p(x.data(), n, n, true, p, b.get(x.size()));
    for (int k = 0; k < 8; ++k) {  // eight draws a row: the oracle's steps are the cost
      const double u = std::uniform_real_distribution<double>(1e-9, 1.0 - 1e-9)(rng);
      const TokenId fast =
          cpu().draw_from_input(src, dtype, n, params, u, a.get(x.size()), kSerial);
      if (fast == lastmile::detail::kNoInputDraw) continue;  // a band past the lists' room
      ++answered;
      expect_consistent_draw(x, u, fast, oracle().draw(x.data(), n, u, b.get(x.size())));
    }
  }
  EXPECT_GT(answered, 400);
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

}  // namespace
}  // namespace lastmile_test
