// Step 7c — min_p (spec §6.5, Appendix A.3): after temperature, mask tokens whose probability is
// strictly below min_p times the largest probability.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

// A.3: probabilities [0.5, 0.3, 0.15, 0.05], i.e. ratios to the max [1, 0.6, 0.3, 0.1], as
// float32 logits log(ratio) next to a max logit of 0.
std::vector<float> a3_logits() {
  return {0.0f, static_cast<float>(std::log(0.6)), static_cast<float>(std::log(0.3)),
          static_cast<float>(std::log(0.1))};
}

Row min_p_row(float min_p, float temperature = 1.0f) {
  Row row = row_with(random_params(1, temperature));
  row.params.min_p = min_p;
  return row;
}

TEST(MinP, AppendixA3MasksBelowTheThreshold) {
  const std::vector<float> x = a3_logits();
  // min_p 0.2: threshold 0.1 (probability), only the 0.05 token is below it.
  EXPECT_EQ(processed_logits(x, min_p_row(0.2f)), (std::vector<float>{x[0], x[1], x[2], -kInf}));
}

TEST(MinP, AppendixA3TokenExactlyAtTheThresholdSurvives) {
  const std::vector<float> x = a3_logits();
  // min_p 0.3: threshold 0.15 equals the third token's probability: strict <, it survives. In
  // float32 the third token's ratio to the max is exp(x[2]) ≈ 0.3; with exactly that min_p the
  // threshold min_p * p_max equals its probability exp(x[2]) * p_max.
  const float ratio = std::exp(x[2]);
  ASSERT_NEAR(ratio, 0.3f, 1e-6f);
  EXPECT_EQ(processed_logits(x, min_p_row(ratio)), (std::vector<float>{x[0], x[1], x[2], -kInf}));
  // Just above 0.3 the 0.15 token goes too.
  EXPECT_EQ(processed_logits(x, min_p_row(0.31f)), (std::vector<float>{x[0], x[1], -kInf, -kInf}));
}

TEST(MinP, AppendixA3AtTheLiteralThreeTenthsFollowsTheRoundedRatio) {
  // The real-number tie is not a float32 one: the ratio rounds to nearest just below 0.3f, so at
  // min_p = 0.3f the token is masked (README, "Deliberate differences": torch's CPU softmax, whose
  // exp is not correctly rounded, lands just above and keeps it).
  const std::vector<float> x = a3_logits();
  ASSERT_LT(std::exp(x[2]), 0.3f);
  EXPECT_EQ(processed_logits(x, min_p_row(0.3f)), (std::vector<float>{x[0], x[1], -kInf, -kInf}));
}

TEST(MinP, OneKeepsEveryTokenTiedAtTheMaximum) {
  const std::vector<float> x = {0.0f, -1.0f, 0.0f, -0.001f};
  EXPECT_EQ(processed_logits(x, min_p_row(1.0f)), (std::vector<float>{0.0f, -kInf, 0.0f, -kInf}));
}

TEST(MinP, ZeroMasksNothing) {
  const std::vector<float> x = {0.0f, -30.0f, -60.0f, -90.0f};
  EXPECT_EQ(processed_logits(x, min_p_row(0.0f)), x);
}

TEST(MinP, AppliesAfterTemperature) {
  // Ratios [1, 0.5, 0.25] at T = 1; at T = 0.5 they square to [1, 0.25, 0.0625].
  const std::vector<float> x = {0.0f, exact_log(0.5f), exact_log(0.25f)};
  EXPECT_EQ(processed_logits(x, min_p_row(0.2f, 1.0f)), x);
  const std::vector<float> expected = {0.0f, x[1] / 0.5f, -kInf};
  EXPECT_EQ(processed_logits(x, min_p_row(0.2f, 0.5f)), expected);
}

TEST(MinP, MaskedTokensAreNeverDrawn) {
  const std::vector<float> x = a3_logits();
  std::vector<Row> rows;
  std::vector<float> logits;
  for (uint64_t step = 0; step < 2000; ++step) {
    Row r = min_p_row(0.2f);
    r.step = step;
    rows.push_back(r);
    logits.insert(logits.end(), x.begin(), x.end());
  }
  int counts[4] = {};
  for (TokenId t : sample_tokens(4, logits, rows)) ++counts[t];
  EXPECT_EQ(counts[3], 0);
  // The survivors renormalise to 0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95: all of them appear.
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[1], 0);
  EXPECT_GT(counts[2], 0);
}

TEST(MinP, NotAppliedInAllGreedyBatches) {
  Row row = row_with(greedy_params());
  row.params.min_p = 0.9f;
  const std::vector<float> x = a3_logits();
  EXPECT_EQ(processed_logits(x, row), x);
}

TEST(MinP, RowsWithoutMinPAreUntouchedNextToMinPRows) {
  const std::vector<float> x = a3_logits();
  std::vector<float> logits = x;
  logits.insert(logits.end(), x.begin(), x.end());
  const std::vector<float> full =
      full_matrix(4, logits, {min_p_row(0.5f), min_p_row(0.0f)}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 4), (std::vector<float>{x[0], x[1], -kInf, -kInf}));
  EXPECT_EQ(slice(full, 1, 4), x);
}

}  // namespace
}  // namespace lastmile_test
