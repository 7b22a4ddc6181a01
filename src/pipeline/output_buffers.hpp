// lastmile — the sampler's output storage: grow-only buffers that SamplerOutput's spans view.
#pragma once

#include <cstdint>
#include <vector>

#include "lastmile/output.hpp"
#include "pipeline/batch_plan.hpp"

namespace lastmile::detail {

struct OutputBuffers {
  std::vector<TokenId> sampled;
  std::vector<TokenId> top_ids;
  std::vector<float> top_logprobs;
  std::vector<int64_t> top_ranks;
  std::vector<TokenId> token_ids;
  std::vector<float> token_logprobs;
  std::vector<uint8_t> token_valid;
  std::vector<int64_t> token_ranks;
  std::vector<float> full;
  SamplerOutput output;

  int64_t top_width = 0;    // num_logprobs + 1, or 0
  int64_t token_width = 0;  // plan.token_logprobs_width

  // Sizes the buffers for the plan (allocating only when they must grow).
  void prepare(const BatchPlan& plan);
  // Points the output's spans at the buffers.
  const SamplerOutput& finish(const BatchPlan& plan);
};

}  // namespace lastmile::detail
