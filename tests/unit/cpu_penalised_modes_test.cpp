// Whole Sampler calls over penalised rows: the cpu backend's draw from the caller's row gives the
// working row's token in every logprobs mode, for min_p, top-k and top-p rows, with lists
// lowered to step 6's bits, and from a RequestBatch as from a Batch.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <string>

#include "backend.hpp"
#include "cpu/input_draw.hpp"
#include "cpu/selection.hpp"
#include "unit/backwards_chunks.hpp"
#include "unit/cpu_property.hpp"

namespace lastmile_test {
namespace {

// The batch's tokens with processed logprobs (the steps draw the working row), with raw logprobs
// (3) and with none (the penalised rows' input paths, with the raw summary and without): the
// same in all three.
void expect_the_same_tokens_in_every_mode(lastmile::Sampler& sampler,
                                          const lastmile::LogitsView& view, lastmile::Batch& batch,
                                          int trial) {
  auto tokens = [&](std::optional<lastmile::LogprobsMode> mode) {
    ask_logprobs(batch, mode, 3);
    const lastmile::SamplerOutput& out = sampler.sample(view, batch);
    return std::vector<TokenId>(out.sampled_token_ids.begin(), out.sampled_token_ids.end());
  };
  const std::vector<TokenId> working = tokens(lastmile::LogprobsMode::processed_logprobs);
  EXPECT_EQ(tokens(lastmile::LogprobsMode::raw_logprobs), working) << "trial " << trial;
  EXPECT_EQ(tokens(std::nullopt), working) << "trial " << trial;
}

// A random row that only penalties edit draws from the caller's row and its penalised blocks in
// raw-mode batches (with the raw summary) and in batches without logprobs (block maxima), with
// no working row; processed logprobs read the working row, so the steps draw it there. The
// token must be the same in all three, fp32 and bf16: histories hold the largest tokens and
// repeats (frequency counts above 1); half the rows have their head in block 1 and the last,
// short block (the blocks path answers), half across the row (it declines).
TEST(CpuBackendProperty, PenalisedMinPRowsDrawTheWorkingRowsTokenInEveryMode) {
  std::mt19937_64 rng(31);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t vocab = trial % 4 == 0 ? 128256 : 30000 + static_cast<int64_t>(rng() % 5000);
    const int rows = 12;
    PenalisedBatch data(vocab, rows);
    std::vector<std::vector<lastmile::TokenId>>& histories = data.histories;
    lastmile::Batch& batch = data.batch;
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = body(rng);
      if (r % 2 == 0) {  // a head in block 1 and the last, short block: the blocks path answers
        for (int i = 0; i < 4; ++i) row[2048 + rng() % 2048] += 12.0f;
        for (int i = 0; i < 4; ++i) row[vocab - 1 - static_cast<int64_t>(rng() % 100)] += 12.0f;
      } else {  // a head across the row: most blocks reach the cut, the steps decide
        for (int i = 0; i < 30; ++i) row[rng() % vocab] += 8.0f;
      }
      const std::vector<int64_t> order = data.largest(r, 6);
      for (int i = 0; i < 60; ++i)
        histories[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      for (int i = 0; i < 3 * (r % 3); ++i)  // the largest, some more than once
        histories[r].push_back(static_cast<lastmile::TokenId>(order[i % 4]));
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.output_token_ids = histories[r];
      lastmile::RequestParams& p = request.params;
      p.seed = 1000 + static_cast<uint64_t>(r);
      p.temperature = r % 3 == 0 ? 1.0f : 0.6f + 0.2f * static_cast<float>(r % 5);
      p.min_p = r % 4 == 3 ? 0.5f : 0.05f;
      p.repetition_penalty = r % 2 == 0 ? 1.2f : 1.0f;
      p.frequency_penalty = r % 3 == 1 ? 0.0f : 0.4f;
      p.presence_penalty = 0.3f;
    }
    lastmile::Sampler sampler(backend_config(vocab, rows, lastmile::BackendKind::cpu));
    expect_the_same_tokens_in_every_mode(sampler, data.view(trial % 2 == 1), batch, trial);
  }
}

// Penalised LLM-shaped rows whose sampling(r, p) sets row r's sampling parameters, in raw-mode
// batches (the penalised paths list from the caller's row and lower through
// PenalisedBlocks::lower_listed) and in batches without logprobs; processed logprobs read the
// working row, so the steps draw it there. The tokens must be the same in all three, fp32 and
// bf16, over several seeds. The largest tokens sit in the prompt (repetition only, some twice),
// the output (counted 1-3 times) and the drafts (counted only when predicting the bonus token), so
// lowering them changes which survive.
template <class Sampling>
void expect_penalised_llm_rows_in_every_mode(std::mt19937_64& rng, Sampling sampling) {
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t vocab = trial % 4 == 0 ? 128256 : 30000 + static_cast<int64_t>(rng() % 5000);
    const int rows = 12;
    PenalisedBatch data(vocab, rows);
    lastmile::Batch& batch = data.batch;
    batch.predict_bonus_token = trial % 2 == 0;
    std::vector<std::vector<lastmile::TokenId>> prompts(rows), drafts(rows);
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = body(rng);
      for (int i = 0; i < 40; ++i)
        row[rng() % vocab] += std::uniform_real_distribution<float>(6.0f, 16.0f)(rng);
      const std::vector<int64_t> order = data.largest(r, 12);
      std::vector<lastmile::TokenId>& output = data.histories[r];
      for (int i = 0; i < 80; ++i) {
        output.push_back(static_cast<lastmile::TokenId>(rng() % vocab));
        prompts[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      }
      for (int i = 0; i < 8; ++i) {
        const auto id = static_cast<lastmile::TokenId>(order[static_cast<size_t>(i)]);
        switch ((i + r) % 4) {
          case 0:
            prompts[r].insert(prompts[r].end(), {id, id});
            break;
          case 1:
            drafts[r].push_back(id);
            break;
          default:
            for (uint64_t k = 0; k <= rng() % 3; ++k) output.push_back(id);
        }
      }
      std::shuffle(output.begin(), output.end(), rng);
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.prompt_token_ids = prompts[r];
      request.output_token_ids = output;
      request.spec_token_ids = drafts[r];
      lastmile::RequestParams& p = request.params;
      sampling(r, p);
      p.repetition_penalty = r % 5 == 0 ? 1.0f : 1.5f;
      p.frequency_penalty = r % 3 == 1 ? 0.0f : 1.5f;
      p.presence_penalty = 1.0f;
    }
    const lastmile::LogitsView view = data.view(trial % 2 == 1);
    lastmile::Sampler sampler(backend_config(vocab, rows, lastmile::BackendKind::cpu));
    for (uint64_t seeds = 0; seeds < 4; ++seeds) {
      for (int r = 0; r < rows; ++r) batch.requests[r].params.seed = 1000 * seeds + r;
      expect_the_same_tokens_in_every_mode(sampler, view, batch, trial);
    }
  }
}

// Top-k rows (then top-p on some) list their candidates.
TEST(CpuBackendProperty, PenalisedTopKRowsDrawTheWorkingRowsTokenInEveryMode) {
  std::mt19937_64 rng(35);
  expect_penalised_llm_rows_in_every_mode(rng, [](int r, lastmile::RequestParams& p) {
    p.temperature = r % 3 == 0 ? 1.0f : 0.7f;
    p.top_k = std::array<int64_t, 4>{2, 5, 20, 50}[static_cast<size_t>(r % 4)];
    if (r % 2 == 1) p.top_p = 0.9f;
  });
}

// Penalised top-p rows list the entries near the raw max and bound the rest by the raw summary
// (raw-mode batches), the same rows as above.
TEST(CpuBackendProperty, PenalisedTopPRowsDrawTheWorkingRowsTokenInEveryMode) {
  std::mt19937_64 rng(41);
  expect_penalised_llm_rows_in_every_mode(rng, [](int r, lastmile::RequestParams& p) {
    p.temperature = std::array<float, 3>{0.7f, 0.8f, 1.0f}[static_cast<size_t>(r % 3)];
    p.top_p = std::array<float, 4>{0.5f, 0.9f, 0.95f, 0.99f}[static_cast<size_t>(r % 4)];
  });
}

// lower_listed must give step 6's bits: token A (in the prompt, and twice in the output) is
// lowered to exactly the value of token B, computed by the backend's penalties as step 6 applies
// them, so top-k 1 keeps both and the draw picks either by u. A bit off and one of them alone
// would survive. The listed path (raw logprobs) must draw the steps' tokens (processed logprobs),
// and both tokens must come up over the seeds, at temperatures 1 and 0.8.
TEST(CpuBackendProperty, PenalisedTopKListIsLoweredToStepSixsBits) {
  constexpr int64_t kVocab = 40000;
  constexpr int kRows = 8;
  constexpr TokenId kA = 100, kB = 101, kC = 5000;  // A and B share a group: C bounds the list
  const float repetition = 1.3f, frequency = 0.2f, presence = 0.1f;
  float b = 9.1f;
  const std::vector<lastmile::detail::TokenCount> seen = {{0, 0, true}}, counted = {{0, 2, false}};
  cpu().apply_penalties(&b, seen, repetition, 0.0f, 0.0f);  // as lower_listed and step 6 do
  cpu().apply_penalties(&b, counted, 1.0f, frequency, presence);
  ASSERT_GT(b, 5.0f);
  std::vector<float> logits(static_cast<size_t>(kRows * kVocab), 0.0f);
  for (int r = 0; r < kRows; ++r) {
    logits[r * kVocab + kA] = 9.1f;
    logits[r * kVocab + kB] = b;
    logits[r * kVocab + kC] = 5.0f;
  }
  const std::vector<TokenId> prompt = {kA, 7}, output = {kA, 9, kA};
  lastmile::Batch batch;
  for (int r = 0; r < kRows; ++r) {
    lastmile::BatchRequest& request = batch.requests.emplace_back();
    request.prompt_token_ids = prompt;
    request.output_token_ids = output;
    lastmile::RequestParams& p = request.params;
    p.temperature = r % 2 == 0 ? 1.0f : 0.8f;
    p.top_k = 1;
    p.repetition_penalty = repetition;
    p.frequency_penalty = frequency;
    p.presence_penalty = presence;
  }
  lastmile::Sampler sampler(backend_config(kVocab, kRows, lastmile::BackendKind::cpu));
  const auto view = lastmile::LogitsView::f32(logits.data(), kRows, kVocab);
  std::set<TokenId> drawn;
  for (uint64_t seeds = 0; seeds < 8; ++seeds) {
    for (int r = 0; r < kRows; ++r) batch.requests[r].params.seed = 100 * seeds + r;
    expect_the_same_tokens_in_every_mode(sampler, view, batch, static_cast<int>(seeds));
    const lastmile::SamplerOutput& out = sampler.sample(view, batch);
    drawn.insert(out.sampled_token_ids.begin(), out.sampled_token_ids.end());
  }
  EXPECT_EQ(drawn, (std::set<TokenId>{kA, kB}));
}

// Steps a RequestBatch of 4 penalised rows 24 times against a Sampler that reads the working row
// (processed logprobs), given the same histories: the RequestBatch's rows take the penalised
// input paths (raw logprobs), which read its kept seen bitmap and output counts instead of
// counting the history, and their tokens must be the Sampler's at every step. Each step's logits
// are N(0, 1) with `head` at 10 + N(0, 1) (from rng); sampling(r, p) sets row r's sampling
// parameters; the penalties, 2 logprobs and a prompt holding head[r] are the same for all. The
// draws keep picking the head, so its counts grow past 1: it must make over half of every row's
// tokens.
template <class Sampling>
void expect_request_batch_draws_the_working_rows_tokens(int64_t vocab,
                                                        const std::vector<lastmile::TokenId>& head,
                                                        uint64_t seed, std::mt19937_64& rng,
                                                        Sampling sampling) {
  constexpr int kRows = 4, kSteps = 24;
  lastmile::SamplerConfig stateful_config =
      backend_config(vocab, kRows, lastmile::BackendKind::cpu);
  stateful_config.logprobs_mode = lastmile::LogprobsMode::raw_logprobs;
  lastmile::RequestBatch stateful(stateful_config);
  lastmile::Sampler stateless(backend_config(vocab, kRows, lastmile::BackendKind::cpu));
  std::vector<lastmile::RequestParams> params(kRows);
  std::vector<std::vector<lastmile::TokenId>> prompts(kRows), outputs(kRows);
  for (int r = 0; r < kRows; ++r) {
    lastmile::RequestParams& p = params[r];
    p.seed = seed + static_cast<uint64_t>(r);
    p.temperature = r % 2 == 0 ? 1.0f : 0.8f;
    sampling(r, p);
    p.repetition_penalty = 1.2f;
    p.frequency_penalty = 0.3f;
    p.presence_penalty = 0.2f;
    p.logprobs = 2;
    prompts[r] = {head[static_cast<size_t>(r)], 5, 9};
    stateful.add(std::array<const char*, kRows>{"r0", "r1", "r2", "r3"}[r], p, prompts[r]);
  }
  std::normal_distribution<float> body(0.0f, 1.0f);
  for (int step = 0; step < kSteps; ++step) {
    std::vector<float> logits(static_cast<size_t>(kRows * vocab));
    for (float& v : logits) v = body(rng);
    for (int r = 0; r < kRows; ++r)
      for (lastmile::TokenId id : head) logits[r * vocab + id] = 10.0f + body(rng);
    const auto view = lastmile::LogitsView::f32(logits.data(), kRows, vocab);
    lastmile::Batch batch;
    batch.num_logprobs = 2;
    batch.logprobs_mode = lastmile::LogprobsMode::processed_logprobs;
    for (int r = 0; r < kRows; ++r) {
      lastmile::BatchRequest& b = batch.requests.emplace_back();
      b.params = params[r];
      b.prompt_token_ids = prompts[r];
      b.output_token_ids = outputs[r];
    }
    const lastmile::SamplerOutput& expected = stateless.sample(view, batch);
    const lastmile::SamplerOutput& actual = stateful.step(view);
    for (int r = 0; r < kRows; ++r) {
      ASSERT_EQ(actual.sampled_token_ids[r], expected.sampled_token_ids[r])
          << "step " << step << " row " << r;
      outputs[r].push_back(expected.sampled_token_ids[r]);
    }
  }
  for (int r = 0; r < kRows; ++r)
    EXPECT_GT(std::count_if(outputs[r].begin(), outputs[r].end(),
                            [&](lastmile::TokenId t) {
                              return std::find(head.begin(), head.end(), t) != head.end();
                            }),
              kSteps / 2)
        << "row " << r;
}

// The penalised min_p rows from a RequestBatch (the blocks path): a head of 8 tokens in block 1
// and the last block (of one token), so the max moves between blocks.
TEST(CpuBackendProperty, PenalisedMinPRowsFromARequestBatchDrawTheWorkingRowsToken) {
  constexpr int64_t kVocab = 16385;  // 9 blocks, the last of one token
  std::mt19937_64 rng(33);
  std::vector<lastmile::TokenId> head;
  for (int i = 0; i < 7; ++i) head.push_back(static_cast<lastmile::TokenId>(2048 + rng() % 2048));
  head.push_back(kVocab - 1);  // two blocks reach the cut: the blocks path answers
  expect_request_batch_draws_the_working_rows_tokens(
      kVocab, head, 77, rng, [](int, lastmile::RequestParams& p) { p.min_p = 0.05f; });
}

// The penalised top-k rows from a RequestBatch (the listed path: lower_listed), two of them with
// top-p: the penalties reorder the head as its counts grow.
TEST(CpuBackendProperty, PenalisedTopKRowsFromARequestBatchDrawTheWorkingRowsToken) {
  constexpr int64_t kVocab = 40000;
  std::mt19937_64 rng(39);
  std::vector<lastmile::TokenId> head;
  for (int i = 0; i < 8; ++i) head.push_back(static_cast<lastmile::TokenId>(rng() % kVocab));
  expect_request_batch_draws_the_working_rows_tokens(kVocab, head, 91, rng,
                                                     [](int r, lastmile::RequestParams& p) {
                                                       p.top_k = r < 2 ? 4 : 12;
                                                       if (r % 2 == 1) p.top_p = 0.9f;
                                                     });
}

TEST(CpuBackendProperty, PenalisedTopPRowsFromARequestBatchDrawTheWorkingRowsToken) {
  constexpr int64_t kVocab = 40000;
  std::mt19937_64 rng(43);
  std::vector<lastmile::TokenId> head;
  for (int i = 0; i < 8; ++i) head.push_back(static_cast<lastmile::TokenId>(rng() % kVocab));
  expect_request_batch_draws_the_working_rows_tokens(
      kVocab, head, 93, rng, [](int r, lastmile::RequestParams& p) {
        p.temperature = 0.6f;  // the body's bound shrinks with the temperature: about half answer
        p.top_p = r < 2 ? 0.5f : 0.8f;
      });
}

}  // namespace
}  // namespace lastmile_test
