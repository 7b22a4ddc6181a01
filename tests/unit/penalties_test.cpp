// Step 6 — repetition, frequency and presence penalties (spec §7, Appendix A.4): repetition over
// prompt ∪ output (divide positive, multiply non-positive), frequency and presence over the output
// only; drafts count only when predicting the bonus token.
#include <algorithm>
#include <bit>
#include <random>

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

namespace lastmile_test {
namespace {

// The spec's formulas (§7.2) written out per token, for the long-history paths below: each product
// rounded before it subtracts, as torch does, whatever the test's build lets the compiler fuse.
std::vector<float> penalised_by_the_spec(std::vector<float> x, const Row& row, bool bonus) {
  std::vector<TokenId> history = row.output;
  if (bonus) history.insert(history.end(), row.spec.begin(), row.spec.end());
  std::vector<int> count(x.size(), 0);
  std::vector<bool> seen(x.size(), false);
  for (TokenId t : row.prompt) seen[t] = true;
  for (TokenId t : history) seen[t] = true, ++count[t];
  const RequestParams& p = row.params;
  for (size_t t = 0; t < x.size(); ++t) {
    if (seen[t])
      x[t] = rounded_product(x[t], x[t] > 0 ? 1.0f / p.repetition_penalty : p.repetition_penalty);
    x[t] -= rounded_product(p.frequency_penalty, static_cast<float>(count[t]));
    x[t] -= rounded_product(p.presence_penalty, count[t] > 0 ? 1.0f : 0.0f);
  }
  return x;
}

// Short histories take the sparse walk, long ones (16 tokens per 256 of vocabulary or more) the
// dense bitmap pass; both equal the formulas bit for bit, on both backends, with repeated ids
// across prompt, output and drafts, and leave no state behind for the next call.
TEST(Penalties, ShortAndLongHistoriesEqualTheFormulas) {
  constexpr int64_t kVocab = 1000;
  std::mt19937_64 rng(3);
  std::vector<float> logits(kVocab);
  for (float& v : logits) v = std::normal_distribution<float>(0.0f, 3.0f)(rng);
  for (lastmile::BackendKind backend :
       {lastmile::BackendKind::cpu, lastmile::BackendKind::reference}) {
    lastmile::SamplerConfig config =
        make_config(kVocab, 1, lastmile::LogprobsMode::processed_logits);
    config.backend = backend;
    lastmile::Sampler sampler(config);
    for (size_t length : {5u, 40u, 300u, 5u}) {
      Row row = row_with(greedy_params());
      std::uniform_int_distribution<TokenId> token(0, 80);  // repeats guaranteed
      for (size_t i = 0; i < length; ++i) {
        row.prompt.push_back(token(rng));
        row.output.push_back(token(rng));
      }
      row.spec = {token(rng), token(rng)};
      row.params.repetition_penalty = 1.7f;
      row.params.frequency_penalty = 0.3f;
      row.params.presence_penalty = -0.4f;
      for (bool bonus : {false, true}) {
        const auto& out =
            sampler.sample(LogitsView::f32(logits.data(), 1, kVocab), make_batch({row}, -1, bonus));
        const std::vector<float> expected = penalised_by_the_spec(logits, row, bonus);
        for (int64_t t = 0; t < kVocab; ++t)
          ASSERT_EQ(out.full_logprobs[t], expected[t]) << "token " << t << " length " << length;
      }
    }
  }
}

// A greedy row of a raw_logprobs batch that only penalties edit takes its argmax from the
// caller's row, penalising only the blocks that could hold it: every penalty must still count as
// in the formulas. A 40000-token row whose largest entries sit in different blocks: A is in the
// history (frequency per occurrence), A and C in the prompt (repetition), C a draft (counted only
// when predicting the bonus token). Stateless, and through a RequestBatch whose history A's
// steps made.
TEST(Penalties, GreedyArgmaxFromTheCallersRowCountsEveryPenalty) {
  constexpr int64_t kVocab = 40000;
  constexpr TokenId kA = 100, kB = 30000, kC = 20000, kD = 5000;
  std::mt19937_64 rng(5);
  std::vector<float> logits(kVocab);
  for (float& v : logits) v = std::normal_distribution<float>(0.0f, 1.0f)(rng);
  logits[kA] = 10.0f;
  logits[kB] = 9.2f;
  logits[kC] = 9.5f;
  logits[kD] = 9.4f;
  auto argmax = [](const std::vector<float>& x) {
    return static_cast<TokenId>(std::max_element(x.begin(), x.end()) - x.begin());
  };
  lastmile::Sampler sampler(make_config(kVocab, 1, lastmile::LogprobsMode::raw_logprobs));
  struct Case {
    float repetition, frequency, presence;
    std::vector<TokenId> prompt, output, spec;
    bool bonus;
    TokenId expected;
  };
  const std::vector<Case> cases = {
      {1.0f, 0.4f, 0.1f, {}, {kA, kA, kA}, {}, false, kC},      // A: 10 - 1.2 - 0.1 < C 9.5
      {1.0f, 0.4f, 0.1f, {}, {kA}, {}, false, kA},              // A: 10 - 0.5 ties C, lower id
      {1.0f, 0.4f, 0.1f, {}, {kD, kA, kA, kA}, {}, false, kC},  // each block its own counts
      {1.25f, 0.0f, 0.0f, {kA, kC}, {}, {}, false, kD},         // A 8, C 7.6; D stays 9.4
      {1.0f, 0.6f, 0.0f, {}, {kA, kA}, {kC, kC}, false, kC},    // drafts do not count
      {1.0f, 0.6f, 0.0f, {}, {kA, kA}, {kC, kC}, true, kD},     // now C: 9.5 - 1.2 < D
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& c = cases[i];
    Row row = row_with(greedy_params());
    row.params.repetition_penalty = c.repetition;
    row.params.frequency_penalty = c.frequency;
    row.params.presence_penalty = c.presence;
    row.prompt = c.prompt;
    row.output = c.output;
    row.spec = c.spec;
    const TokenId formulas = argmax(penalised_by_the_spec(logits, row, c.bonus));
    ASSERT_EQ(formulas, c.expected) << "case " << i;  // the case is built as intended
    const auto& out =
        sampler.sample(LogitsView::f32(logits.data(), 1, kVocab), make_batch({row}, 2, c.bonus));
    EXPECT_EQ(out.sampled_token_ids[0], formulas) << "case " << i;
  }
  // Stateful: three steps where A dwarfs the rest make the history A, A, A; then the row above.
  Row row = row_with(greedy_params());
  row.params.frequency_penalty = 0.4f;
  row.params.presence_penalty = 0.1f;
  row.params.logprobs = 2;
  lastmile::RequestBatch batch(make_config(kVocab, 1, lastmile::LogprobsMode::raw_logprobs));
  batch.add("a", row.params, {});
  std::vector<float> a_first = logits;
  a_first[kA] = 50.0f;
  for (int step = 0; step < 3; ++step)
    ASSERT_EQ(batch.step(LogitsView::f32(a_first.data(), 1, kVocab)).sampled_token_ids[0], kA);
  row.output = {kA, kA, kA};
  EXPECT_EQ(batch.step(LogitsView::f32(logits.data(), 1, kVocab)).sampled_token_ids[0],
            argmax(penalised_by_the_spec(logits, row, false)));
}

// A top-p row that only penalties edit draws from the caller's row; where the raw summary's
// bound leaves top-p's call open it is retried with the unlisted weight, less the seen tokens'
// (the prompt's, the output's and the drafts'): every penalised token must count. A 40000-token
// row: the max 0 (token 1000), token 5 at -3, 2000 tokens at -11 (their weight 0.0334), 600 of
// them in the prompt, 800 in the output, 600 drafts, all lowered to -44; a body at -40. Top-p
// 0.949 keeps token 5 only if some 0.0084 of that weight stays (as any list's 600 would), so the
// working row masks it and every draw is token 1000; a retry that missed any of the three lists
// would keep token 5 and draw it for a u under 0.047 (some of 200 seeds). float32 and bf16.
TEST(Penalties, TopPFromTheCallersRowCountsEverySeenToken) {
  constexpr int64_t kVocab = 40000;
  std::vector<float> logits(kVocab, -40.0f);
  logits[1000] = 0.0f;
  logits[5] = -3.0f;
  Row row = row_with(random_params(0));
  for (TokenId t = 2000; t < 4000; ++t) {
    logits[t] = -11.0f;
    (t < 2600 ? row.prompt : t < 3400 ? row.output : row.spec).push_back(t);
  }
  row.params.top_p = 0.949f;
  row.params.repetition_penalty = 4.0f;  // -11 -> -44 (the drafts too: predicting the bonus)
  std::vector<uint16_t> bf16(kVocab);    // the same values (each exact in bf16)
  for (int64_t t = 0; t < kVocab; ++t) bf16[t] = std::bit_cast<uint32_t>(logits[t]) >> 16;
  lastmile::Sampler sampler(make_config(kVocab, 1, lastmile::LogprobsMode::raw_logprobs));
  for (const lastmile::DType dtype : {lastmile::DType::f32, lastmile::DType::bf16}) {
    const LogitsView view = dtype == lastmile::DType::f32
                                ? LogitsView::f32(logits.data(), 1, kVocab)
                                : LogitsView{bf16.data(), 1, kVocab, kVocab, dtype};
    for (uint64_t seed = 0; seed < 200; ++seed) {
      row.params.seed = seed;
      const auto& out = sampler.sample(view, make_batch({row}, std::nullopt, true));
      ASSERT_EQ(out.sampled_token_ids[0], 1000)
          << "seed " << seed << ", dtype " << static_cast<int>(dtype);
    }
  }
}

}  // namespace
}  // namespace lastmile_test
