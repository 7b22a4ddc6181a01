// Step 3 — allowed_token_ids whitelist (spec §6.1): every id outside the list becomes -inf; rows
// without a list are untouched.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

const std::vector<float> kLogits = {0.5f, 3.0f, -1.0f, 2.0f, 1.25f, -0.75f, 4.0f, 0.0f};

TEST(AllowedTokenIds, MasksEveryIdOutsideTheList) {
  Row row = row_with(greedy_params());
  row.params.allowed_token_ids = std::vector<TokenId>{3, 5};
  const std::vector<float> expected = {-kInf, -kInf, -kInf, 2.0f, -kInf, -0.75f, -kInf, -kInf};
  EXPECT_EQ(processed_logits(kLogits, row), expected);
}

TEST(AllowedTokenIds, GreedyPicksTheBestAllowedToken) {
  Row row = row_with(greedy_params());
  row.params.allowed_token_ids = std::vector<TokenId>{0, 4, 5};
  // Token 6 (4.0) is the global argmax; among {0, 4, 5} token 4 (1.25) is the largest.
  EXPECT_EQ(sample_tokens(8, kLogits, {row}), std::vector<TokenId>{4});
}

TEST(AllowedTokenIds, RowsWithoutAListAreUntouched) {
  Row listed = row_with(greedy_params());
  listed.params.allowed_token_ids = std::vector<TokenId>{1};
  const Row plain = row_with(greedy_params());
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  const std::vector<float> full =
      full_matrix(8, logits, {listed, plain}, LogprobsMode::processed_logits);
  const std::vector<float> row0 = slice(full, 0, 8);
  const std::vector<float> row1 = slice(full, 1, 8);
  EXPECT_EQ(row0, (std::vector<float>{-kInf, 3.0f, -kInf, -kInf, -kInf, -kInf, -kInf, -kInf}));
  EXPECT_EQ(row1, kLogits);
}

TEST(AllowedTokenIds, DuplicateIdsKeepTheirValue) {
  Row row = row_with(greedy_params());
  row.params.allowed_token_ids = std::vector<TokenId>{2, 2, 7, 2};
  const std::vector<float> expected = {-kInf, -kInf, -1.0f, -kInf, -kInf, -kInf, -kInf, 0.0f};
  EXPECT_EQ(processed_logits(kLogits, row), expected);
}

TEST(AllowedTokenIds, RandomRowsDrawOnlyAllowedTokens) {
  const std::vector<TokenId> allowed = {1, 2, 5};
  std::vector<Row> rows;
  std::vector<float> logits;
  for (uint64_t step = 0; step < 1000; ++step) {
    Row r = row_with(random_params(7));
    r.params.allowed_token_ids = allowed;
    r.step = step;
    rows.push_back(r);
    logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  }
  const std::vector<TokenId> tokens = sample_tokens(8, logits, rows);
  bool seen[8] = {};
  for (TokenId t : tokens) {
    ASSERT_TRUE(t == 1 || t == 2 || t == 5) << "drew forbidden token " << t;
    seen[t] = true;
  }
  // Allowed mass: token 1 ~96%, token 5 ~2.3%, token 2 ~1.8%: over 1000 draws each appears
  // (a miss has probability < 1e-7).
  EXPECT_TRUE(seen[1]);
  EXPECT_TRUE(seen[2]);
  EXPECT_TRUE(seen[5]);
}

TEST(AllowedTokenIds, WhitelistAppliesBeforeBadWords) {
  // The only allowed token is also a banned single-token word: the row is all -inf and both greedy
  // and random rows return token 0 (spec §9.9, vLLM's argmax of an all -inf / NaN row).
  Row greedy = row_with(greedy_params());
  greedy.params.allowed_token_ids = std::vector<TokenId>{5};
  greedy.params.bad_words_token_ids = {{5}};
  Row random = row_with(random_params(3));
  random.params.allowed_token_ids = std::vector<TokenId>{5};
  random.params.bad_words_token_ids = {{5}};
  std::vector<float> logits = kLogits;
  logits.insert(logits.end(), kLogits.begin(), kLogits.end());
  EXPECT_EQ(sample_tokens(8, logits, {greedy, random}), (std::vector<TokenId>{0, 0}));
  const std::vector<float> processed = processed_logits(kLogits, greedy);
  EXPECT_EQ(processed, std::vector<float>(8, -kInf));
}

TEST(AllowedTokenIds, NegativeInfinityLogitsStayMaskedWhenAllowed) {
  Row row = row_with(greedy_params());
  row.params.allowed_token_ids = std::vector<TokenId>{0, 1};
  const std::vector<float> logits = {-kInf, 1.0f, 2.0f};
  EXPECT_EQ(processed_logits(logits, row), (std::vector<float>{-kInf, 1.0f, -kInf}));
  EXPECT_EQ(sample_tokens(3, logits, {row}), std::vector<TokenId>{1});
}

}  // namespace
}  // namespace lastmile_test
