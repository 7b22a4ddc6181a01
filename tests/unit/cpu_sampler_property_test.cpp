// Whole Sampler calls on the cpu backend against the reference backend: greedy rows (within their
// block bounds and past 2^20 entries), penalties to the bit, penalised blocks scanned or
// bucketed, and random batches' tokens and logprobs.
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

// Every row's token from the cpu backend must be the oracle's, its logits read as bf16 or fp32.
void expect_the_oracles_tokens(PenalisedBatch& data, bool bf16, int trial) {
  const lastmile::LogitsView view = data.view(bf16);
  lastmile::Sampler fast(backend_config(data.vocab, data.rows, lastmile::BackendKind::cpu));
  lastmile::Sampler slow(backend_config(data.vocab, data.rows, lastmile::BackendKind::reference));
  const lastmile::SamplerOutput& a = fast.sample(view, data.batch);
  const lastmile::SamplerOutput& b = slow.sample(view, data.batch);
  for (int r = 0; r < data.rows; ++r)
    EXPECT_EQ(a.sampled_token_ids[r], b.sampled_token_ids[r]) << "trial " << trial << " row " << r;
}

// The logprobs a batch may ask for without its greedy rows' working rows: none, raw logits (block
// maxima alone bound the argmax) and raw logprobs (the softmax's read learns them).
void for_each_raw_logprobs_request(lastmile::Batch& batch,
                                   const std::function<void(const std::string&)>& check) {
  for (std::optional<lastmile::LogprobsMode> mode :
       {std::optional<lastmile::LogprobsMode>{}, std::optional(lastmile::LogprobsMode::raw_logits),
        std::optional(lastmile::LogprobsMode::raw_logprobs)}) {
    ask_logprobs(batch, mode, 2);
    check(mode ? mode == lastmile::LogprobsMode::raw_logits ? "raw_logits" : "raw_logprobs"
               : "no logprobs");
  }
}

// Greedy rows that penalties alone edit, or nothing, take their argmax from the blocks whose
// caller's max could hold it, penalised alone (no working row), with or without raw logprobs. The
// history holds the largest tokens (the argmax moves to another block), equal values sit in
// several blocks (the lowest id wins), and some rows raise entries (negative penalties,
// repetition below 1, a logit bias: the steps, every block read); one bans the two largest (the
// steps, whose argmax reads the working row's blocks by the same bounds); two have no penalties.
// The token must be the oracle's on every row, fp32 and bf16.
TEST(CpuBackendProperty, GreedyRowsWithinTheirBlockBoundsGiveTheOraclesArgmax) {
  std::mt19937_64 rng(29);
  for (int trial = 0; trial < 12; ++trial) {
    const int64_t vocab = trial % 3 == 0 ? 128256 : 40000 + static_cast<int64_t>(rng() % 5000);
    const int rows = 10;
    PenalisedBatch data(vocab, rows);
    std::vector<std::vector<lastmile::TokenId>>& histories = data.histories;
    lastmile::Batch& batch = data.batch;
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = body(rng);
      const float top = 12.0f + static_cast<float>(rng() % 4);
      for (int i = 0; i < 6; ++i) row[rng() % vocab] = top - static_cast<float>(i % 3);  // ties
      const std::vector<int64_t> order = data.largest(r, 8);
      for (int i = 0; i < 40; ++i)
        histories[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      for (int i = 0; i < r % 4; ++i)  // the largest few are in the history
        histories[r].push_back(static_cast<lastmile::TokenId>(order[i]));
      for (int i = 0; i < 4 && (r == 5 || r == 6); ++i)  // raised past the largest (below)
        histories[r].push_back(static_cast<lastmile::TokenId>(order[6]));
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.output_token_ids = histories[r];
      lastmile::RequestParams& p = request.params;
      p.temperature = 0.0f;
      p.repetition_penalty = 1.3f;
      p.frequency_penalty = 0.5f;
      p.presence_penalty = 2.0f;
      if (r == 5) p.frequency_penalty = p.presence_penalty = -2.0f;  // raises the history
      if (r == 6) p.repetition_penalty = 0.2f;                       // raises positive logits
      if (r == 7) p.logit_bias = {{static_cast<lastmile::TokenId>(rng() % vocab), 30.0f}};
      if (r == 4)  // masks lower too: the steps, the working row's argmax by blocks
        p.bad_words_token_ids = {{static_cast<lastmile::TokenId>(order[0])},
                                 {static_cast<lastmile::TokenId>(order[1])}};
      if (r >= 8) p = greedy_params();  // no penalties
    }
    for_each_raw_logprobs_request(batch, [&](const std::string& mode) {
      SCOPED_TRACE(mode);
      expect_the_oracles_tokens(data, trial % 2 == 1, trial);
    });
  }
}

// Past 2^20 entries the blocks outgrow the bounds path (no summary; maxima of blocks over 2048):
// an unedited float32 greedy row takes its one checked read whatever the logprobs, the rest the
// steps. Ties across the row (the lowest id wins), a penalised row whose largest is in its history,
// fp32 and bf16: the oracle's tokens.
TEST(CpuBackendProperty, GreedyRowsPastTwoToTheTwentyGiveTheOraclesArgmax) {
  const int64_t vocab = (int64_t{1} << 20) + 5;
  PenalisedBatch data(vocab, 3);
  std::mt19937_64 rng(43);
  for (int r = 0; r < 3; ++r) {
    float* row = data.row(r);
    for (int64_t i = 0; i < vocab; ++i) row[i] = std::normal_distribution<float>(0.0f, 2.0f)(rng);
    row[vocab - 1] = row[700000] = 20.0f;  // a tie: 700000 wins
    row[5] = 19.0f;
    lastmile::BatchRequest& request = data.batch.requests.emplace_back();
    request.params = greedy_params();
    if (r == 1) {  // 700000 and the last lowered below token 5
      data.histories[r] = {700000, static_cast<TokenId>(vocab - 1)};
      request.output_token_ids = data.histories[r];
      request.params.frequency_penalty = 2.0f;
    }
  }
  for (const bool bf16 : {false, true})
    for_each_raw_logprobs_request(data.batch, [&](const std::string& mode) {
      SCOPED_TRACE(mode);
      expect_the_oracles_tokens(data, bf16, bf16 ? 1 : 0);
    });
}

// Step 6's sparse penalties pick their factors without a branch: the same bits as the oracle on
// every kind of token (seen in the prompt only, counted 0-3 times, both), every sign of logit
// (+-0, +-inf, huge ones that a factor below 1 overflows, denormals) and every kind of penalty
// (repetition 1, above and below; frequency and presence of either sign or 0).
TEST(CpuBackendProperty, PenaltiesAreTheOraclesToTheBit) {
  std::mt19937_64 rng(41);
  const float specials[] = {0.0f, -0.0f, kInf, -kInf, 3e38f, -3e38f, 1e-40f, -1e-40f};
  const float repetitions[] = {1.0f, 1.3f, 0.7f, 2.0f};
  const float others[] = {0.0f, 0.4f, -0.4f, 2.0f, -2.0f};
  for (int trial = 0; trial < 40; ++trial) {
    const int64_t n = 500;
    std::vector<float> x(static_cast<size_t>(n));
    for (float& v : x)
      v = rng() % 8 == 0 ? specials[rng() % 8] : std::normal_distribution<float>(0.0f, 5.0f)(rng);
    std::vector<lastmile::detail::TokenCount> counts;
    for (int64_t t = 0; t < n; ++t)
      if (rng() % 2 == 0)
        counts.push_back(
            {static_cast<TokenId>(t), static_cast<int32_t>(rng() % 4), rng() % 3 == 0});
    std::shuffle(counts.begin(), counts.end(), rng);
    const float repetition = repetitions[trial % 4];
    const float frequency = others[rng() % 5], presence = others[rng() % 5];
    std::vector<float> fast = x, slow = x;
    cpu().apply_penalties(fast.data(), counts, repetition, frequency, presence);
    oracle().apply_penalties(slow.data(), counts, repetition, frequency, presence);
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(fast[i]), std::bit_cast<uint32_t>(slow[i]))
          << "trial " << trial << " token " << i << " from " << x[i];
  }
}

// The penalised blocks find a block's tokens by scanning the prompt and history for the first
// reads, by buckets after (PenalisedBlocks::kScannedReads). Each block holds a peak above the
// body; rows penalise every peak (every block is read: buckets), the two highest (two or three
// reads: scans, at times buckets) or none (one read), through the prompt (repetition only, repeats
// counting once), the output (1-3 times) and drafts (counted only when predicting the bonus token),
// with peaks at a block's first and last entries and in the last, short block. The token must be
// the oracle's, fp32 and bf16, with and without the bonus token, and whatever raw logprobs the
// batch asks for.
TEST(CpuBackendProperty, PenalisedBlocksScannedOrBucketedGiveTheOraclesArgmax) {
  std::mt19937_64 rng(37);
  for (int trial = 0; trial < 8; ++trial) {
    const int64_t vocab = 20480 * (1 + trial % 2) + 1 + static_cast<int64_t>(rng() % 2000);
    const int rows = 8;
    const int64_t blocks = (vocab + 2047) / 2048;
    PenalisedBatch data(vocab, rows);
    lastmile::Batch& batch = data.batch;
    batch.predict_bonus_token = trial % 4 >= 2;
    std::vector<std::vector<lastmile::TokenId>> prompts(rows), drafts(rows);
    std::uniform_real_distribution<float> above(10.0f, 10.5f);
    for (int r = 0; r < rows; ++r) {
      float* row = data.row(r);
      for (int64_t i = 0; i < vocab; ++i) row[i] = std::normal_distribution<float>(0.0f, 1.0f)(rng);
      std::vector<lastmile::TokenId> peaks;
      for (int64_t b = 0; b < blocks; ++b) {
        const int64_t size = std::min<int64_t>(2048, vocab - b * 2048);
        const int64_t at = b % 3 == 0   ? 0
                           : b % 3 == 1 ? size - 1
                                        : static_cast<int64_t>(rng() % size);
        peaks.push_back(static_cast<lastmile::TokenId>(b * 2048 + at));
        row[peaks.back()] = above(rng);
      }
      // Rows 0-4 penalise every peak, 5-6 the two highest, 7 none.
      const size_t penalised = r < 5 ? peaks.size() : r < 7 ? 2 : 0;
      std::vector<lastmile::TokenId> by_value = peaks;
      std::sort(by_value.begin(), by_value.end(),
                [row](lastmile::TokenId a, lastmile::TokenId b) { return row[a] > row[b]; });
      std::vector<lastmile::TokenId>& output = data.histories[r];
      for (int i = 0; i < 100; ++i) {  // the body's tokens, some repeated
        output.push_back(static_cast<lastmile::TokenId>(rng() % vocab));
        prompts[r].push_back(static_cast<lastmile::TokenId>(rng() % vocab));
      }
      for (size_t i = 0; i < penalised; ++i) {
        const lastmile::TokenId id = by_value[i];
        switch (rng() % 4) {
          case 0:  // the prompt, twice: repetition once
            prompts[r].push_back(id);
            prompts[r].push_back(id);
            break;
          case 1:  // drafts: counted only with the bonus token
            drafts[r].push_back(id);
            break;
          default:  // the output, 1-3 times, and at times the prompt too
            for (uint64_t k = 0; k <= rng() % 3; ++k) output.push_back(id);
            if (rng() % 2 == 0) prompts[r].push_back(id);
        }
      }
      std::shuffle(output.begin(), output.end(), rng);
      std::shuffle(prompts[r].begin(), prompts[r].end(), rng);
      lastmile::BatchRequest& request = batch.requests.emplace_back();
      request.prompt_token_ids = prompts[r];
      request.output_token_ids = output;
      request.spec_token_ids = drafts[r];
      lastmile::RequestParams& p = request.params;
      p.temperature = 0.0f;
      p.repetition_penalty = r % 2 == 0 ? 1.0f + 0.1f * static_cast<float>(r) : 1.0f;
      p.frequency_penalty = r % 3 == 0 ? 0.0f : 0.2f + 0.1f * static_cast<float>(r);
      p.presence_penalty = r == 4 ? 0.0f : 0.15f;
    }
    for_each_raw_logprobs_request(batch, [&](const std::string& mode) {
      SCOPED_TRACE(mode);
      expect_the_oracles_tokens(data, trial % 2 == 1, trial);
    });
  }
}

TEST(CpuBackendProperty, SamplerGivesTheOraclesTokensAndLogprobs) {
  std::mt19937_64 rng(14);
  for (int trial = 0; trial < 20; ++trial) {
    const int64_t vocab = trial % 2 ? 32001 : 1000;
    const int rows = 7;
    std::vector<float> logits;
    std::normal_distribution<float> body(0.0f, 2.5f);
    for (int64_t i = 0; i < rows * vocab; ++i) logits.push_back(body(rng));
    lastmile::Batch batch;
    batch.num_logprobs = 4;
    batch.logprobs_mode = trial % 3 ? lastmile::LogprobsMode::raw_logprobs
                                    : lastmile::LogprobsMode::processed_logprobs;
    for (int r = 0; r < rows; ++r) {
      lastmile::RequestParams& p = batch.requests.emplace_back().params;
      p.seed = rng();
      p.temperature = r == 0 ? 0.0f : 0.5f + static_cast<float>(r) * 0.1f;
      if (r % 3 == 1) p.top_k = 1 + static_cast<int32_t>(rng() % 100);
      if (r % 2 == 1) p.top_p = 0.5f + 0.1f * static_cast<float>(r % 5);
      if (r == 4) p.min_p = 0.05f;
    }
    const lastmile::LogitsView view = lastmile::LogitsView::f32(logits.data(), rows, vocab);
    lastmile::Sampler fast(backend_config(vocab, rows, lastmile::BackendKind::cpu));
    lastmile::Sampler slow(backend_config(vocab, rows, lastmile::BackendKind::reference));
    const lastmile::SamplerOutput& a = fast.sample(view, batch);
    const lastmile::SamplerOutput& b = slow.sample(view, batch);
    for (int r = 0; r < rows; ++r) {
      ASSERT_EQ(a.sampled_token_ids[r], b.sampled_token_ids[r])
          << "trial " << trial << " row " << r;
      for (int64_t c = 0; c < a.logprobs.width; ++c) {
        const float fast_value = a.logprobs.logprobs[r * a.logprobs.width + c];
        const float slow_value = b.logprobs.logprobs[r * b.logprobs.width + c];
        if (std::isinf(slow_value))
          EXPECT_EQ(fast_value, slow_value);
        else
          EXPECT_NEAR(fast_value, slow_value, 1e-5) << "trial " << trial << " row " << r;
      }
    }
  }
}

}  // namespace
}  // namespace lastmile_test
