// Step 6 — repetition, frequency and presence penalties (spec §7, Appendix A.4): repetition over
// prompt ∪ output (divide positive, multiply non-positive), frequency and presence over the output
// only; drafts count only when predicting the bonus token.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

// A.4: logits [2, -1, 0, 1], prompt {0}, output [1, 1, 2].
const std::vector<float> kLogits = {2.0f, -1.0f, 0.0f, 1.0f};

Row a4_row(float repetition, float frequency, float presence) {
  Row row = row_with(greedy_params());
  row.prompt = {0};
  row.output = {1, 1, 2};
  row.params.repetition_penalty = repetition;
  row.params.frequency_penalty = frequency;
  row.params.presence_penalty = presence;
  return row;
}

TEST(Penalties, AppendixA4AllThree) {
  EXPECT_EQ(processed_logits(kLogits, a4_row(2.0f, 0.5f, 0.25f)),
            (std::vector<float>{1.0f, -3.25f, -0.75f, 1.0f}));
}

TEST(Penalties, RepetitionUsesPromptAndOutput) {
  // Tokens 0 (prompt), 1 and 2 (output) are seen: 2 / 2 = 1, -1 * 2 = -2, 0 stays 0.
  EXPECT_EQ(processed_logits(kLogits, a4_row(2.0f, 0.0f, 0.0f)),
            (std::vector<float>{1.0f, -2.0f, 0.0f, 1.0f}));
}

TEST(Penalties, FrequencyUsesOutputCountsOnly) {
  // Counts 0, 2, 1, 0 (token 0 is only in the prompt).
  EXPECT_EQ(processed_logits(kLogits, a4_row(1.0f, 0.5f, 0.0f)),
            (std::vector<float>{2.0f, -2.0f, -0.5f, 1.0f}));
}

TEST(Penalties, PresenceUsesOutputPresenceOnly) {
  EXPECT_EQ(processed_logits(kLogits, a4_row(1.0f, 0.0f, 0.25f)),
            (std::vector<float>{2.0f, -1.25f, -0.25f, 1.0f}));
}

TEST(Penalties, RepetitionBelowOnePushesSeenTokensUp) {
  // r = 0.5: positive 2 -> 2 * (1 / 0.5) = 4; negative -1 -> -0.5; 0 stays 0.
  EXPECT_EQ(processed_logits(kLogits, a4_row(0.5f, 0.0f, 0.0f)),
            (std::vector<float>{4.0f, -0.5f, 0.0f, 1.0f}));
}

TEST(Penalties, NegativeFrequencyAndPresenceRaiseSeenTokens) {
  EXPECT_EQ(processed_logits(kLogits, a4_row(1.0f, -0.5f, -0.25f)),
            (std::vector<float>{2.0f, 0.25f, 0.75f, 1.0f}));
}

TEST(Penalties, RepetitionMultipliesByTheFloat32Reciprocal) {
  // Spec §7.2: torch's fallback computes l * (1 / r) in float32. For l = 5, r = 3 that is
  // 1.66666675 while 5 / 3 rounds to 1.66666663.
  Row row = row_with(greedy_params());
  row.prompt = {0};
  row.params.repetition_penalty = 3.0f;
  const std::vector<float> logits = {5.0f, 5.0f};
  const float reciprocal = 1.0f / 3.0f;
  const float expected = 5.0f * reciprocal;
  ASSERT_NE(expected, 5.0f / 3.0f);  // the two roundings differ here
  EXPECT_EQ(processed_logits(logits, row), (std::vector<float>{expected, 5.0f}));
}

TEST(Penalties, NegativeInfinityStaysNegativeInfinity) {
  Row row = row_with(greedy_params());
  row.output = {1, 1};
  row.params.allowed_token_ids = std::vector<TokenId>{0, 2};
  row.params.repetition_penalty = 1.5f;
  row.params.frequency_penalty = -2.0f;
  row.params.presence_penalty = -2.0f;
  // Token 1 is masked by the whitelist before the penalties; -inf * 1.5 + 4 + 2 stays -inf.
  const std::vector<float> logits = {0.0f, 1.0f, 0.0f};
  EXPECT_EQ(processed_logits(logits, row), (std::vector<float>{0.0f, -kInf, 0.0f}));
}

TEST(Penalties, DraftsCountOnlyWhenPredictingTheBonusToken) {
  Row row = row_with(greedy_params());
  row.output = {1};
  row.spec = {1, 2};
  row.params.frequency_penalty = 1.0f;
  row.params.presence_penalty = 0.5f;
  row.params.repetition_penalty = 2.0f;
  const std::vector<float> logits = {4.0f, 4.0f, 4.0f};
  // With drafts: counts 0, 2, 1: 4/2 - 2 - 0.5 = -0.5; 4/2 - 1 - 0.5 = 0.5.
  EXPECT_EQ(processed_logits(logits, row, true), (std::vector<float>{4.0f, -0.5f, 0.5f}));
  // Without: counts 0, 1, 0: 4/2 - 1 - 0.5 = 0.5; token 2 untouched.
  EXPECT_EQ(processed_logits(logits, row, false), (std::vector<float>{4.0f, 0.5f, 4.0f}));
}

TEST(Penalties, DraftsCountForRepetitionOnlyWhenPredictingTheBonusToken) {
  // Repetition sees drafts as history only when predicting the bonus token.
  Row row = row_with(greedy_params());
  row.spec = {0};
  row.params.repetition_penalty = 2.0f;
  const std::vector<float> logits = {4.0f, 1.0f};
  EXPECT_EQ(processed_logits(logits, row, false), (std::vector<float>{4.0f, 1.0f}));
  EXPECT_EQ(processed_logits(logits, row, true), (std::vector<float>{2.0f, 1.0f}));
}

TEST(Penalties, NeutralRowsAreUntouchedInAPenalisedBatch) {
  Row penalised = a4_row(2.0f, 0.5f, 0.25f);
  Row neutral = row_with(greedy_params());
  neutral.prompt = {0};
  neutral.output = {1, 1, 2};
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  const std::vector<float> full =
      full_matrix(4, logits, {penalised, neutral}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 4), (std::vector<float>{1.0f, -3.25f, -0.75f, 1.0f}));
  EXPECT_EQ(slice(full, 1, 4), kLogits);
}

TEST(Penalties, RepeatedPromptTokensCountOnceForRepetition) {
  Row row = row_with(greedy_params());
  row.prompt = {0, 0, 0};
  row.params.repetition_penalty = 2.0f;
  row.params.frequency_penalty = 1.0f;  // prompt repeats never reach frequency
  const std::vector<float> logits = {8.0f, 1.0f};
  EXPECT_EQ(processed_logits(logits, row), (std::vector<float>{4.0f, 1.0f}));
}

TEST(Penalties, PenaltiesApplyBeforeTheGreedyArgmax) {
  // Presence 2 pushes token 0 (3.0, in the output) below token 1 (2.0).
  Row row = row_with(greedy_params());
  row.output = {0};
  row.params.presence_penalty = 2.0f;
  EXPECT_EQ(sample_tokens(2, {3.0f, 2.0f}, {row}), std::vector<TokenId>{1});
}

TEST(Penalties, PenaltiesApplyBeforeTemperature) {
  // processed_logits of a random row: (l / r - f * count) / T.
  Row row = row_with(random_params(1, 2.0f));
  row.output = {0, 0};
  row.params.repetition_penalty = 2.0f;
  row.params.frequency_penalty = 0.5f;
  // (6 / 2 - 1) / 2 = 1; token 1: 3 / 2.
  EXPECT_EQ(processed_logits({6.0f, 3.0f}, row), (std::vector<float>{1.0f, 1.5f}));
}

}  // namespace
}  // namespace lastmile_test
