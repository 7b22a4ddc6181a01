// Step 5b — logit_bias (spec §6.4): a float32 add per listed id, unclamped, after min_tokens and
// before penalties.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

const std::vector<float> kLogits = {1.0f, 2.0f, 0.5f, -3.0f};

TEST(LogitBias, AddsTheBiasToListedIdsOnly) {
  Row row = row_with(greedy_params());
  row.params.logit_bias = {{0, 1.5f}, {2, -0.25f}};
  EXPECT_EQ(processed_logits(kLogits, row), (std::vector<float>{2.5f, 2.0f, 0.25f, -3.0f}));
}

TEST(LogitBias, AddIsFloat32) {
  Row row = row_with(greedy_params());
  row.params.logit_bias = {{1, 1e-8f}, {3, 0.1f}};
  // 2 + 1e-8 rounds back to 2 in float32; -3 + 0.1f is the float32 sum.
  const std::vector<float> expected = {1.0f, 2.0f, 0.5f, -3.0f + 0.1f};
  EXPECT_EQ(processed_logits(kLogits, row), expected);
}

TEST(LogitBias, ValuesAreNotClamped) {
  Row row = row_with(greedy_params());
  row.params.logit_bias = {{3, 250.0f}, {1, -1000.0f}};
  EXPECT_EQ(processed_logits(kLogits, row), (std::vector<float>{1.0f, -998.0f, 0.5f, 247.0f}));
}

TEST(LogitBias, ChangesTheGreedyArgmax) {
  Row row = row_with(greedy_params());
  EXPECT_EQ(sample_tokens(4, kLogits, {row}), std::vector<TokenId>{1});
  row.params.logit_bias = {{2, 1.75f}};
  EXPECT_EQ(sample_tokens(4, kLogits, {row}), std::vector<TokenId>{2});
}

TEST(LogitBias, AppliesBeforePenalties) {
  // Token 0 is in the prompt: repetition 2 halves the biased logit (1 + 3) / 2 = 2, not 1 / 2 + 3.
  Row row = row_with(greedy_params());
  row.prompt = {0};
  row.params.repetition_penalty = 2.0f;
  row.params.logit_bias = {{0, 3.0f}};
  EXPECT_EQ(processed_logits(kLogits, row), (std::vector<float>{2.0f, 2.0f, 0.5f, -3.0f}));
}

TEST(LogitBias, BiasOnANegativeInfinityLogitStaysNegativeInfinity) {
  Row row = row_with(greedy_params());
  row.params.logit_bias = {{1, 5.0f}};
  const std::vector<float> logits = {0.0f, -kInf, 1.0f};
  EXPECT_EQ(processed_logits(logits, row), (std::vector<float>{0.0f, -kInf, 1.0f}));
}

TEST(LogitBias, RawModesIgnoreTheBias) {
  Row row = row_with(greedy_params());
  row.params.logit_bias = {{0, 10.0f}};
  EXPECT_EQ(full_matrix(4, kLogits, {row}, LogprobsMode::raw_logits), kLogits);
}

}  // namespace
}  // namespace lastmile_test
