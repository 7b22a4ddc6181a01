// Custom logits processors (spec §6.6): where each kind runs, and that a throwing processor
// reaches the caller as an exception on any thread count without breaking the sampler.
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

// Adds 10 to token 2: argmax-changing.
class BoostTokenTwo final : public lastmile::LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow&, std::span<float> logits) const override {
    logits[2] += 10.0f;
  }
};

// Masks every token but 0 and 1: declared argmax-invariant, so it runs after min_p and only on
// sampled batches (never for an all-greedy batch).
class KeepFirstTwo final : public lastmile::LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return true; }
  void apply(const lastmile::ProcessorRow&, std::span<float> logits) const override {
    for (size_t i = 2; i < logits.size(); ++i) logits[i] = -std::numeric_limits<float>::infinity();
  }
};

// Throws on rows whose request has min_tokens == 7 (a marker: no stop ids, so no other effect).
class ThrowOnMarkedRow final : public lastmile::LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow& row, std::span<float>) const override {
    if (row.params->min_tokens == 7) throw std::runtime_error("processor failed");
  }
};

// Writes NaN at token 3: a broken processor the sampler must report, not sample from.
class WriteNaN final : public lastmile::LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow&, std::span<float> logits) const override {
    logits[3] = std::nanf("");
  }
};

lastmile::SamplerConfig config_with(std::shared_ptr<const lastmile::LogitsProcessor> p, int threads,
                                    int64_t max_batch = 4) {
  lastmile::SamplerConfig config;
  config.vocab_size = 5;
  config.max_batch = max_batch;
  config.threads = threads;
  config.logits_processors.push_back(std::move(p));
  return config;
}

TEST(CustomProcessors, ArgmaxChangingRunsBeforeGreedy) {
  lastmile::Sampler sampler(config_with(std::make_shared<BoostTokenTwo>(), 1));
  const std::vector<float> logits = {5.0f, 1.0f, 0.0f, 1.0f, 1.0f};  // 0 + 10 beats 5
  lastmile::Batch batch;
  batch.requests.emplace_back().params.temperature = 0.0f;
  EXPECT_EQ(
      sampler.sample(lastmile::LogitsView::f32(logits.data(), 1, 5), batch).sampled_token_ids[0],
      2);
}

TEST(CustomProcessors, NaNWrittenByAProcessorIsReported) {
  lastmile::Sampler sampler(config_with(std::make_shared<WriteNaN>(), 1));
  const std::vector<float> logits = {5.0f, 1.0f, 0.0f, 1.0f, 1.0f};
  lastmile::Batch batch;
  batch.requests.emplace_back().params.temperature = 0.0f;
  try {
    sampler.sample(lastmile::LogitsView::f32(logits.data(), 1, 5), batch);
    ADD_FAILURE() << "expected InvalidArgument";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_STREQ(e.what(),
                 "request 0: a custom logits processor made the logits NaN at token_id 3");
  }
}

TEST(CustomProcessors, ArgmaxInvariantRunsOnlyOnSampledBatches) {
  lastmile::Sampler sampler(config_with(std::make_shared<KeepFirstTwo>(), 1));
  const std::vector<float> logits = {0.0f, 0.0f, 0.0f, 9.0f, 0.0f};
  lastmile::Batch greedy;
  greedy.requests.emplace_back().params.temperature = 0.0f;
  EXPECT_EQ(
      sampler.sample(lastmile::LogitsView::f32(logits.data(), 1, 5), greedy).sampled_token_ids[0],
      3);
  lastmile::Batch random;
  random.requests.emplace_back().params.seed = 1;
  for (uint64_t step = 0; step < 50; ++step) {
    random.requests[0].step = step;
    const auto token =
        sampler.sample(lastmile::LogitsView::f32(logits.data(), 1, 5), random).sampled_token_ids[0];
    EXPECT_LE(token, 1) << "step " << step;
  }
}

TEST(CustomProcessors, ThrowingProcessorPropagatesOnEveryThreadCount) {
  for (int threads : {1, 2, 3}) {
    lastmile::Sampler sampler(config_with(std::make_shared<ThrowOnMarkedRow>(), threads, 64));
    std::vector<float> logits(64 * 5, 0.0f);
    lastmile::Batch batch;
    for (int r = 0; r < 64; ++r) batch.requests.emplace_back().params.temperature = 0.0f;
    batch.requests[5].params.min_tokens = 7;
    for (int attempt = 0; attempt < 3; ++attempt) {  // the pool stays usable after a failure
      EXPECT_THROW(sampler.sample(lastmile::LogitsView::f32(logits.data(), 64, 5), batch),
                   std::runtime_error)
          << "threads " << threads;
    }
    batch.requests[5].params.min_tokens = 0;  // unmarked: nothing throws
    EXPECT_EQ(sampler.sample(lastmile::LogitsView::f32(logits.data(), 64, 5), batch).num_rows, 64);
  }
}

// Calls sample on the same sampler from inside the call: it would share the outer call's scratch
// and output (the outer call returned the inner row's token), so the inner call is refused and
// the outer one fails with its error.
class SampleAgain final : public lastmile::LogitsProcessor {
 public:
  explicit SampleAgain(lastmile::Sampler** sampler) : sampler_(sampler) {}
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow&, std::span<float>) const override {
    if (*sampler_ == nullptr) return;  // switched off
    std::vector<float> inner(5, 0.0f);
    lastmile::Batch batch;
    batch.requests.emplace_back().params.temperature = 0.0f;
    (*sampler_)->sample(lastmile::LogitsView::f32(inner.data(), 1, 5), batch);
  }

 private:
  lastmile::Sampler** sampler_;
};

TEST(CustomProcessors, ACallFromInsideACallIsRefused) {
  for (int threads : {1, 2}) {
    lastmile::Sampler* self = nullptr;
    lastmile::Sampler sampler(config_with(std::make_shared<SampleAgain>(&self), threads));
    self = &sampler;
    std::vector<float> logits = {0, 5, 0, 0, 0, 0, 0, 0, 5, 0};
    lastmile::Batch batch;
    for (int r = 0; r < 2; ++r) batch.requests.emplace_back().params.temperature = 0.0f;
    try {
      sampler.sample(lastmile::LogitsView::f32(logits.data(), 2, 5), batch);
      ADD_FAILURE() << "no error, threads " << threads;
    } catch (const lastmile::InvalidArgument& e) {
      EXPECT_EQ(std::string(e.what()),
                "sample: called while another call on this sampler runs (from a custom logits "
                "processor, or from another thread): one call at a time");
    }
  }
}

// The same sampler samples once the refused call has returned: the refusal ended with it.
TEST(CustomProcessors, ASamplerIsUsableAfterARefusedInnerCall) {
  lastmile::Sampler* self = nullptr;
  lastmile::Sampler sampler(config_with(std::make_shared<SampleAgain>(&self), 1));
  self = &sampler;
  std::vector<float> logits = {0, 5, 0, 0, 0};
  lastmile::Batch batch;
  batch.requests.emplace_back().params.temperature = 0.0f;
  const auto view = lastmile::LogitsView::f32(logits.data(), 1, 5);
  EXPECT_THROW(sampler.sample(view, batch), lastmile::InvalidArgument);
  self = nullptr;  // the processor does nothing from here
  EXPECT_EQ(sampler.sample(view, batch).sampled_token_ids[0], 1);
}

// Holds its row until released, having said that it runs: a second thread's call can be made
// while the first is surely inside.
class HoldUntilReleased final : public lastmile::LogitsProcessor {
 public:
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow&, std::span<float>) const override {
    inside.store(true);
    while (!released.load()) std::this_thread::yield();
  }
  mutable std::atomic<bool> inside{false}, released{false};
};

TEST(CustomProcessors, ACallFromAnotherThreadWhileOneRunsIsRefused) {
  auto hold = std::make_shared<HoldUntilReleased>();
  lastmile::Sampler sampler(config_with(hold, 1));
  std::vector<float> logits = {0, 5, 0, 0, 0};
  lastmile::Batch batch;
  batch.requests.emplace_back().params.temperature = 0.0f;
  const auto view = lastmile::LogitsView::f32(logits.data(), 1, 5);
  int64_t first_token = -1;
  std::thread first([&] { first_token = sampler.sample(view, batch).sampled_token_ids[0]; });
  while (!hold->inside.load()) std::this_thread::yield();
  EXPECT_THROW(sampler.sample(view, batch), lastmile::InvalidArgument);
  hold->released.store(true);
  first.join();
  EXPECT_EQ(first_token, 1);  // the running call was left alone
}

// Removes a request from the RequestBatch whose step runs it: the step's rows read that
// request's histories, so the removal is refused (and the step fails with its error).
class RemoveDuringStep final : public lastmile::LogitsProcessor {
 public:
  explicit RemoveDuringStep(lastmile::RequestBatch** batch) : batch_(batch) {}
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow&, std::span<float>) const override {
    if (*batch_ != nullptr) (*batch_)->remove("a");
  }

 private:
  lastmile::RequestBatch** batch_;
};

TEST(CustomProcessors, ARequestBatchRefusesChangesDuringItsStep) {
  lastmile::RequestBatch* self = nullptr;
  lastmile::RequestBatch batch(config_with(std::make_shared<RemoveDuringStep>(&self), 2));
  batch.add("a", lastmile::RequestParams{}, {}, 4);
  batch.add("b", lastmile::RequestParams{}, {}, 4);
  self = &batch;
  std::vector<float> logits(2 * 5, 0.0f);
  const auto view = lastmile::LogitsView::f32(logits.data(), 2, 5);
  try {
    batch.step(view);
    ADD_FAILURE() << "no error";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_EQ(std::string(e.what()),
              "remove: called while another call on this request batch runs (from a custom "
              "logits processor, or from another thread): one call at a time");
  }
  self = nullptr;
  EXPECT_EQ(batch.size(), 2);  // nothing removed
  EXPECT_EQ(batch.step(view).num_rows, 2);
}

}  // namespace
}  // namespace lastmile_test
