// Step 1 — raw logprob modes (spec §2.1 step 1, §3.1; vLLM Sampler.forward).
// For raw_logprobs / raw_logits the active tensor is taken before any step edits the row: a copy
// of the float32 working row, log_softmax'ed in raw_logprobs mode. It runs right after step 2,
// whose widening is exact, so the copy equals the input's float32 view while the row is still in
// cache (one read of the caller's logits, not two). Skipped when no logprobs are asked, or the
// mode is processed (step 8 then reads the working row).
#include <algorithm>

#include "pipeline/steps.hpp"

namespace lastmile::detail {

void capture_raw_logprobs(RowStep& row) {
  if (!row.plan.needs_logprobs() || !row.plan.raw_mode()) return;
  std::copy(row.logits.begin(), row.logits.end(), row.raw.begin());
  if (row.plan.logprob_values()) row.backend.log_softmax(row.raw.data(), row.vocab_size());
}

}  // namespace lastmile::detail
