// Batch invariance (DESIGN "Randomness", STYLE §9): a seeded request gets identical tokens and
// logprobs whatever its row, its companions, the batch size (1, 3, 99) or the thread count
// (1, 2, 3), at vocab 111 and 32001.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <thread>
#include <utility>

#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::RequestBatch;

// The request whose tokens must not move. top_p < 1 keeps vLLM's batch-wide top-p flag on in every
// batch, so even its processed logprobs are batch-independent (spec §9.3).
RequestParams target_params() {
  RequestParams p = random_params(20240601, 0.8f);
  p.top_k = 50;
  p.top_p = 0.9f;
  p.min_p = 0.01f;
  p.frequency_penalty = 0.2f;
  p.repetition_penalty = 1.1f;
  p.logprobs = 2;
  return p;
}

// Companion kinds: greedy, unseeded, seeded top-p, seeded top-k + min-p, penalised with logprobs.
RequestParams companion_params(uint64_t key) {
  switch (key % 5) {
    case 0:
      return greedy_params();
    case 1: {
      RequestParams p;
      p.temperature = 1.3f;
      return p;
    }
    case 2: {
      RequestParams p = random_params(key, 0.6f);
      p.top_p = 0.5f;
      return p;
    }
    case 3: {
      RequestParams p = random_params(key, 1.0f);
      p.top_k = 5;
      p.min_p = 0.1f;
      return p;
    }
    default: {
      RequestParams p = random_params(key, 0.9f);
      p.presence_penalty = 0.5f;
      p.logprobs = 4;
      p.bad_words_token_ids = {{1}};
      return p;
    }
  }
}

struct Trace {
  std::vector<TokenId> tokens;
  std::vector<TokenId> top_ids;  // sampled + top 2 per step
  std::vector<float> top_values;
  std::vector<int64_t> ranks;
  bool operator==(const Trace&) const = default;
};

struct TargetRun {
  int64_t vocab = 111;
  int64_t batch_size = 1;
  int64_t position = 0;  // the target's row
  int threads = 1;
  uint64_t companions = 0;  // key of the companion set
  bool reverse_companions = false;
  int steps = 4;
};

Trace run_target(const TargetRun& s) {
  Sampler sampler(make_config(s.vocab, s.batch_size, LogprobsMode::processed_logprobs, s.threads));
  const std::vector<TokenId> prompt = {1, 2, 3, 2};
  std::vector<std::vector<TokenId>> outputs(static_cast<size_t>(s.batch_size));
  // Companion c (0-based) is keyed by (companions, c); its row follows the target's order.
  std::vector<uint64_t> keys;
  for (int64_t c = 0; c + 1 < s.batch_size; ++c)
    keys.push_back(s.companions * 1000 + static_cast<uint64_t>(c));
  if (s.reverse_companions) std::reverse(keys.begin(), keys.end());
  Trace trace;
  for (int step = 0; step < s.steps; ++step) {
    std::vector<float> logits;
    Batch batch;
    size_t next_companion = 0;
    for (int64_t row = 0; row < s.batch_size; ++row) {
      BatchRequest& b = batch.requests.emplace_back();
      b.output_token_ids = outputs[row];
      std::vector<float> x;
      if (row == s.position) {
        b.params = target_params();
        b.prompt_token_ids = prompt;
        x = lcg_logits(static_cast<size_t>(s.vocab), 7000 + step, -5.0f, 5.0f);
      } else {
        const uint64_t key = keys[next_companion++];
        b.params = companion_params(key);
        x = lcg_logits(static_cast<size_t>(s.vocab), key * 64 + step, -5.0f, 5.0f);
      }
      logits.insert(logits.end(), x.begin(), x.end());
    }
    const SamplerOutput& out =
        sampler.sample(LogitsView::f32(logits.data(), s.batch_size, s.vocab), batch);
    for (int64_t row = 0; row < s.batch_size; ++row)
      outputs[row].push_back(out.sampled_token_ids[row]);
    const int64_t p = s.position;
    trace.tokens.push_back(out.sampled_token_ids[p]);
    for (int64_t c = 0; c < 3; ++c) {
      trace.top_ids.push_back(out.logprobs.token_ids[p * out.logprobs.width + c]);
      trace.top_values.push_back(out.logprobs.logprobs[p * out.logprobs.width + c]);
    }
    trace.ranks.push_back(out.logprobs.ranks[p]);
  }
  return trace;
}

class BatchInvariance : public ::testing::TestWithParam<int64_t> {
 protected:
  int64_t vocab() const { return GetParam(); }
  int steps() const { return vocab() > 1000 ? 2 : 4; }
  Trace reference() const {
    TargetRun s;
    s.vocab = vocab();
    s.steps = steps();
    return run_target(s);
  }
};

TEST_P(BatchInvariance, SeededRequestIgnoresBatchSizeCompanionsAndThreads) {
  const Trace expected = reference();
  ASSERT_EQ(expected.tokens.size(), static_cast<size_t>(steps()));
  for (int64_t batch_size : {1, 3, 99}) {
    for (int threads : {1, 2, 3}) {
      TargetRun s;
      s.vocab = vocab();
      s.steps = steps();
      s.batch_size = batch_size;
      s.position = (batch_size * threads) / 4;  // first, middle and later rows
      s.threads = threads;
      s.companions =
          static_cast<uint64_t>(batch_size * 10 + threads);  // a new companion set each time
      EXPECT_TRUE(run_target(s) == expected) << "batch " << batch_size << " threads " << threads;
    }
  }
}

TEST_P(BatchInvariance, SeededRequestIgnoresRowPermutation) {
  const Trace expected = reference();
  for (int64_t position : {int64_t{0}, int64_t{50}, int64_t{98}}) {
    for (bool reverse : {false, true}) {
      TargetRun s;
      s.vocab = vocab();
      s.steps = steps();
      s.batch_size = 99;
      s.position = position;
      s.threads = 2;
      s.companions = 7;  // the same companions, in another order
      s.reverse_companions = reverse;
      EXPECT_TRUE(run_target(s) == expected) << "position " << position << " reverse " << reverse;
    }
  }
}

TEST_P(BatchInvariance, TraceIsNotTrivial) {
  // The comparisons above only mean something if the target really samples.
  TargetRun s;
  s.vocab = vocab();
  s.steps = 12;
  const Trace t = run_target(s);
  EXPECT_GT(std::set<TokenId>(t.tokens.begin(), t.tokens.end()).size(), 1u);
}

INSTANTIATE_TEST_SUITE_P(Vocab, BatchInvariance, ::testing::Values(111, 32001),
                         [](const ::testing::TestParamInfo<int64_t>& param_info) {
                           return "Vocab" + std::to_string(param_info.param);
                         });

// The invariance tests above pass trivially if every row runs on the caller: a batch's rows must
// really reach the pool's threads. A processor records which thread edits each row and takes
// 0.2 ms at it, so that spreading pays (RowSchedule); over 8 calls of 64 rows on 3 threads, some
// row must run off the caller, and the tokens must be those of one thread.
class ThreadRecorder : public lastmile::LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return true; }
  void apply(const lastmile::ProcessorRow&, std::span<float>) const override {
    const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(200);
    while (std::chrono::steady_clock::now() < until) {
    }
    std::lock_guard lock(mutex_);
    threads_.insert(std::this_thread::get_id());
  }
  size_t threads_seen() const {
    std::lock_guard lock(mutex_);
    return threads_.size();
  }

 private:
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> threads_;
};

TEST(BatchInvarianceThreads, RowsReallyRunOnThePoolsThreads) {
  constexpr int64_t kVocab = 1000, kRows = 64;
  std::vector<float> logits;
  std::vector<Row> rows;
  for (int64_t r = 0; r < kRows; ++r) {
    const std::vector<float> x = lcg_logits(kVocab, 500 + static_cast<uint64_t>(r));
    logits.insert(logits.end(), x.begin(), x.end());
    rows.push_back(row_with(companion_params(static_cast<uint64_t>(r))));
    rows.back().params.seed = static_cast<uint64_t>(r);  // the unseeded kind too: same draws
  }
  const Batch batch = make_batch(rows);
  std::vector<std::vector<TokenId>> tokens;
  size_t threads_seen = 0;
  for (int threads : {1, 3}) {
    auto recorder = std::make_shared<ThreadRecorder>();
    SamplerConfig config = make_config(kVocab, kRows, LogprobsMode::raw_logprobs, threads);
    config.logits_processors = {recorder};
    Sampler sampler(config);
    for (int call = 0; call < 8; ++call) {
      const SamplerOutput& out =
          sampler.sample(LogitsView::f32(logits.data(), kRows, kVocab), batch);
      tokens.emplace_back(out.sampled_token_ids.begin(), out.sampled_token_ids.end());
    }
    threads_seen = recorder->threads_seen();
  }
  EXPECT_GE(threads_seen, size_t{2}) << "every row of 8 calls ran on one thread";
  for (size_t call = 1; call < tokens.size(); ++call) EXPECT_EQ(tokens[call], tokens[0]) << call;
}

// RequestBatch: the same request keeps its tokens when companions come, go and change order.
std::vector<TokenId> request_batch_run(int64_t vocab, bool with_companions, int threads) {
  RequestBatch batch(make_config(vocab, 8, LogprobsMode::raw_logprobs, threads));
  const std::vector<TokenId> prompt = {4, 5, 6};
  if (with_companions) {
    batch.add("x", companion_params(2));
    batch.add("y", companion_params(3));
  }
  batch.add("target", target_params(), prompt);
  if (with_companions) batch.add("z", companion_params(1));
  for (int step = 0; step < 12; ++step) {
    if (with_companions && step == 4) {
      batch.remove("x");
      batch.add("w", companion_params(4));
    }
    if (with_companions && step == 8) {
      const std::vector<std::string> order = {"w", "target", "z", "y"};
      batch.reorder(order);
    }
    std::vector<float> logits;
    for (int64_t row = 0; row < batch.size(); ++row) {
      const bool target = batch.request_id(row) == "target";
      const std::vector<float> x =
          lcg_logits(static_cast<size_t>(vocab), target ? 300 + step : 900 + row * 31 + step);
      logits.insert(logits.end(), x.begin(), x.end());
    }
    batch.step(LogitsView::f32(logits.data(), batch.size(), vocab));
  }
  const auto out = batch.output_token_ids("target");
  return {out.begin(), out.end()};
}

// A lone row (or a few unedited ones on many threads) splits its reads of the caller's row in
// fixed vocab chunks over the threads: the input draw and argmax, raw logprobs' statistics. Rows
// that the steps edit, or whose logprobs read the working row, run the steps unsplit. A seeded
// request of each shape gets the same tokens and logprobs alone on 1, 2 or 3 threads, in a batch
// of 2 on 4 threads and in a batch of 4 on 2 (rows side by side). fp32 and bf16 rows; no, raw
// and processed logprobs. A sampler's first call runs its lone row in order, the eleven that
// follow it at once split (SplitWindow).
TEST(BatchInvarianceRowSplit, UnsplitAndSplitRowsGiveTheSameTokensAndLogprobs) {
  const int64_t vocab = 40001;  // seven chunks of the draw and of the argmax
  // Head tokens (every 211th is raised below) in each chunk, so that the penalties move draws.
  const std::vector<TokenId> history = {1055, 16880, 16880, 31650, 37980, 40001 - 1};
  auto shape = [](int kind) {
    RequestParams p = random_params(77 + static_cast<uint64_t>(kind), 0.9f);
    if (kind == 1) p.min_p = 0.05f;
    if (kind == 2) p.top_k = 40, p.top_p = 0.9f;
    if (kind == 3) p.top_p = 0.7f;
    if (kind == 4) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.2f;  // the steps
    if (kind == 5) p.temperature = 0.0f;                                     // greedy
    if (kind == 6) p.repetition_penalty = 0.8f, p.temperature = 0.0f;
    if (kind == 7) p.logit_bias = {{3, 2.0f}};  // a biased row: the steps
    return p;
  };
  std::vector<float> peaked = lcg_logits(static_cast<size_t>(vocab), 99, -5.0f, 5.0f);
  for (size_t i = 0; i < peaked.size(); i += 211) peaked[i] += 8.0f;  // a head, so top-p lists
  std::vector<uint16_t> peaked_bf16(peaked.size());
  for (size_t i = 0; i < peaked.size(); ++i) {  // the upper half of a float is a bf16
    uint32_t bits = 0;
    std::memcpy(&bits, &peaked[i], sizeof bits);
    peaked_bf16[i] = static_cast<uint16_t>(bits >> 16);
  }
  struct Run {
    std::vector<TokenId> tokens, top_ids;
    std::vector<float> top_logprobs;
    std::vector<int64_t> ranks;
    bool operator==(const Run&) const = default;
  };
  for (int kind = 0; kind < 8; ++kind) {
    for (const int logprobs : {0, 1, 2}) {  // none, raw, processed
      for (const bool bf16 : {false, true}) {
        auto run = [&](int64_t batch_size, int threads) {
          Sampler sampler(make_config(
              vocab, batch_size,
              logprobs == 2 ? LogprobsMode::processed_logprobs : LogprobsMode::raw_logprobs,
              threads));
          std::vector<float> logits;
          std::vector<uint16_t> halves;
          Batch batch;
          if (logprobs > 0) batch.num_logprobs = 3;
          for (int64_t row = 0; row < batch_size; ++row) {
            logits.insert(logits.end(), peaked.begin(), peaked.end());
            halves.insert(halves.end(), peaked_bf16.begin(), peaked_bf16.end());
            BatchRequest& r = batch.requests.emplace_back();
            r.params = shape(kind);
            r.prompt_token_ids = history;
            r.output_token_ids = std::span<const TokenId>(history).last(3);
          }
          Run result;
          const int64_t last = batch_size - 1;
          for (int64_t step = 0; step < 12; ++step) {
            for (BatchRequest& r : batch.requests) r.step = step;
            const LogitsView view = bf16 ? LogitsView::bf16(halves.data(), batch_size, vocab)
                                         : LogitsView::f32(logits.data(), batch_size, vocab);
            const SamplerOutput& out = sampler.sample(view, batch);
            result.tokens.push_back(out.sampled_token_ids[last]);
            if (logprobs == 0) continue;
            const auto w = static_cast<size_t>(out.logprobs.width);
            const auto from = static_cast<size_t>(last) * w;
            result.top_ids.insert(result.top_ids.end(), out.logprobs.token_ids.begin() + from,
                                  out.logprobs.token_ids.begin() + from + w);
            result.top_logprobs.insert(result.top_logprobs.end(),
                                       out.logprobs.logprobs.begin() + from,
                                       out.logprobs.logprobs.begin() + from + w);
            result.ranks.push_back(out.logprobs.ranks[last]);
          }
          return result;
        };
        const std::string what = "kind " + std::to_string(kind) + " logprobs " +
                                 std::to_string(logprobs) + " bf16 " + std::to_string(bf16);
        const Run alone = run(1, 1);
        EXPECT_TRUE(run(1, 2) == alone) << what;
        EXPECT_TRUE(run(1, 3) == alone) << what;
        EXPECT_TRUE(run(2, 4) == alone) << what;
        EXPECT_TRUE(run(4, 2) == alone) << what;
        if (kind < 5) {  // random rows move
          EXPECT_GT(std::set<TokenId>(alone.tokens.begin(), alone.tokens.end()).size(), 2u) << what;
        }
      }
    }
  }
}

// Whether a batch reads logprobs is batch-wide: a companion asking for them sends an unedited row
// through the steps instead of the draw from the input. Its tokens must not change (600 draws
// per shape, peaked and flat rows, each from-input shape).
TEST(BatchInvarianceLogprobCompanion, ACompanionAskingForLogprobsChangesNoToken) {
  const int64_t vocab = 32001;
  std::vector<float> peaked = lcg_logits(static_cast<size_t>(vocab), 5, -5.0f, 5.0f);
  for (size_t i = 0; i < peaked.size(); i += 211) peaked[i] += 8.0f;
  const std::vector<float> flat = lcg_logits(static_cast<size_t>(vocab), 6, -2.0f, 2.0f);
  std::vector<TokenId> history;  // the peaked tokens and others: penalties reorder the head
  for (TokenId t = 0; t < vocab; t += 211 * 3) history.push_back(t);
  for (TokenId t = 5; t < vocab; t += 97) history.push_back(t);
  // Kinds 5-7: the same shapes with penalties (rows edited before sampling: drawn over the
  // working row). Processed logprobs send a companion's batch through steps 7b-d.
  for (int kind = 0; kind < 8; ++kind) {
    RequestParams p = random_params(300 + static_cast<uint64_t>(kind), 0.8f);
    if (kind % 5 == 1) p.min_p = 0.05f;
    if (kind % 5 == 2) p.top_k = 40, p.top_p = 0.9f;
    if (kind == 3 || kind == 4) p.top_p = 0.9f;
    if (kind >= 5) p.repetition_penalty = 1.3f, p.frequency_penalty = 0.5f;
    const std::vector<float>& row = kind == 4 ? flat : peaked;
    for (const auto mode : {LogprobsMode::raw_logprobs, LogprobsMode::processed_logprobs}) {
      auto tokens = [&](bool companion_logprobs) {
        Sampler sampler(make_config(vocab, 2, mode, 1));
        std::vector<float> logits = row;
        logits.insert(logits.end(), row.begin(), row.end());
        Batch batch;
        batch.requests.emplace_back().params = p;
        if (kind >= 5) {
          batch.requests[0].prompt_token_ids = history;
          batch.requests[0].output_token_ids = std::span<const TokenId>(history).first(20);
        }
        RequestParams companion = random_params(9, 1.0f);
        if (companion_logprobs) companion.logprobs = 3;
        batch.requests.emplace_back().params = companion;
        std::vector<TokenId> drawn;
        for (uint64_t step = 0; step < 600; ++step) {
          batch.requests[0].step = step;
          drawn.push_back(
              sampler.sample(LogitsView::f32(logits.data(), 2, vocab), batch).sampled_token_ids[0]);
        }
        return drawn;
      };
      EXPECT_EQ(tokens(true), tokens(false))
          << "kind " << kind << " mode " << static_cast<int>(mode);
    }
  }
}

// A top-p cut on an exact tie (equal logits whose cumulative mass meets 1 - p) at T != 1: the
// row's draw must settle it as it would with no logprobs, whichever mode the batch reads, on
// fp32 and bf16 rows, unedited and penalised (an independent differential review drew token 1
// with processed logprobs and token 0 without, on 146 of 300 seeds of the two-token row).
TEST(BatchInvarianceLogprobModes, ATopPCutOnATieDrawsTheSameTokenInEveryMode) {
  // repetition: 1 none; 0.9 (raising: the working row) with presence 2; 1.2 (lowering: without
  // logprobs the draw from the penalised caller's row) with presence 0.5.
  struct Shape {
    int64_t vocab;
    float temperature, top_p, repetition;
    bool bf16;
  };
  const Shape shapes[] = {{2, 1.3f, 0.5f, 1.0f, false},   {6, 1.3f, 0.5f, 1.0f, false},
                          {1023, 0.7f, 0.5f, 1.0f, true}, {6, 0.5f, 0.5f, 0.9f, false},
                          {64, 1.6f, 0.25f, 0.9f, true},  {2, 1.3f, 0.5f, 1.2f, false},
                          {1023, 0.7f, 0.5f, 1.2f, true}};
  for (const Shape& s : shapes) {
    // Equal logits: all of a short row, else eight spread over it and the rest -inf.
    std::vector<float> row(static_cast<size_t>(s.vocab), 1.0f);
    if (s.vocab > 8) {
      std::fill(row.begin(), row.end(), -std::numeric_limits<float>::infinity());
      for (size_t i = 0; i < 8; ++i) row[i * (row.size() / 8)] = 1.0f;
    }
    std::vector<uint16_t> halves(row.size());
    for (size_t i = 0; i < row.size(); ++i) {
      uint32_t bits = 0;
      std::memcpy(&bits, &row[i], sizeof bits);
      halves[i] = static_cast<uint16_t>(bits >> 16);
    }
    const std::vector<TokenId> history = {0, 1, 1};  // equal penalties keep the tie
    auto tokens = [&](std::optional<LogprobsMode> mode) {
      Sampler sampler(make_config(s.vocab, 1, mode.value_or(LogprobsMode::raw_logprobs), 1));
      Batch batch;
      if (mode) batch.num_logprobs = 0;
      BatchRequest& r = batch.requests.emplace_back();
      r.params.temperature = s.temperature;
      r.params.top_p = s.top_p;
      if (s.repetition != 1.0f) {
        r.params.repetition_penalty = s.repetition;
        r.params.presence_penalty = s.repetition < 1.0f ? 2.0f : 0.5f;
        r.output_token_ids = history;
      }
      const LogitsView view = s.bf16 ? LogitsView::bf16(halves.data(), 1, s.vocab)
                                     : LogitsView::f32(row.data(), 1, s.vocab);
      std::vector<TokenId> drawn;
      for (uint64_t seed = 0; seed < 300; ++seed) {
        r.params.seed = seed;
        drawn.push_back(sampler.sample(view, batch).sampled_token_ids[0]);
      }
      return drawn;
    };
    const std::vector<TokenId> without = tokens(std::nullopt);
    const std::string what = "vocab " + std::to_string(s.vocab) + " repetition " +
                             std::to_string(s.repetition) + " bf16 " + std::to_string(s.bf16);
    EXPECT_EQ(tokens(LogprobsMode::processed_logprobs), without) << what;
    EXPECT_EQ(tokens(LogprobsMode::processed_logits), without) << what;
    EXPECT_EQ(tokens(LogprobsMode::raw_logprobs), without) << what;
  }
}

TEST(BatchInvarianceRequestBatch, CompanionsAddedRemovedAndReorderedDoNotChangeTokens) {
  for (int64_t vocab : {111, 32001}) {
    const std::vector<TokenId> alone = request_batch_run(vocab, false, 1);
    EXPECT_EQ(request_batch_run(vocab, true, 1), alone) << vocab;
    EXPECT_EQ(request_batch_run(vocab, true, 3), alone) << vocab;
  }
}

TEST(BatchInvarianceRequestBatch, UnseededRequestIgnoresReorder) {
  // Unseeded requests take their seed from the sampler seed and the add counter, not their row.
  std::vector<std::vector<TokenId>> runs;
  for (bool reorder : {false, true}) {
    SamplerConfig config = make_config(111, 3);
    config.seed = 99;
    RequestBatch batch(config);
    RequestParams p;  // temperature 1, no seed
    batch.add("a", p);
    batch.add("b", p);
    batch.add("c", p);
    if (reorder) {
      const std::vector<std::string> order = {"c", "a", "b"};
      batch.reorder(order);
    }
    const std::vector<float> row = lcg_logits(111, 1, -1.0f, 1.0f);
    std::vector<float> logits;
    for (int i = 0; i < 3; ++i) logits.insert(logits.end(), row.begin(), row.end());
    for (int step = 0; step < 10; ++step) batch.step(LogitsView::f32(logits.data(), 3, 111));
    for (const char* id : {"a", "b", "c"}) {
      const auto out = batch.output_token_ids(id);
      runs.emplace_back(out.begin(), out.end());
    }
  }
  EXPECT_EQ(runs[0], runs[3]);
  EXPECT_EQ(runs[1], runs[4]);
  EXPECT_EQ(runs[2], runs[5]);
  EXPECT_NE(runs[0], runs[1]);  // distinct requests, distinct streams
}

// A stateless call seeds its unseeded rows from the count of calls, so a call that fails must not
// count: otherwise a caller who retries after a rejected batch shifts every later draw.
TEST(BatchInvarianceStateless, AFailedCallDoesNotShiftUnseededDraws) {
  constexpr int64_t kVocab = 1000;
  constexpr int64_t kRows = 4;
  enum class Failure { none, bad_field, nan_logits };
  auto run = [&](Failure failure) {
    SamplerConfig config = make_config(kVocab, kRows);
    config.seed = 7;
    Sampler sampler(config);
    std::vector<float> logits = lcg_logits(kVocab * kRows, 5, -1.0f, 1.0f);
    const std::vector<Row> rows(kRows, row_with(RequestParams{}));  // temperature 1, no seed
    std::vector<TokenId> tokens;
    for (int call = 0; call < 3; ++call) {
      if (call == 1 && failure == Failure::bad_field) {
        std::vector<Row> bad = rows;
        bad[2].params.top_p = 5.0f;
        EXPECT_THROW(sampler.sample(LogitsView::f32(logits.data(), kRows, kVocab), make_batch(bad)),
                     lastmile::InvalidArgument);
      }
      if (call == 1 && failure == Failure::nan_logits) {
        const float kept = std::exchange(logits[7], std::numeric_limits<float>::quiet_NaN());
        EXPECT_THROW(
            sampler.sample(LogitsView::f32(logits.data(), kRows, kVocab), make_batch(rows)),
            lastmile::InvalidArgument);
        logits[7] = kept;
      }
      const SamplerOutput& out =
          sampler.sample(LogitsView::f32(logits.data(), kRows, kVocab), make_batch(rows));
      tokens.insert(tokens.end(), out.sampled_token_ids.begin(), out.sampled_token_ids.end());
    }
    return tokens;
  };
  const std::vector<TokenId> clean = run(Failure::none);
  EXPECT_EQ(run(Failure::bad_field), clean);
  EXPECT_EQ(run(Failure::nan_logits), clean);
  // The draws are not trivially equal: calls and rows differ.
  EXPECT_NE(std::vector<TokenId>(clean.begin(), clean.begin() + kRows),
            std::vector<TokenId>(clean.begin() + kRows, clean.begin() + 2 * kRows));
}

}  // namespace
}  // namespace lastmile_test
