// Step 7 — sampling (spec §8, §9; vLLM Sampler.sample).
// Greedy argmax on the penalised logits; then, unless the whole batch is greedy: temperature,
// argmax-invariant processors (min_p, custom), top-k / top-p, the seeded draw, and the merge that
// gives greedy rows their argmax. The working row ends as vLLM's processed_logits.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void sample_tokens(RowStep& row) {
  // vLLM argmaxes every row of a batch that is not all random and merges; only greedy rows keep
  // the argmax, so only they compute it.
  if (row.sampling.greedy) take_greedy_token(row);
  // A greedy row has its token; steps 7b-e matter for it only through processed logprobs.
  if (row.plan.all_greedy || (row.sampling.greedy && !row.logprobs_read_working_row())) {
    row.sampled_token = row.greedy_token;
    return;
  }
  if (draw_token_from_working_row(row)) return;            // 7b-e with no processed row to keep
  const bool drawn = draw_token_as_without_logprobs(row);  // the token as without logprobs
  apply_temperature(row);
  if (row.failed()) return;  // overflowed to +inf: reported after the batch
  apply_min_p(row);
  apply_custom_processors(row, /*argmax_invariant=*/true);
  if (row.failed()) return;
  apply_top_k_top_p(row);
  if (!drawn) draw_token(row);
}

}  // namespace lastmile::detail
