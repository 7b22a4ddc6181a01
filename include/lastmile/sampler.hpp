// lastmile — the batched, stateless sampler: vLLM V1's Sampler.forward (spec §2).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "lastmile/batch.hpp"
#include "lastmile/logits_processor.hpp"
#include "lastmile/logits_view.hpp"
#include "lastmile/output.hpp"

namespace lastmile {

namespace detail {
class SamplerImpl;
}

// Which kernels run the pipeline. `cpu`: Highway SIMD with runtime dispatch and selection instead
// of sorting; `reference`: the plain scalar oracle. Results agree (tests/unit/backend_kernels).
enum class BackendKind { automatic, cpu, reference };

struct SamplerConfig {
  int64_t vocab_size = 0;  // logits width; every token id must be in [0, vocab_size)
  int64_t max_batch = 1;   // rows per call, at most
  LogprobsMode logprobs_mode = LogprobsMode::raw_logprobs;
  int threads = 0;  // 0: hardware concurrency, else at most kMaxThreads; results never depend on it
  uint64_t seed = 0;                             // seeds of requests without their own
  BackendKind backend = BackendKind::automatic;  // automatic: cpu
  std::vector<std::shared_ptr<const LogitsProcessor>> logits_processors;  // run in list order

  static constexpr int kMaxThreads = 1024;
};

// Samples one token per logits row and gathers the logprobs the batch asks for.
// Not thread-safe: one thread calls `sample` at a time (the sampler runs its own threads). A call
// made while another runs (from a custom processor, or another thread) throws InvalidArgument.
// After fork() the child's copy samples on the calling thread alone (its workers stayed in the
// parent), to the same results; fork only while no thread is inside `sample`.
// Example:
//   lastmile::SamplerConfig config;
//   config.vocab_size = 32000;
//   lastmile::Sampler sampler(config);
//   lastmile::Batch batch;
//   lastmile::BatchRequest& request = batch.requests.emplace_back();
//   request.params.top_p = 0.9f;
//   request.params.seed = 42;
//   const auto& out = sampler.sample(lastmile::LogitsView::f32(logits, 1, 32000), batch);
//   int32_t token = out.sampled_token_ids[0];
class Sampler {
 public:
  // Throws InvalidArgument for vocab_size < 1, max_batch < 1 or threads < 0.
  explicit Sampler(SamplerConfig config);
  ~Sampler();
  // A moved-from sampler may be destroyed or assigned to; any other call throws InvalidArgument.
  Sampler(Sampler&&) noexcept;
  Sampler& operator=(Sampler&&) noexcept;

  // Validates the batch and logits (InvalidArgument naming request, field and value), then runs
  // the pipeline. The result lives in the sampler until the next call. Allocates only while
  // its workspace grows to the largest batch (rows, histories, whitelists) seen so far.
  const SamplerOutput& sample(const LogitsView& logits, const Batch& batch);

  const SamplerConfig& config() const;
  // The backend in use, e.g. "cpu (AVX3)" or "reference (scalar C++)".
  std::string backend_name() const;

 private:
  friend class RequestBatch;
  std::unique_ptr<detail::SamplerImpl> impl_;
};

}  // namespace lastmile
