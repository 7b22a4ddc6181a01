// Step 1 and step 8 — logprobs (spec §3, §4, §5, Appendix A.5, A.7): the four modes, top-N plus the
// sampled token, ranks counting entries >= the sampled value, the full matrix, and explicit
// logprob_token_ids (returned beside the top-N block, with id 0 / -inf / valid 0 padding).
#include <algorithm>
#include <numeric>

#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::LogitsProcessor;
using lastmile::ProcessorRow;

constexpr double kTolerance = 2e-6;

// Sets token 1 to 100 (argmax-changing, so it runs in step 5).
class ForceTokenOne final : public LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return false; }
  void apply(const ProcessorRow&, std::span<float> logits) const override { logits[1] = 100.0f; }
};

std::vector<float> repeat_rows(const std::vector<float>& row, int n) {
  std::vector<float> out;
  for (int i = 0; i < n; ++i) out.insert(out.end(), row.begin(), row.end());
  return out;
}

std::vector<int64_t> to_vector(std::span<const int64_t> s) { return {s.begin(), s.end()}; }
std::vector<TokenId> to_vector(std::span<const TokenId> s) { return {s.begin(), s.end()}; }
std::vector<uint8_t> to_vector(std::span<const uint8_t> s) { return {s.begin(), s.end()}; }

// ---- ranks (A.5) ----

TEST(Logprobs, AppendixA5RanksCountEntriesAtLeastTheSampledValue) {
  // raw_logits reads the input before the whitelist, so the whitelist only picks the sampled token.
  const std::vector<float> x = {-1.0f, -1.0f, -2.0f};
  Row sampled0 = row_with(greedy_params());
  Row sampled1 = row_with(greedy_params());
  sampled1.params.allowed_token_ids = std::vector<TokenId>{1};
  Row sampled2 = row_with(greedy_params());
  sampled2.params.allowed_token_ids = std::vector<TokenId>{2};
  Sampler sampler(make_config(3, 3, LogprobsMode::raw_logits));
  const std::vector<Row> rows = {sampled0, sampled1, sampled2};
  const std::vector<float> logits = repeat_rows(x, 3);
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 3, 3), make_batch(rows, 0));
  EXPECT_EQ(to_vector(out.sampled_token_ids), (std::vector<TokenId>{0, 1, 2}));
  EXPECT_EQ(to_vector(out.logprobs.ranks), (std::vector<int64_t>{2, 2, 3}));
}

TEST(Logprobs, AppendixA5NegativeInfinitySampledValueRanksLast) {
  // Row [-1, -inf, -inf] with token 1 sampled (a processor forces it after the raw snapshot).
  SamplerConfig config = make_config(3, 1, LogprobsMode::raw_logits);
  config.logits_processors.push_back(std::make_shared<ForceTokenOne>());
  Sampler sampler(config);
  const std::vector<float> x = {-1.0f, -kInf, -kInf};
  const std::vector<Row> rows = {row_with(greedy_params())};
  const SamplerOutput& out = sampler.sample(LogitsView::f32(x.data(), 1, 3), make_batch(rows, 0));
  EXPECT_EQ(out.sampled_token_ids[0], 1);
  EXPECT_EQ(out.logprobs.token_ids[0], 1);
  EXPECT_EQ(out.logprobs.logprobs[0], -kInf);
  EXPECT_EQ(out.logprobs.ranks[0], 3);
}

TEST(Logprobs, TiedMaximumGetsThePessimisticRank) {
  Sampler sampler(make_config(4, 1));
  const std::vector<float> x = {0.5f, 2.0f, 2.0f, 2.0f};
  const std::vector<Row> rows = {row_with(greedy_params())};
  const SamplerOutput& out = sampler.sample(LogitsView::f32(x.data(), 1, 4), make_batch(rows, 1));
  EXPECT_EQ(out.sampled_token_ids[0], 1);
  EXPECT_EQ(out.logprobs.ranks[0], 3);
}

// ---- top-N block ----

TEST(Logprobs, TopNHasWidthNPlusOneWithTheSampledTokenFirst) {
  const std::vector<float> x = {0.1f, 2.0f, -1.0f, 3.0f, 0.7f, 2.5f, -0.2f};
  Row row = row_with(greedy_params());
  row.params.allowed_token_ids = std::vector<TokenId>{4, 6};  // sampled: token 4, not the top
  Sampler sampler(make_config(7, 1));
  const SamplerOutput& out = sampler.sample(LogitsView::f32(x.data(), 1, 7), make_batch({row}, 3));
  ASSERT_TRUE(out.logprobs.present());
  ASSERT_EQ(out.logprobs.width, 4);
  EXPECT_EQ(to_vector(out.logprobs.token_ids), (std::vector<TokenId>{4, 3, 5, 1}));
  const std::vector<double> expected = log_softmax_double(x);
  EXPECT_NEAR(out.logprobs.logprobs[0], expected[4], kTolerance);
  EXPECT_NEAR(out.logprobs.logprobs[1], expected[3], kTolerance);
  EXPECT_NEAR(out.logprobs.logprobs[2], expected[5], kTolerance);
  EXPECT_NEAR(out.logprobs.logprobs[3], expected[1], kTolerance);
  // Raw logprobs: 0.7 is the 4th largest of the raw row.
  EXPECT_EQ(out.logprobs.ranks[0], 4);
  EXPECT_TRUE(out.full_logprobs.empty());
  EXPECT_FALSE(out.token_logprobs.present());
}

TEST(Logprobs, TopNEqualValuesComeInAscendingIdOrder) {
  const std::vector<float> x = {1.0f, 2.0f, 1.0f, 2.0f, 1.0f};
  Sampler sampler(make_config(5, 1));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(x.data(), 1, 5), make_batch({row_with(greedy_params())}, 5));
  EXPECT_EQ(to_vector(out.logprobs.token_ids), (std::vector<TokenId>{1, 1, 3, 0, 2, 4}));
}

TEST(Logprobs, ZeroGivesWidthOne) {
  const std::vector<float> x = {0.0f, 1.0f, 2.0f};
  Sampler sampler(make_config(3, 2));
  const std::vector<float> logits = repeat_rows(x, 2);
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 2, 3),
                     make_batch({row_with(greedy_params()), row_with(greedy_params())}, 0));
  ASSERT_EQ(out.logprobs.width, 1);
  EXPECT_EQ(to_vector(out.logprobs.token_ids), (std::vector<TokenId>{2, 2}));
  EXPECT_EQ(out.logprobs.logprobs.size(), 2u);
  EXPECT_EQ(to_vector(out.logprobs.ranks), (std::vector<int64_t>{1, 1}));
}

TEST(Logprobs, MinusOneGivesTheFullMatrix) {
  const std::vector<float> row0 = {0.0f, 1.0f, 2.0f, -kInf};
  const std::vector<float> row1 = {5.0f, -3.0f, 0.25f, 0.5f};
  std::vector<float> logits = row0;
  logits.insert(logits.end(), row1.begin(), row1.end());
  Sampler sampler(make_config(4, 2));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 2, 4),
                     make_batch({row_with(greedy_params()), row_with(greedy_params())}, -1));
  EXPECT_FALSE(out.logprobs.present());
  ASSERT_EQ(out.full_logprobs.size(), 8u);
  expect_near_row(out.full_logprobs.subspan(0, 4), log_softmax_double(row0), kTolerance);
  expect_near_row(out.full_logprobs.subspan(4, 4), log_softmax_double(row1), kTolerance);
}

// A raw_logprobs row reads one map of the caller's row whatever is asked: the full matrix holds
// the very values (and so the ranks) that top-N reports, on a long row where two log-sums could
// differ in the last bit. Both backends.
TEST(Logprobs, RawFullMatrixHoldsTheTopNValues) {
  const int64_t vocab = 100000;
  const std::vector<float> logits = lcg_logits(static_cast<size_t>(vocab), 21, -8.0f, 8.0f);
  for (const auto backend : {lastmile::BackendKind::cpu, lastmile::BackendKind::reference}) {
    SamplerConfig config = make_config(vocab, 1);
    config.backend = backend;
    Sampler full_sampler(config), top_sampler(config);
    const LogitsView view = LogitsView::f32(logits.data(), 1, vocab);
    const SamplerOutput& full =
        full_sampler.sample(view, make_batch({row_with(greedy_params())}, -1));
    const SamplerOutput& top = top_sampler.sample(view, make_batch({row_with(greedy_params())}, 8));
    ASSERT_EQ(top.logprobs.width, 9);
    for (int64_t i = 0; i < 9; ++i) {
      const TokenId id = top.logprobs.token_ids[i];
      EXPECT_EQ(top.logprobs.logprobs[i], full.full_logprobs[id]) << "entry " << i;
    }
    const float sampled = full.full_logprobs[top.sampled_token_ids[0]];
    EXPECT_EQ(top.logprobs.ranks[0],
              std::count_if(full.full_logprobs.begin(), full.full_logprobs.end(),
                            [&](float v) { return v >= sampled; }));
  }
}

TEST(Logprobs, BatchWidthIsTheLargestRequestedCount) {
  Row a = row_with(greedy_params());
  a.params.logprobs = 2;
  Row b = row_with(greedy_params());
  b.params.logprobs = 5;
  const Row c = row_with(greedy_params());
  const std::vector<float> logits = lcg_logits(3 * 9, 1);
  Sampler sampler(make_config(9, 3));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 3, 9), make_batch({a, b, c}));
  EXPECT_EQ(out.logprobs.width, 6);
  EXPECT_EQ(out.logprobs.token_ids.size(), 18u);
  EXPECT_EQ(out.logprobs.ranks.size(), 3u);
}

TEST(Logprobs, RequestMinusOneCountsAsTheVocabularySize) {
  // Spec §1.3 step 6 and §3.4: a request's logprobs = -1 is mapped to V when the batch is built
  // ("-1 never reaches the sampler from user requests"), so max_num_logprobs = V: a top-N block of
  // width V + 1 for every row, with ranks. The unsorted full-matrix form belongs to a batch-level
  // num_logprobs of -1 only.
  Row a = row_with(greedy_params());
  a.params.logprobs = 3;
  Row b = row_with(greedy_params());
  b.params.logprobs = -1;
  const std::vector<float> logits = lcg_logits(2 * 9, 2);
  Sampler sampler(make_config(9, 2));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 2, 9), make_batch({a, b}));
  EXPECT_TRUE(out.full_logprobs.empty());
  ASSERT_TRUE(out.logprobs.present());
  ASSERT_EQ(out.logprobs.width, 10);
  // Row 1's columns 1..9: every token, by descending logit.
  std::vector<TokenId> expected(9);
  std::iota(expected.begin(), expected.end(), 0);
  std::stable_sort(expected.begin(), expected.end(),
                   [&](TokenId x, TokenId y) { return logits[9 + x] > logits[9 + y]; });
  EXPECT_EQ(std::vector<TokenId>(out.logprobs.token_ids.begin() + 11, out.logprobs.token_ids.end()),
            expected);
}

// has_full_logprobs says what the step asked, not whether rows came back: a batch of no rows that
// asks for the full matrix has one of [0, vocab_size], which an empty span alone cannot tell from
// none (the front ends wrote a [0, V] array or None from their own copy of the rule).
TEST(Logprobs, HasFullLogprobsFollowsTheResolvedNumLogprobs) {
  const std::vector<float> logits = lcg_logits(2 * 9, 4);
  Sampler sampler(make_config(9, 2));
  Batch none_asked;  // no rows, nullopt: no request asks
  EXPECT_FALSE(sampler.sample(LogitsView::f32(nullptr, 0, 9), none_asked).has_full_logprobs);
  Batch full_of_none;
  full_of_none.num_logprobs = -1;
  const SamplerOutput& empty = sampler.sample(LogitsView::f32(nullptr, 0, 9), full_of_none);
  EXPECT_TRUE(empty.has_full_logprobs);
  EXPECT_TRUE(empty.full_logprobs.empty());
  Row every_token = row_with(greedy_params());
  every_token.params.logprobs = -1;  // a request's -1 is top-N of every token, not the matrix
  const SamplerOutput& top =
      sampler.sample(LogitsView::f32(logits.data(), 2, 9), make_batch({every_token, every_token}));
  EXPECT_FALSE(top.has_full_logprobs);
  EXPECT_EQ(top.logprobs.width, 10);
  const SamplerOutput& full = sampler.sample(LogitsView::f32(logits.data(), 2, 9),
                                             make_batch({every_token, every_token}, -1));
  EXPECT_TRUE(full.has_full_logprobs);
  EXPECT_EQ(full.full_logprobs.size(), 18u);
  EXPECT_FALSE(full.logprobs.present());
}

TEST(Logprobs, NothingAskedGivesNoBlocks) {
  const std::vector<float> logits = lcg_logits(9, 3);
  Sampler sampler(make_config(9, 1));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 1, 9), make_batch({row_with(greedy_params())}));
  EXPECT_FALSE(out.logprobs.present());
  EXPECT_FALSE(out.token_logprobs.present());
  EXPECT_TRUE(out.full_logprobs.empty());
  EXPECT_EQ(out.sampled_token_ids.size(), 1u);
}

TEST(Logprobs, BatchNumLogprobsOverridesTheRequests) {
  Row a = row_with(greedy_params());
  a.params.logprobs = 5;
  const std::vector<float> logits = lcg_logits(9, 4);
  Sampler sampler(make_config(9, 1));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), 1, 9), make_batch({a}, 1));
  EXPECT_EQ(out.logprobs.width, 2);
}

// ---- explicit ids (A.7) ----

struct A7 {
  std::vector<float> logits;  // [2, 8]: row 0 argmax 4, row 1 argmax 7
  std::vector<Row> rows;
  A7() {
    logits = lcg_logits(16, 5, -2.0f, 2.0f);
    logits[4] = 6.0f;
    logits[8 + 7] = 6.0f;
    rows = {row_with(greedy_params()), row_with(greedy_params())};
    rows[0].params.logprob_token_ids = std::vector<TokenId>{1, 2};
  }
  std::span<const float> row(int r) const {
    return std::span<const float>(logits).subspan(r * 8, 8);
  }
};

int64_t rank_in(std::span<const float> x, TokenId token) {
  int64_t n = 0;
  for (float v : x) n += v >= x[token];
  return n;
}

TEST(Logprobs, AppendixA7ExplicitIdsWithPadding) {
  const A7 a7;
  Sampler sampler(make_config(8, 2));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(a7.logits.data(), 2, 8), make_batch(a7.rows));
  const lastmile::TokenLogprobsBlock& block = out.token_logprobs;
  ASSERT_TRUE(block.present());
  ASSERT_EQ(block.width, 3);
  EXPECT_EQ(to_vector(block.token_ids), (std::vector<TokenId>{4, 1, 2, 7, 0, 0}));
  EXPECT_EQ(to_vector(block.valid), (std::vector<uint8_t>{1, 1, 1, 1, 0, 0}));
  const std::vector<double> t0 = log_softmax_double(a7.row(0));
  const std::vector<double> t1 = log_softmax_double(a7.row(1));
  EXPECT_NEAR(block.logprobs[0], t0[4], kTolerance);
  EXPECT_NEAR(block.logprobs[1], t0[1], kTolerance);
  EXPECT_NEAR(block.logprobs[2], t0[2], kTolerance);
  EXPECT_NEAR(block.logprobs[3], t1[7], kTolerance);
  EXPECT_EQ(block.logprobs[4], -kInf);
  EXPECT_EQ(block.logprobs[5], -kInf);
  EXPECT_EQ(to_vector(block.ranks),
            (std::vector<int64_t>{rank_in(a7.row(0), 4), rank_in(a7.row(1), 7)}));
  EXPECT_EQ(to_vector(block.ranks), (std::vector<int64_t>{1, 1}));
  // Without num_logprobs there is no top-N block, but the values were computed (spec §5.2).
  EXPECT_FALSE(out.logprobs.present());
}

TEST(Logprobs, ExplicitIdsAreReturnedBesideTopN) {
  const A7 a7;
  Sampler sampler(make_config(8, 2));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(a7.logits.data(), 2, 8), make_batch(a7.rows, 3));
  ASSERT_TRUE(out.token_logprobs.present());
  EXPECT_EQ(out.token_logprobs.width, 3);
  EXPECT_EQ(to_vector(out.token_logprobs.token_ids), (std::vector<TokenId>{4, 1, 2, 7, 0, 0}));
  ASSERT_TRUE(out.logprobs.present());
  EXPECT_EQ(out.logprobs.width, 4);
  // Row 1 asked for no explicit ids but still has its full top-3.
  EXPECT_EQ(out.logprobs.token_ids[4], 7);
  EXPECT_EQ(out.logprobs.token_ids[5], 7);
  EXPECT_EQ(out.logprobs.ranks[1], 1);
}

TEST(Logprobs, ExplicitIdsDuplicatesAreReportedTwice) {
  const A7 a7;
  std::vector<Row> rows = a7.rows;
  rows[1].params.logprob_token_ids = std::vector<TokenId>{3, 3, 7};
  Sampler sampler(make_config(8, 2));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(a7.logits.data(), 2, 8), make_batch(rows));
  ASSERT_EQ(out.token_logprobs.width, 4);
  EXPECT_EQ(to_vector(out.token_logprobs.token_ids),
            (std::vector<TokenId>{4, 1, 2, 0, 7, 3, 3, 7}));
  EXPECT_EQ(to_vector(out.token_logprobs.valid), (std::vector<uint8_t>{1, 1, 1, 0, 1, 1, 1, 1}));
  EXPECT_EQ(out.token_logprobs.logprobs[5], out.token_logprobs.logprobs[6]);
  EXPECT_EQ(out.token_logprobs.logprobs[4], out.token_logprobs.logprobs[7]);
}

TEST(Logprobs, ExplicitEmptyListGivesWidthOne) {
  Row row = row_with(greedy_params());
  row.params.logprob_token_ids = std::vector<TokenId>{};
  const std::vector<float> x = {0.0f, 1.0f};
  Sampler sampler(make_config(2, 1));
  const SamplerOutput& out = sampler.sample(LogitsView::f32(x.data(), 1, 2), make_batch({row}));
  ASSERT_EQ(out.token_logprobs.width, 1);
  EXPECT_EQ(out.token_logprobs.token_ids[0], 1);
  EXPECT_EQ(out.token_logprobs.valid[0], 1);
}

TEST(Logprobs, ExplicitIdsReadTheActiveMode) {
  // raw_logits: the input values; processed_logits: the values after the bias.
  const A7 a7;
  std::vector<Row> rows = a7.rows;
  rows[0].params.logit_bias = {{1, 0.5f}};
  {
    Sampler sampler(make_config(8, 2, LogprobsMode::raw_logits));
    const SamplerOutput& out =
        sampler.sample(LogitsView::f32(a7.logits.data(), 2, 8), make_batch(rows));
    EXPECT_EQ(out.token_logprobs.logprobs[0], a7.logits[4]);
    EXPECT_EQ(out.token_logprobs.logprobs[1], a7.logits[1]);
    EXPECT_EQ(out.token_logprobs.logprobs[2], a7.logits[2]);
    EXPECT_EQ(out.token_logprobs.logprobs[3], a7.logits[15]);
  }
  {
    Sampler sampler(make_config(8, 2, LogprobsMode::processed_logits));
    const SamplerOutput& out =
        sampler.sample(LogitsView::f32(a7.logits.data(), 2, 8), make_batch(rows));
    EXPECT_EQ(out.token_logprobs.logprobs[1], a7.logits[1] + 0.5f);
    EXPECT_EQ(out.token_logprobs.logprobs[2], a7.logits[2]);
  }
}

// ---- the four modes ----

// A random row exercising every edit: whitelist, bad word, min_tokens, bias, penalties,
// temperature, min_p, top-k, top-p.
Row busy_row() {
  Row row = row_with(random_params(17, 0.5f));
  row.prompt = {3};
  row.output = {2, 2};
  row.params.allowed_token_ids = std::vector<TokenId>{0, 1, 2, 3, 4, 5};
  row.params.bad_words_token_ids = {{2, 4}};
  row.params.min_tokens = 5;
  row.params.stop_token_ids = {5};
  row.params.logit_bias = {{0, 1.0f}};
  row.params.repetition_penalty = 2.0f;
  row.params.frequency_penalty = 0.25f;
  row.params.top_k = 3;
  row.params.top_p = 0.999f;
  row.params.min_p = 0.001f;
  return row;
}

const std::vector<float> kBusyLogits = {1.0f, 0.5f, 2.0f, 2.5f, 3.0f, 4.0f, 5.0f};

TEST(Logprobs, RawLogprobsAreReadBeforeAnyEdit) {
  const std::vector<float> full =
      full_matrix(7, kBusyLogits, {busy_row()}, LogprobsMode::raw_logprobs);
  expect_near_row(full, log_softmax_double(kBusyLogits), kTolerance);
}

TEST(Logprobs, RawLogitsAreTheInputValues) {
  EXPECT_EQ(full_matrix(7, kBusyLogits, {busy_row()}, LogprobsMode::raw_logits), kBusyLogits);
}

// Hand-computed processed logits of busy_row on kBusyLogits:
// whitelist masks 6; bad word [2, 4] (history ends 2) masks 4; min_tokens masks stop id 5;
// bias: token 0 -> 2.0; repetition 2 on tokens 3 (prompt) and 2 (output): 2.5 -> 1.25, 2.0 -> 1.0;
// frequency 0.25 * 2 on token 2: 1.0 -> 0.5; temperature 0.5: [4.0, 1.0, 1.0, 2.5, -inf, -inf,
// -inf]; min_p 0.001 keeps all finite; top-k 3 keeps 4.0, 2.5 and the tie at 1.0 (tokens 0, 3, 1,
// 2); top-p 0.999: ascending probabilities of [1, 1, 2.5, 4] -> the first cumsum ~0.038 > 0.001.
const std::vector<float> kBusyProcessed = {4.0f, 1.0f, 1.0f, 2.5f, -kInf, -kInf, -kInf};

TEST(Logprobs, ProcessedLogitsAreReadAfterTopKTopPOnRandomRows) {
  EXPECT_EQ(full_matrix(7, kBusyLogits, {busy_row()}, LogprobsMode::processed_logits),
            kBusyProcessed);
}

TEST(Logprobs, ProcessedLogprobsAreTheLogSoftmaxOfProcessedLogits) {
  const std::vector<float> full =
      full_matrix(7, kBusyLogits, {busy_row()}, LogprobsMode::processed_logprobs);
  expect_near_row(full, log_softmax_double(kBusyProcessed), kTolerance);
}

TEST(Logprobs, ProcessedModesOnAllGreedyBatchesAreReadAfterPenalties) {
  // Greedy: no temperature, min_p, top-k or top-p; the whitelist, bad word, min_tokens, bias and
  // penalties apply: [2.0, 0.5, 0.5, 1.25, -inf, -inf, -inf].
  Row row = busy_row();
  row.params.temperature = 0.0f;
  const std::vector<float> expected = {2.0f, 0.5f, 0.5f, 1.25f, -kInf, -kInf, -kInf};
  EXPECT_EQ(full_matrix(7, kBusyLogits, {row}, LogprobsMode::processed_logits), expected);
  expect_near_row(full_matrix(7, kBusyLogits, {row}, LogprobsMode::processed_logprobs),
                  log_softmax_double(expected), kTolerance);
}

TEST(Logprobs, ProcessedTopNReportsTheSampledTokensProcessedValue) {
  const Row row = busy_row();
  Sampler sampler(make_config(7, 1, LogprobsMode::processed_logits));
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(kBusyLogits.data(), 1, 7), make_batch({row}, 6));
  const TokenId sampled = out.sampled_token_ids[0];
  ASSERT_TRUE(sampled == 0 || sampled == 1 || sampled == 2 || sampled == 3) << sampled;
  EXPECT_EQ(out.logprobs.logprobs[0], kBusyProcessed[sampled]);
  // Top 6 of [4, 1, 1, 2.5, -inf, -inf, -inf]: ties in ascending id order.
  EXPECT_EQ(std::vector<TokenId>(out.logprobs.token_ids.begin() + 1, out.logprobs.token_ids.end()),
            (std::vector<TokenId>{0, 3, 1, 2, 4, 5}));
  EXPECT_EQ(out.logprobs.logprobs[5], -kInf);
  EXPECT_EQ(out.logprobs.ranks[0], rank_in(kBusyProcessed, sampled));
}

TEST(Logprobs, GreedyRowInAMixedBatchReadsItsStepSixLogits) {
  // §2.4: the greedy row is divided by 1 and sees no masking (no row uses top-p here).
  Row greedy = busy_row();
  greedy.params.temperature = 0.0f;
  std::vector<float> logits = repeat_rows(kBusyLogits, 2);
  const std::vector<float> full =
      full_matrix(7, logits, {greedy, row_with(random_params(3))}, LogprobsMode::processed_logits);
  EXPECT_EQ(slice(full, 0, 7), (std::vector<float>{2.0f, 0.5f, 0.5f, 1.25f, -kInf, -kInf, -kInf}));
  EXPECT_EQ(slice(full, 1, 7), kBusyLogits);
}

TEST(Logprobs, PerCallModeOverridesTheConfiguredMode) {
  Sampler sampler(make_config(7, 1, LogprobsMode::raw_logprobs));
  Batch batch = make_batch({row_with(greedy_params())}, -1);
  batch.logprobs_mode = LogprobsMode::raw_logits;
  const SamplerOutput& out = sampler.sample(LogitsView::f32(kBusyLogits.data(), 1, 7), batch);
  EXPECT_EQ(std::vector<float>(out.full_logprobs.begin(), out.full_logprobs.end()), kBusyLogits);
}

TEST(Logprobs, SampledTokenIsUnaffectedByTheMode) {
  for (LogprobsMode mode : {LogprobsMode::raw_logprobs, LogprobsMode::raw_logits,
                            LogprobsMode::processed_logprobs, LogprobsMode::processed_logits}) {
    std::vector<Row> rows;
    for (uint64_t step = 0; step < 20; ++step) {
      Row r = busy_row();
      r.step = step;
      rows.push_back(r);
    }
    const std::vector<float> logits = repeat_rows(kBusyLogits, 20);
    Sampler reference(make_config(7, 20));
    const SamplerOutput& plain =
        reference.sample(LogitsView::f32(logits.data(), 20, 7), make_batch(rows));
    const std::vector<TokenId> expected = to_vector(plain.sampled_token_ids);
    Sampler sampler(make_config(7, 20, mode));
    const SamplerOutput& out =
        sampler.sample(LogitsView::f32(logits.data(), 20, 7), make_batch(rows, 3));
    EXPECT_EQ(to_vector(out.sampled_token_ids), expected);
  }
}

}  // namespace
}  // namespace lastmile_test
