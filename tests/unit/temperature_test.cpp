// Step 7a/7b/7f — greedy argmax, temperature and the greedy/random merge (spec §8, Appendix A.10):
// temperature < 1e-5 is greedy; greedy rows take the lowest-index argmax of the step-6 logits and
// are divided by 1; random rows are divided by their temperature.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

const std::vector<float> kLogits = {1.0f, 3.5f, -2.0f, 0.7f, 3.0f};

std::vector<float> divided(const std::vector<float>& x, float t) {
  std::vector<float> out = x;
  for (float& v : out) v = v / t;  // float32 division, torch's div_
  return out;
}

TEST(Temperature, GreedyBelowOneEMinusFive) {
  RequestParams p;
  p.temperature = 9.99e-6f;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 0.0f;
  EXPECT_TRUE(p.is_greedy());
  p.temperature = 1e-5f;
  EXPECT_FALSE(p.is_greedy());
}

TEST(Temperature, JustBelowTheThresholdIsNotDivided) {
  // Mixed batch: a greedy row (9.99e-6) and a random row (1e-5). The greedy row's processed logits
  // are the step-6 logits; the random row's are divided by 1e-5.
  Row greedy = row_with(random_params(1, 9.99e-6f));
  Row random = row_with(random_params(1, 1e-5f));
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  const std::vector<float> full =
      full_matrix(5, logits, {greedy, random}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 5), kLogits);
  EXPECT_EQ(slice(full, 1, 5), divided(kLogits, 1e-5f));
}

TEST(Temperature, GreedyArgmaxTakesTheLowestIndexOnTies) {
  const std::vector<float> logits = {1.0f, 3.0f, 2.0f, 3.0f, 3.0f};
  EXPECT_EQ(sample_tokens(5, logits, {row_with(greedy_params())}), std::vector<TokenId>{1});
}

TEST(Temperature, GreedyArgmaxOfNegativeInfinityRowIsZero) {
  const std::vector<float> logits = {-kInf, -kInf, -kInf};
  EXPECT_EQ(sample_tokens(3, logits, {row_with(greedy_params())}), std::vector<TokenId>{0});
}

TEST(Temperature, GreedyRowsIgnoreTopKTopPAndMinP) {
  // Greedy forces top_k 0, top_p 1 and min_p 0 (spec §12.1): in a mixed batch the greedy row's
  // processed logits show no masking even with top_k 1, top_p 0.01, min_p 1.
  Row greedy = row_with(greedy_params());
  greedy.params.top_k = 1;
  greedy.params.top_p = 0.01f;
  greedy.params.min_p = 1.0f;
  const Row random = row_with(random_params(5));
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  const std::vector<float> full =
      full_matrix(5, logits, {greedy, random}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 5), kLogits);
}

TEST(Temperature, AppendixA10MixedBatchMerge) {
  // Temperatures [0 (greedy), 0.7]: row 0 is divided by 1 and returns the pre-temperature argmax;
  // row 1 is divided by 0.7.
  const Row greedy = row_with(greedy_params());
  const Row random = row_with(random_params(9, 0.7f));
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  const std::vector<float> full =
      full_matrix(5, logits, {greedy, random}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 5), kLogits);
  EXPECT_EQ(slice(full, 1, 5), divided(kLogits, 0.7f));
  EXPECT_EQ(sample_tokens(5, logits, {greedy, random})[0], 1);
}

TEST(Temperature, AppendixA10AllRandomBatchUsesRawTemperatures) {
  const Row a = row_with(random_params(1, 0.7f));
  const Row b = row_with(random_params(2, 1.3f));
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  const std::vector<float> full = full_matrix(5, logits, {a, b}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 5), divided(kLogits, 0.7f));
  EXPECT_EQ(slice(full, 1, 5), divided(kLogits, 1.3f));
}

TEST(Temperature, AllGreedyBatchHasNoTemperatureStep) {
  // All-greedy processed logits are the step-6 logits (spec §3.1).
  const Row a = row_with(greedy_params());
  EXPECT_EQ(full_matrix(5, kLogits, {a}, LogprobsMode::processed_logits), kLogits);
}

TEST(Temperature, GreedyArgmaxIsTakenOnPenalisedLogitsBeforeTemperature) {
  // A greedy row next to random rows returns the argmax of its step-6 logits whatever the seed
  // and companions.
  Row greedy = row_with(greedy_params());
  greedy.output = {1};
  greedy.params.presence_penalty = 1.0f;  // 3.5 - 1 = 2.5 < 3.0: token 4 wins
  for (uint64_t seed = 0; seed < 20; ++seed) {
    const Row random = row_with(random_params(seed, 2.0f));
    std::vector<float> logits = kLogits;
    logits.insert(logits.end(), kLogits.begin(), kLogits.end());
    EXPECT_EQ(sample_tokens(5, logits, {random, greedy})[1], 4);
  }
}

TEST(Temperature, TinyRandomTemperatureConcentratesOnTheArgmax) {
  // T = 1e-4: the runner-up sits 0.5 / 1e-4 = 5000 nats below the max, so its weight is 0.
  std::vector<Row> rows;
  std::vector<float> logits;
  for (uint64_t step = 0; step < 100; ++step) {
    Row r = row_with(random_params(3, 1e-4f));
    r.step = step;
    rows.push_back(r);
    logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  }
  for (TokenId t : sample_tokens(5, logits, rows)) EXPECT_EQ(t, 1);
}

TEST(Temperature, HighTemperatureFlattensTheProcessedLogits) {
  const Row r = row_with(random_params(3, 100.0f));
  EXPECT_EQ(processed_logits(kLogits, r), divided(kLogits, 100.0f));
}

}  // namespace
}  // namespace lastmile_test
