// lastmile — plan_batch: the batch flags of spec §1.3, from validated requests.
#include "pipeline/batch_plan.hpp"

#include <algorithm>

namespace lastmile::detail {

BatchPlan plan_batch(const Batch& batch, int64_t vocab_size, LogprobsMode default_mode) {
  BatchPlan plan;
  plan.num_rows = static_cast<int64_t>(batch.requests.size());
  plan.vocab_size = vocab_size;
  plan.logprobs_mode = batch.logprobs_mode.value_or(default_mode);
  plan.num_logprobs = batch.num_logprobs;
  plan.predict_bonus_token = batch.predict_bonus_token;
  plan.all_greedy = plan.all_random = true;
  int64_t longest_token_list = -1;
  bool derive_num_logprobs = !batch.num_logprobs.has_value();
  for (const BatchRequest& request : batch.requests) {
    const RequestParams& p = request.params;
    const bool greedy = p.is_greedy();  // greedy rows switch top-k, top-p and min-p off (§12.1)
    plan.all_greedy = plan.all_greedy && greedy;
    plan.all_random = plan.all_random && !greedy;
    plan.any_top_k = plan.any_top_k || (!greedy && p.top_k > 0 && p.top_k < vocab_size);
    plan.any_top_p = plan.any_top_p || (!greedy && p.top_p < 1.0f);
    plan.any_min_p = plan.any_min_p || (!greedy && p.min_p > 0.0f);
    plan.any_penalties = plan.any_penalties || p.presence_penalty != 0.0f ||
                         p.frequency_penalty != 0.0f || p.repetition_penalty != 1.0f;
    if (p.logprob_token_ids)
      longest_token_list =
          std::max(longest_token_list, static_cast<int64_t>(p.logprob_token_ids->size()));
    if (derive_num_logprobs && p.logprobs) {
      // A request's -1 means every token, top-N with N = vocab_size (spec §1.3 step 6); only a
      // batch-level -1 asks for the unsorted full matrix.
      const int32_t n = *p.logprobs == -1 ? static_cast<int32_t>(vocab_size) : *p.logprobs;
      plan.num_logprobs = std::max(plan.num_logprobs.value_or(0), n);
    }
  }
  plan.token_logprobs_width = longest_token_list + 1;
  return plan;
}

}  // namespace lastmile::detail
