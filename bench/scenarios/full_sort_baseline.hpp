// lastmile bench — the baseline: vLLM's CPU path re-told plainly in C++ (forward_native): dense
// bincount penalties, a full-vocabulary sort for top-k / top-p, softmax and an exponential race
// over every token, log_softmax + top-N for logprobs. Same semantics as lastmile; the speed of
// doing it the tensor way, row by row.
#pragma once

#include <cstdint>
#include <vector>

#include "lastmile/batch.hpp"
#include "lastmile/logits_view.hpp"

namespace lastmile::bench {

struct BaselineScratch {
  std::vector<float> row, sorted;
  std::vector<int32_t> order, counts;
  std::vector<uint8_t> in_prompt;
  std::vector<double> noise;
};

// Samples row `row` of `logits` for `request`; returns the token. `num_logprobs` >= 0 also
// computes log_softmax, the top-N and the sampled token's rank (discarded: timing only).
int32_t baseline_sample_row(const LogitsView& logits, int64_t row, const BatchRequest& request,
                            int num_logprobs, uint64_t seed, BaselineScratch& scratch);

}  // namespace lastmile::bench
