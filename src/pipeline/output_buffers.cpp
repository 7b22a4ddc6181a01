// lastmile — OutputBuffers: sizing before the rows run, the SamplerOutput view after.
#include "pipeline/output_buffers.hpp"

namespace lastmile::detail {

void OutputBuffers::prepare(const BatchPlan& plan) {
  const int64_t rows = plan.num_rows;
  top_width = plan.num_logprobs && *plan.num_logprobs >= 0 ? *plan.num_logprobs + 1 : 0;
  token_width = plan.token_logprobs_width;
  sampled.resize(rows);
  top_ids.resize(rows * top_width);
  top_logprobs.resize(rows * top_width);
  top_ranks.resize(top_width ? rows : 0);
  token_ids.resize(rows * token_width);
  token_logprobs.resize(rows * token_width);
  token_valid.resize(rows * token_width);
  token_ranks.resize(token_width ? rows : 0);
  full.resize(plan.num_logprobs == -1 ? rows * plan.vocab_size : 0);
}

const SamplerOutput& OutputBuffers::finish(const BatchPlan& plan) {
  output = SamplerOutput{};
  output.num_rows = plan.num_rows;
  output.sampled_token_ids = sampled;
  if (top_width) output.logprobs = {top_width, top_ids, top_logprobs, top_ranks};
  if (token_width) {
    output.token_logprobs.width = token_width;
    output.token_logprobs.token_ids = token_ids;
    output.token_logprobs.logprobs = token_logprobs;
    output.token_logprobs.ranks = token_ranks;
    output.token_logprobs.valid = token_valid;
  }
  output.full_logprobs = full;
  output.has_full_logprobs = plan.num_logprobs == -1;
  return output;
}

}  // namespace lastmile::detail
