// lastmile — batch facts computed once per call, like vLLM's SamplingMetadata flags (spec §1.3).
// Steps only read them. Several change results for every row (all_greedy: no temperature in the
// processed tensor; any_top_p: the p = 1 underflow rule on every row, spec §9.3).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>

#include "lastmile/batch.hpp"
#include "lastmile/logits_processor.hpp"

namespace lastmile::detail {

struct BatchPlan {
  int64_t num_rows = 0;
  int64_t vocab_size = 0;
  LogprobsMode logprobs_mode = LogprobsMode::raw_logprobs;
  std::optional<int32_t> num_logprobs;  // vLLM's max_num_logprobs
  int64_t token_logprobs_width = 0;     // 1 + the longest logprob_token_ids list; 0: none asked
  bool predict_bonus_token = false;
  bool all_greedy = false;     // no row samples
  bool all_random = false;     // no greedy row
  bool any_top_k = false;      // some row has 0 < top_k < vocab_size
  bool any_top_p = false;      // some row has top_p < 1
  bool any_min_p = false;      // some row has min_p > 0
  bool any_penalties = false;  // vLLM's not no_penalties
  uint64_t sampler_seed = 0;
  uint64_t call_index = 0;  // seeds unseeded rows of a stateless call
  std::span<const std::shared_ptr<const LogitsProcessor>> processors;

  bool needs_logprobs() const { return num_logprobs.has_value() || token_logprobs_width > 0; }
  bool raw_mode() const {
    return logprobs_mode == LogprobsMode::raw_logprobs || logprobs_mode == LogprobsMode::raw_logits;
  }
  // Whether step 8 reads the working row (processed modes); raw modes read the caller's row.
  bool logprobs_read_working_row() const { return needs_logprobs() && !raw_mode(); }
  bool logprob_values() const {  // log_softmax of the tensor, not the tensor itself
    return logprobs_mode == LogprobsMode::raw_logprobs ||
           logprobs_mode == LogprobsMode::processed_logprobs;
  }
  // Whether step 8 needs the softmax terms of the caller's row (raw_logprobs asked): a read of
  // that row may learn them on the way (RawRowSummary).
  bool needs_raw_softmax() const { return needs_logprobs() && raw_mode() && logprob_values(); }
};

// Requires a validated batch.
BatchPlan plan_batch(const Batch& batch, int64_t vocab_size, LogprobsMode default_mode);

}  // namespace lastmile::detail
