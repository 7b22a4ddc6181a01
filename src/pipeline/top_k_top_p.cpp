// Step 7d — top-k and top-p masking (spec §9.2-9.4; vLLM apply_top_k_top_p, PyTorch path).
// Top-p runs on every row once any row of the batch uses it: with p = 1 it still masks tokens
// whose float32 probability underflows to 0 (§9.3), which processed logprobs show.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_top_k_top_p(RowStep& row) {
  row.scratch.listed_survivors = kNotListed;
  const bool top_k = row.sampling.top_k < row.vocab_size();
  if (!top_k && !row.plan.any_top_p) return;
  row.scratch.listed_survivors =
      row.backend.apply_top_k_top_p(row.logits.data(), row.vocab_size(), row.sampling.top_k,
                                    row.plan.any_top_p, row.sampling.top_p, row.scratch.sort());
}

}  // namespace lastmile::detail
