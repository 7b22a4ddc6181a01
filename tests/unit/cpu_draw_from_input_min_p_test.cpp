// The CPU backend's min_p drawn from a caller's row against the oracle's steps: flat rows' long
// lists, LLM-shaped rows, and the entries whose test only the softmax's sum decides.
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

}  // namespace
}  // namespace lastmile_test
