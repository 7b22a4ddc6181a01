// Step 5a — min_tokens (spec §6.3): while len(output) < min_tokens every stop token id is -inf;
// drafts never count; logit_bias (applied after) cannot revive a banned stop token.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

const std::vector<float> kLogits = {1.0f, 0.25f, 5.0f, -2.0f, 0.0f, 3.0f};

Row stop_row(int32_t min_tokens, std::vector<TokenId> output) {
  Row row = row_with(greedy_params());
  row.params.min_tokens = min_tokens;
  row.params.stop_token_ids = {2, 5};
  row.output = std::move(output);
  return row;
}

TEST(MinTokens, StopTokensAreBannedWhileOutputIsShorter) {
  const std::vector<float> expected = {1.0f, 0.25f, -kInf, -2.0f, 0.0f, -kInf};
  EXPECT_EQ(processed_logits(kLogits, stop_row(3, {})), expected);
  EXPECT_EQ(processed_logits(kLogits, stop_row(3, {0, 1})), expected);
}

TEST(MinTokens, StopTokensAreAllowedOnceOutputReachesMinTokens) {
  EXPECT_EQ(processed_logits(kLogits, stop_row(3, {0, 1, 4})), kLogits);
  EXPECT_EQ(processed_logits(kLogits, stop_row(3, {0, 1, 4, 4})), kLogits);
}

TEST(MinTokens, ZeroMinTokensBansNothing) {
  EXPECT_EQ(processed_logits(kLogits, stop_row(0, {})), kLogits);
}

TEST(MinTokens, GreedyRowTakesTheRunnerUpWhileStopIsBanned) {
  // Token 2 (5.0, a stop id) is the argmax; token 5 (3.0) is a stop id too; 0 (1.0) is next.
  EXPECT_EQ(sample_tokens(6, kLogits, {stop_row(1, {})}), std::vector<TokenId>{0});
  EXPECT_EQ(sample_tokens(6, kLogits, {stop_row(1, {4})}), std::vector<TokenId>{2});
}

TEST(MinTokens, DraftsDoNotCountTowardsMinTokens) {
  Row row = stop_row(3, {0, 1});
  row.spec = {4, 4};
  const std::vector<float> expected = {1.0f, 0.25f, -kInf, -2.0f, 0.0f, -kInf};
  EXPECT_EQ(processed_logits(kLogits, row, /*predict_bonus_token=*/true), expected);
}

TEST(MinTokens, LogitBiasCannotReviveABannedStopToken) {
  Row row = stop_row(2, {});
  row.params.logit_bias = {{2, 100.0f}, {4, 1.5f}};
  const std::vector<float> expected = {1.0f, 0.25f, -kInf, -2.0f, 1.5f, -kInf};
  EXPECT_EQ(processed_logits(kLogits, row), expected);
}

TEST(MinTokens, RandomRowsNeverDrawABannedStopToken) {
  std::vector<Row> rows;
  std::vector<float> logits;
  for (uint64_t step = 0; step < 500; ++step) {
    Row r = stop_row(1, {});
    r.params.temperature = 1.0f;
    r.params.seed = 11;
    r.step = step;
    rows.push_back(r);
    logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  }
  for (TokenId t : sample_tokens(6, logits, rows)) ASSERT_TRUE(t != 2 && t != 5) << t;
}

TEST(MinTokens, RequestBatchEmitsStopOnlyAtPositionMinTokens) {
  lastmile::RequestBatch batch(make_config(6, 1));
  RequestParams p = greedy_params();
  p.min_tokens = 3;
  p.stop_token_ids = {2};
  batch.add("a", p);
  for (int i = 0; i < 4; ++i) batch.step(LogitsView::f32(kLogits.data(), 1, 6));
  const auto output = batch.output_token_ids("a");
  // Positions 0..2 cannot be the stop token; position 3 can (and is the argmax).
  EXPECT_EQ(std::vector<TokenId>(output.begin(), output.end()), (std::vector<TokenId>{5, 5, 5, 2}));
}

}  // namespace
}  // namespace lastmile_test
