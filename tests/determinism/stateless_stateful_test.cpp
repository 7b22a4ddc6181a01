// Stateless Sampler::sample with explicit histories gives exactly the tokens and logprobs of
// RequestBatch::step over a multi-step run (DESIGN "Who calls us": both shapes, identical results).
// The stateless call leaves BatchRequest::step unset: the number of outputs so far.
#include <algorithm>
#include <set>
#include <string>

#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::RequestBatch;

constexpr int64_t kVocab = 111;
constexpr int kSteps = 24;

struct Tracked {
  std::string id;
  RequestParams params;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;  // the stateless side's history
};

std::vector<Tracked> make_requests() {
  std::vector<Tracked> requests(6);
  {
    Tracked& r = requests[0];
    r.id = "penalised";
    r.params = random_params(1, 0.9f);
    r.params.top_k = 40;
    r.params.top_p = 0.95f;
    r.params.repetition_penalty = 1.3f;
    r.params.frequency_penalty = 0.4f;
    r.params.presence_penalty = 0.3f;
    r.params.bad_words_token_ids = {{5, 6}, {7}};
    r.params.logit_bias = {{5, 3.0f}, {6, 3.0f}, {7, 5.0f}};
    r.params.logprobs = 3;
    r.prompt = {5, 9, 10, 11, 9};
  }
  {
    Tracked& r = requests[1];
    r.id = "min-tokens";
    r.params = random_params(2, 1.2f);
    r.params.min_tokens = 10;
    r.params.stop_token_ids = {3, 4};
    r.params.logit_bias = {{3, 8.0f}};
    r.params.min_p = 0.05f;
  }
  {
    Tracked& r = requests[2];
    r.id = "greedy";
    r.params = greedy_params();
    r.params.repetition_penalty = 1.5f;
    r.params.frequency_penalty = 0.5f;
    r.params.bad_words_token_ids = {{1, 2, 3}};
    r.prompt = {1, 2};
  }
  {
    Tracked& r = requests[3];
    r.id = "scored";
    r.params = random_params(3, 0.7f);
    r.params.logprob_token_ids = std::vector<TokenId>{1, 2, 3};
    r.params.presence_penalty = -0.5f;
  }
  {
    Tracked& r = requests[4];
    r.id = "whitelisted";
    r.params = random_params(4, 1.0f);
    r.params.allowed_token_ids = std::vector<TokenId>{0, 10, 20, 30, 40, 50, 60, 70};
    r.params.frequency_penalty = 1.0f;
    r.params.repetition_penalty = 2.0f;  // folded into the conversion on the stateful side
    r.params.top_p = 0.8f;
    r.prompt = {10, 20, 30};
  }
  {
    Tracked& r = requests[5];
    r.id = "greedy-penalised";  // penalties alone: argmax from the caller's row, no working row
    r.params = greedy_params();
    r.params.repetition_penalty = 1.4f;
    r.params.frequency_penalty = 0.6f;
    r.params.presence_penalty = 0.2f;
    r.prompt = {4, 8, 15, 16, 23, 42};
  }
  return requests;
}

// Compares every output block of two calls exactly.
void expect_same_output(const SamplerOutput& a, const SamplerOutput& b, int step) {
  ASSERT_EQ(a.num_rows, b.num_rows) << "step " << step;
  auto eq = [&](auto x, auto y, const char* what) {
    EXPECT_TRUE(std::equal(x.begin(), x.end(), y.begin(), y.end()))
        << what << " differ at step " << step;
  };
  eq(a.sampled_token_ids, b.sampled_token_ids, "sampled tokens");
  EXPECT_EQ(a.logprobs.width, b.logprobs.width);
  eq(a.logprobs.token_ids, b.logprobs.token_ids, "top-N ids");
  eq(a.logprobs.logprobs, b.logprobs.logprobs, "top-N logprobs");
  eq(a.logprobs.ranks, b.logprobs.ranks, "top-N ranks");
  EXPECT_EQ(a.token_logprobs.width, b.token_logprobs.width);
  eq(a.token_logprobs.token_ids, b.token_logprobs.token_ids, "explicit ids");
  eq(a.token_logprobs.logprobs, b.token_logprobs.logprobs, "explicit logprobs");
  eq(a.token_logprobs.valid, b.token_logprobs.valid, "explicit valid");
  eq(a.token_logprobs.ranks, b.token_logprobs.ranks, "explicit ranks");
  eq(a.full_logprobs, b.full_logprobs, "full logprobs");
}

TEST(StatelessStateful, MultiStepRunGivesIdenticalTokensAndLogprobs) {
  std::vector<Tracked> requests = make_requests();
  RequestBatch stateful(make_config(kVocab, 6, LogprobsMode::raw_logprobs, 2));
  Sampler stateless(make_config(kVocab, 6, LogprobsMode::raw_logprobs, 1));
  for (const Tracked& r : requests) stateful.add(r.id, r.params, r.prompt);
  std::vector<size_t> rows = {0, 1, 2, 3, 4, 5};  // request index of each row

  for (int step = 0; step < kSteps; ++step) {
    if (step == 8) {  // reorder: rows now 3, 0, 4, 5, 1, 2
      rows = {3, 0, 4, 5, 1, 2};
      std::vector<std::string> ids;
      for (size_t i : rows) ids.push_back(requests[i].id);
      stateful.reorder(ids);
    }
    if (step == 16) {  // remove "whitelisted" (row 2)
      stateful.remove(requests[rows[2]].id);
      rows.erase(rows.begin() + 2);
    }
    const auto num_rows = static_cast<int64_t>(rows.size());
    const std::vector<float> logits =
        lcg_logits(static_cast<size_t>(num_rows * kVocab), 1000 + step, -3.0f, 3.0f);
    const LogitsView view = LogitsView::f32(logits.data(), num_rows, kVocab);

    Batch batch;
    for (size_t i : rows) {
      BatchRequest& b = batch.requests.emplace_back();
      b.params = requests[i].params;
      b.prompt_token_ids = requests[i].prompt;
      b.output_token_ids = requests[i].output;
    }
    const SamplerOutput& expected = stateless.sample(view, batch);
    const SamplerOutput& actual = stateful.step(view);
    expect_same_output(actual, expected, step);
    for (size_t r = 0; r < rows.size(); ++r)
      requests[rows[r]].output.push_back(expected.sampled_token_ids[r]);
  }

  for (const Tracked& r : requests) {
    if (r.id == "whitelisted") continue;  // removed
    const auto kept = stateful.output_token_ids(r.id);
    EXPECT_EQ(std::vector<TokenId>(kept.begin(), kept.end()), r.output) << r.id;
    EXPECT_EQ(r.output.size(), static_cast<size_t>(kSteps)) << r.id;
  }
  // The features did act: min_tokens held the boosted stop token 3 back for 10 steps, the bad words
  // kept 7 out and 6 from following 5.
  const std::vector<TokenId>& min_tokens = requests[1].output;
  for (int i = 0; i < 10; ++i) EXPECT_TRUE(min_tokens[i] != 3 && min_tokens[i] != 4) << i;
  EXPECT_NE(std::count(min_tokens.begin() + 10, min_tokens.end(), 3), 0);
  const std::vector<TokenId>& penalised = requests[0].output;
  for (size_t i = 0; i < penalised.size(); ++i) {
    EXPECT_NE(penalised[i], 7);
    if (i > 0 && penalised[i - 1] == 5) {
      EXPECT_NE(penalised[i], 6);
    }
  }
}

TEST(StatelessStateful, ExplicitStepEqualsTheDefault) {
  // BatchRequest::step = number of outputs so far is what the default (nullopt) means.
  const std::vector<float> logits = lcg_logits(kVocab, 5);
  Row implicit = row_with(random_params(42, 1.0f));
  implicit.output = {1, 2, 3, 4, 5, 6, 7};
  Row explicit_step = implicit;
  explicit_step.step = 7;
  Row other_step = implicit;
  other_step.step = 8;
  std::vector<float> three = logits;
  for (int i = 0; i < 2; ++i) three.insert(three.end(), logits.begin(), logits.end());
  std::vector<TokenId> tokens;
  std::vector<TokenId> reference;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    implicit.params.seed = explicit_step.params.seed = other_step.params.seed = seed;
    const std::vector<TokenId> t =
        sample_tokens(kVocab, three, {implicit, explicit_step, other_step});
    EXPECT_EQ(t[0], t[1]) << "seed " << seed;
    tokens.push_back(t[0]);
    reference.push_back(t[2]);
  }
  EXPECT_NE(tokens, reference);  // step 8 is a different stream position
}

TEST(StatelessStateful, DefaultStepCountsCommittedOutputsNotDrafts) {
  // Predicting the bonus token, drafts join the history for penalties and bad words only: the
  // stream position is still the number of committed outputs (batch.hpp).
  const std::vector<float> logits = lcg_logits(kVocab, 6);
  Row implicit = row_with(random_params(0, 1.0f));
  implicit.output = {1, 2, 3};
  implicit.spec = {4, 5};
  Row committed = implicit;
  committed.step = 3;
  Row with_drafts = implicit;
  with_drafts.step = 5;
  std::vector<float> three = logits;
  for (int i = 0; i < 2; ++i) three.insert(three.end(), logits.begin(), logits.end());
  int differs = 0;
  for (uint64_t seed = 0; seed < 50; ++seed) {
    implicit.params.seed = committed.params.seed = with_drafts.params.seed = seed;
    const std::vector<TokenId> t = sample_tokens(kVocab, three, {implicit, committed, with_drafts},
                                                 /*predict_bonus_token=*/true);
    EXPECT_EQ(t[0], t[1]) << "seed " << seed;
    differs += t[0] != t[2];
  }
  EXPECT_GT(differs, 0);
}

TEST(StatelessStateful, ReplayingAHistoryReplaysTheTokens) {
  // A seeded request sampled step by step, then replayed from scratch in a fresh RequestBatch.
  RequestParams p = random_params(77, 1.1f);
  p.top_p = 0.9f;
  p.frequency_penalty = 0.3f;
  std::vector<std::vector<TokenId>> runs;
  for (int run = 0; run < 2; ++run) {
    RequestBatch batch(make_config(kVocab, 2, LogprobsMode::raw_logprobs, run + 1));
    if (run == 1) batch.add("other", random_params(5));  // a companion changes nothing
    batch.add("r", p);
    for (int step = 0; step < kSteps; ++step) {
      std::vector<float> logits = lcg_logits(kVocab, 500 + step);
      if (run == 1) {
        const std::vector<float> other = lcg_logits(kVocab, 900 + step);
        logits.insert(logits.begin(), other.begin(), other.end());
      }
      batch.step(LogitsView::f32(logits.data(), batch.size(), kVocab));
    }
    const auto out = batch.output_token_ids("r");
    runs.emplace_back(out.begin(), out.end());
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_GT(std::set<TokenId>(runs[0].begin(), runs[0].end()).size(), 1u);  // actually random
}

}  // namespace
}  // namespace lastmile_test
