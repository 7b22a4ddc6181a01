// Step 4 — bad words (spec §6.2, Appendix A.6): a sequence bans its last token when its prefix
// equals the end of the generated history; the prompt is never consulted; drafts count only when
// predicting the bonus token (§2.2).
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

constexpr int64_t kVocab = 128;

std::vector<float> flat_logits() { return std::vector<float>(kVocab, 0.5f); }

// The processed (all-greedy, step 6) row for a greedy request with this history and these words.
std::vector<float> after_bad_words(std::vector<TokenId> output,
                                   std::vector<std::vector<TokenId>> words,
                                   std::vector<TokenId> prompt = {}, std::vector<TokenId> spec = {},
                                   bool predict_bonus_token = false) {
  Row row = row_with(greedy_params());
  row.output = std::move(output);
  row.prompt = std::move(prompt);
  row.spec = std::move(spec);
  row.params.bad_words_token_ids = std::move(words);
  return processed_logits(flat_logits(), row, predict_bonus_token);
}

// The ids that became -inf.
std::vector<TokenId> banned(const std::vector<float>& row) {
  std::vector<TokenId> ids;
  for (size_t i = 0; i < row.size(); ++i) {
    if (row[i] == -kInf) {
      ids.push_back(static_cast<TokenId>(i));
    } else {
      EXPECT_EQ(row[i], 0.5f) << "token " << i << " changed without being banned";
    }
  }
  return ids;
}

TEST(BadWords, ThreeTokenWordBansItsLastTokenAfterAMatchingPrefix) {  // A.6
  EXPECT_EQ(banned(after_bad_words({1, 10, 20}, {{10, 20, 30}})), std::vector<TokenId>{30});
}

TEST(BadWords, TwoTokenWordMatchesTheLastToken) {  // A.6
  EXPECT_EQ(banned(after_bad_words({1, 10, 20}, {{20, 31}})), std::vector<TokenId>{31});
}

TEST(BadWords, SingleTokenWordIsAlwaysBanned) {  // A.6
  EXPECT_EQ(banned(after_bad_words({1, 10, 20}, {{5}})), std::vector<TokenId>{5});
  EXPECT_EQ(banned(after_bad_words({}, {{5}})), std::vector<TokenId>{5});
}

TEST(BadWords, MismatchedPrefixBansNothing) {  // A.6
  EXPECT_EQ(banned(after_bad_words({1, 10, 20}, {{99, 20, 32}})), std::vector<TokenId>{});
}

TEST(BadWords, WordLongerThanHistoryPlusOneIsSkippedEvenIfThePromptCompletesIt) {  // A.6
  EXPECT_EQ(banned(after_bad_words({20}, {{10, 20, 30}}, /*prompt=*/{7, 10})),
            std::vector<TokenId>{});
}

TEST(BadWords, WordExactlyHistoryPlusOneLongMatches) {
  EXPECT_EQ(banned(after_bad_words({10, 20}, {{10, 20, 30}})), std::vector<TokenId>{30});
}

TEST(BadWords, PrefixMustBeAtTheEndOfTheHistory) {
  // 10, 20 occur in the history but not as its last two tokens.
  EXPECT_EQ(banned(after_bad_words({10, 20, 3}, {{10, 20, 30}})), std::vector<TokenId>{});
}

TEST(BadWords, PromptIsNeverConsulted) {
  // Empty output: only single-token words can match; the prompt ending in 10 does not help.
  EXPECT_EQ(banned(after_bad_words({}, {{10, 30}}, /*prompt=*/{1, 10})), std::vector<TokenId>{});
}

TEST(BadWords, SequencesSharingAPrefixBanAllTheirLastTokens) {
  EXPECT_EQ(banned(after_bad_words({4, 20}, {{20, 31}, {20, 32}, {21, 33}, {6}})),
            (std::vector<TokenId>{6, 31, 32}));
}

TEST(BadWords, DraftsCountOnlyWhenPredictingTheBonusToken) {  // §2.2
  // Output [10] plus draft [20]: with the drafts the history ends 10, 20.
  EXPECT_EQ(banned(after_bad_words({10}, {{10, 20, 30}}, {}, /*spec=*/{20}, true)),
            std::vector<TokenId>{30});
  EXPECT_EQ(banned(after_bad_words({10}, {{10, 20, 30}}, {}, /*spec=*/{20}, false)),
            std::vector<TokenId>{});
  // Without predicting the bonus token, [10] alone completes [10, 31].
  EXPECT_EQ(banned(after_bad_words({10}, {{10, 31}}, {}, /*spec=*/{20}, false)),
            std::vector<TokenId>{31});
  EXPECT_EQ(banned(after_bad_words({10}, {{10, 31}}, {}, /*spec=*/{20}, true)),
            std::vector<TokenId>{});
}

TEST(BadWords, BannedTokenIsNotSampledGreedily) {
  std::vector<float> logits = flat_logits();
  logits[30] = 9.0f;
  logits[40] = 8.0f;
  Row row = row_with(greedy_params());
  row.output = {10, 20};
  row.params.bad_words_token_ids = {{10, 20, 30}};
  EXPECT_EQ(sample_tokens(kVocab, logits, {row}), std::vector<TokenId>{40});
}

TEST(BadWords, WordsApplyOnlyToTheirOwnRow) {
  Row with_words = row_with(greedy_params());
  with_words.params.bad_words_token_ids = {{5}};
  const Row without = row_with(greedy_params());
  std::vector<float> logits(2 * kVocab, 0.5f);
  const std::vector<float> full =
      full_matrix(kVocab, logits, {with_words, without}, LogprobsMode::processed_logits);
  EXPECT_EQ(banned(slice(full, 0, kVocab)), std::vector<TokenId>{5});
  EXPECT_EQ(banned(slice(full, 1, kVocab)), std::vector<TokenId>{});
}

}  // namespace
}  // namespace lastmile_test
