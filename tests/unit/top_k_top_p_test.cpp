// Step 7d — top-k and top-p (spec §9.2-9.4, Appendix A.1, A.2): top-k keeps every tie at the k-th
// value; top-p masks where the ascending float32 cumulative probability is <= 1 - p, never the
// largest, on the top-k-renormalised distribution; with p = 1 it still masks tokens whose float32
// probability underflows to 0, on every row once any row of the batch uses top-p.
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

Row sampled_row(int32_t top_k, float top_p = 1.0f) {
  Row row = row_with(random_params(1));
  row.params.top_k = top_k;
  row.params.top_p = top_p;
  return row;
}

// The kept token ids of a processed row, checking kept values are unchanged (T = 1).
std::vector<TokenId> kept(const std::vector<float>& processed, const std::vector<float>& logits) {
  std::vector<TokenId> ids;
  for (size_t i = 0; i < processed.size(); ++i) {
    if (processed[i] == -kInf) continue;
    EXPECT_EQ(processed[i], logits[i]) << "kept token " << i << " changed";
    ids.push_back(static_cast<TokenId>(i));
  }
  return ids;
}

// ---- top-k (A.1) ----

TEST(TopK, KeepsAllTiesAtThreshold) {  // A.1
  const std::vector<float> x = {3.0f, 2.0f, 2.0f, 1.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(2)), (std::vector<float>{3.0f, 2.0f, 2.0f, -kInf}));
}

TEST(TopK, KEqualToVocabIsUnchanged) {  // A.1
  const std::vector<float> x = {3.0f, 2.0f, 2.0f, 1.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(4)), x);
  EXPECT_EQ(processed_logits(x, sampled_row(5)), x);
}

TEST(TopK, OneKeepsOnlyTheMaximum) {  // A.1
  const std::vector<float> x = {3.0f, 2.0f, 2.0f, 1.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(1)), (std::vector<float>{3.0f, -kInf, -kInf, -kInf}));
}

TEST(TopK, OneKeepsEveryTokenTiedAtTheMaximum) {  // §9.7, mainline behaviour
  const std::vector<float> x = {1.0f, 4.0f, 0.0f, 4.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(1)), (std::vector<float>{-kInf, 4.0f, -kInf, 4.0f}));
}

TEST(TopK, ZeroAndMinusOneDisable) {
  const std::vector<float> x = {3.0f, 2.0f, 2.0f, 1.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(0)), x);
  EXPECT_EQ(processed_logits(x, sampled_row(-1)), x);
}

TEST(TopK, NegativeInfinityEntriesCountAsValues) {
  // Sorted ascending [-inf, -inf, 1, 2]; k = 3 gives the threshold -inf: nothing finite masked.
  const std::vector<float> x = {-kInf, 1.0f, -kInf, 2.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(3)), x);
  EXPECT_EQ(processed_logits(x, sampled_row(1)), (std::vector<float>{-kInf, -kInf, -kInf, 2.0f}));
}

TEST(TopK, AloneDoesNotMaskUnderflowedTokens) {
  // No row uses top-p, so the p = 1 underflow rule is off: -200 (in the top 3) survives as a
  // finite logit although its float32 probability is 0.
  const std::vector<float> x = {0.0f, -200.0f, -300.0f, 5.0f};
  EXPECT_EQ(processed_logits(x, sampled_row(3)), (std::vector<float>{0.0f, -200.0f, -kInf, 5.0f}));
}

TEST(TopK, DrawsStayInsideTheKeptSet) {
  const std::vector<float> x = {3.0f, 2.0f, 2.0f, 1.0f, 2.5f};
  std::vector<Row> rows;
  std::vector<float> logits;
  for (uint64_t step = 0; step < 500; ++step) {
    Row r = sampled_row(3);
    r.step = step;
    rows.push_back(r);
    logits.insert(logits.end(), x.begin(), x.end());
  }
  int counts[5] = {};
  for (TokenId t : sample_tokens(5, logits, rows)) ++counts[t];
  // Kept: 3.0, 2.5 and the tie at 2.0 (tokens 0, 4, 1, 2); token 3 never.
  EXPECT_EQ(counts[3], 0);
  for (int t : {0, 1, 2, 4}) EXPECT_GT(counts[t], 0) << t;
}

// ---- top-p (A.2): probabilities exactly 0.1f, 0.2f, 0.3f, 0.4f ----
// Ratios to the max are 0.25, 0.5, 0.75, 1 (exact); the sum 2.5 gives 1 / 2.5 = 0.4f, and
// 0.4f * ratio is exactly 0.1f, 0.2f, 0.3f, 0.4f. Token order: [0.3, 0.1, 0.4, 0.2].

std::vector<float> a2_logits() {
  return {exact_log(0.75f), exact_log(0.25f), 0.0f, exact_log(0.5f)};
}

TEST(TopP, AppendixA2PointSix) {
  // 1 - 0.6 ≈ 0.4: cumsums 0.1, 0.3 masked -> keep {0.3, 0.4}.
  const std::vector<float> x = a2_logits();
  EXPECT_EQ(kept(processed_logits(x, sampled_row(0, 0.6f)), x), (std::vector<TokenId>{0, 2}));
}

TEST(TopP, AppendixA2PointSevenEqualityMasks) {
  // float32 1 - 0.7f == 0.1f + 0.2f == 0.300000012: the comparison is <=, the 0.2 token goes.
  ASSERT_EQ(1.0f - 0.7f, 0.1f + 0.2f);
  const std::vector<float> x = a2_logits();
  EXPECT_EQ(kept(processed_logits(x, sampled_row(0, 0.7f)), x), (std::vector<TokenId>{0, 2}));
}

TEST(TopP, AppendixA2PointNineUsesFloat32OneMinusP) {
  // float32 1 - 0.9f = 0.100000024 >= 0.1f: the 0.1 token is masked (double arithmetic would keep
  // it).
  ASSERT_GE(1.0f - 0.9f, 0.1f);
  const std::vector<float> x = a2_logits();
  EXPECT_EQ(kept(processed_logits(x, sampled_row(0, 0.9f)), x), (std::vector<TokenId>{0, 2, 3}));
}

TEST(TopP, AppendixA2TinyPKeepsTheLargest) {
  const std::vector<float> x = a2_logits();
  EXPECT_EQ(kept(processed_logits(x, sampled_row(0, 0.05f)), x), std::vector<TokenId>{2});
}

TEST(TopP, OneWithTopKOffIsNoOpOnRepresentableProbabilities) {
  const std::vector<float> x = a2_logits();
  Row p1 = sampled_row(0, 1.0f);
  Row other = sampled_row(0, 0.9f);  // enables top-p for the batch
  std::vector<float> logits = x;
  logits.insert(logits.end(), x.begin(), x.end());
  const std::vector<float> full =
      full_matrix(4, logits, {p1, other}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 4), x);
}

TEST(TopP, AppliesToTheTopKRenormalisedDistribution) {
  // k = 2 keeps 0.4 and 0.3, renormalised to 4/7 and 3/7 ≈ 0.4286.
  const std::vector<float> x = a2_logits();
  // p = 0.65: cut 0.35 < 0.4286 keeps both (raw 0.3 would have been masked).
  EXPECT_EQ(kept(processed_logits(x, sampled_row(2, 0.65f)), x), (std::vector<TokenId>{0, 2}));
  // p = 0.5: cut 0.5 >= 0.4286 masks the 0.3 token (top-p on the raw distribution would keep it).
  EXPECT_EQ(kept(processed_logits(x, sampled_row(2, 0.5f)), x), std::vector<TokenId>{2});
}

// Every top-p below keeps exactly `expected` of x on both backends, in the processed row and in
// `draws` seeded draws (no logprobs asked: the draw decides the cut on its own), with top-k off
// and with top_k = vocab - 1, which keeps every finite token of the rows here (ties included).
void expect_top_p_keeps(const std::vector<float>& x, float top_p,
                        const std::vector<TokenId>& expected, int draws = 200) {
  const auto vocab = static_cast<int64_t>(x.size());
  for (int32_t top_k : {0, static_cast<int32_t>(vocab - 1)}) {
    SCOPED_TRACE(top_k);
    EXPECT_EQ(kept(processed_logits(x, sampled_row(top_k, top_p)), x), expected);
    std::vector<float> logits;
    std::vector<Row> rows;
    for (int r = 0; r < draws; ++r) {
      logits.insert(logits.end(), x.begin(), x.end());
      rows.push_back(sampled_row(top_k, top_p));
      rows.back().params.seed = static_cast<uint64_t>(r);
    }
    for (TokenId t : sample_tokens(vocab, logits, rows))
      ASSERT_TRUE(std::binary_search(expected.begin(), expected.end(), t)) << "drew " << t;
  }
}

TEST(TopP, EqualityMasksUnderTopKToo) {
  // A.2's tie at p = 0.7 (0.1f + 0.2f == 1 - 0.7f) with top-k on (k = 4 of 5, the fifth -inf):
  // top-p then runs on top-k's survivors, a path of its own, where the 0.2 token must go too.
  std::vector<float> x = a2_logits();
  x.push_back(-kInf);
  expect_top_p_keeps(x, 0.7f, {0, 2}, 2000);
}

TEST(TopP, EqualityMasksOnRowsPastTheLists) {
  // Ties where the survivors outnumber the lists' room (over 4096 of 8194), so that top-p is
  // decided on the row itself: the max (q = 1/2), a token of q = 1/4 and 8192 of 2^-15, all
  // exact. At p = 0.5 the 1/4 token's cumulative sum, 1/2, equals 1 - p: it goes.
  std::vector<float> x(8194, exact_log(0x1p-14f));
  x[5] = 0.0f;
  x[7] = exact_log(0.5f);
  expect_top_p_keeps(x, 0.5f, {5});
}

TEST(TopP, EqualityMasksInsideABucketOfEqualProbabilities) {
  // The tie inside a band's crossing bucket, walked entry by entry: the max (q = 1/2), two tokens
  // of 1/8 and 8192 of 2^-15. At p = 0.625 the first 1/8 token walked (the larger id: ascending
  // value, larger id first) reaches 0.375 = 1 - p and goes; the other passes it and stays.
  std::vector<float> x(8195, exact_log(0x1p-14f));
  x[5] = 0.0f;
  x[7] = exact_log(0.25f);
  x[9] = exact_log(0.25f);
  expect_top_p_keeps(x, 0.625f, {5, 7});
}

TEST(TopP, TinyPWithTiesAtTheMaximumKeepsExactlyOne) {
  const std::vector<float> x = {1.0f, 1.0f, 0.0f};
  const std::vector<TokenId> ids = kept(processed_logits(x, sampled_row(0, 0.01f)), x);
  ASSERT_EQ(ids.size(), 1u);
  EXPECT_TRUE(ids[0] == 0 || ids[0] == 1);
}

TEST(TopP, AtLeastOneTokenSurvivesWithNegativeInfinities) {
  const std::vector<float> x = {-kInf, -kInf, 0.5f, -kInf};
  EXPECT_EQ(kept(processed_logits(x, sampled_row(0, 0.01f)), x), std::vector<TokenId>{2});
}

TEST(TopP, OneMasksUnderflowedTokensWhenAnyRowUsesTopP) {
  // Row 0 has p = 1 and a token at -200 below the max (exp underflows to 0 in float32); row 1
  // turns top-p on for the batch.
  const std::vector<float> x = {0.0f, -200.0f, -1.0f, 5.0f};
  std::vector<float> logits = x;
  logits.insert(logits.end(), x.begin(), x.end());
  const std::vector<float> full = full_matrix(
      4, logits, {sampled_row(0, 1.0f), sampled_row(0, 0.999f)}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 4), (std::vector<float>{0.0f, -kInf, -1.0f, 5.0f}));
  // Without a top-p row in the batch the finite value stays.
  EXPECT_EQ(processed_logits(x, sampled_row(0, 1.0f)), x);
}

TEST(TopP, OneMasksUnderflowedTokensOnGreedyRowsToo) {  // §2.4
  const std::vector<float> x = {0.0f, -200.0f, -1.0f, 5.0f};
  std::vector<float> logits = x;
  logits.insert(logits.end(), x.begin(), x.end());
  const std::vector<float> full = full_matrix(
      4, logits, {row_with(greedy_params()), sampled_row(0, 0.5f)}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 4), (std::vector<float>{0.0f, -kInf, -1.0f, 5.0f}));
}

TEST(TopP, GreedyRowTopPDoesNotTurnTopPOn) {
  // A greedy row's top_p is forced to 1 (§12.1), so the batch has no top-p row.
  Row greedy = row_with(greedy_params());
  greedy.params.top_p = 0.5f;
  const std::vector<float> x = {0.0f, -200.0f, -1.0f, 5.0f};
  std::vector<float> logits = x;
  logits.insert(logits.end(), x.begin(), x.end());
  const std::vector<float> full =
      full_matrix(4, logits, {greedy, sampled_row(0, 1.0f)}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 4), x);
  EXPECT_EQ(slice(full, 1, 4), x);
}

TEST(TopP, DrawsStayInsideTheKeptSet) {
  const std::vector<float> x = a2_logits();
  std::vector<Row> rows;
  std::vector<float> logits;
  for (uint64_t step = 0; step < 500; ++step) {
    Row r = sampled_row(0, 0.6f);
    r.step = step;
    rows.push_back(r);
    logits.insert(logits.end(), x.begin(), x.end());
  }
  int counts[4] = {};
  for (TokenId t : sample_tokens(4, logits, rows)) ++counts[t];
  EXPECT_EQ(counts[1], 0);
  EXPECT_EQ(counts[3], 0);
  EXPECT_GT(counts[0], 0);
  EXPECT_GT(counts[2], 0);
}

}  // namespace
}  // namespace lastmile_test
