// Step 1 — raw logprob modes (spec §2.1 step 1, §3.1; vLLM Sampler.forward).
// For raw_logprobs / raw_logits the active tensor is taken from the input before any step edits
// the row: a float32 copy, log_softmax'ed in raw_logprobs mode. Skipped when no logprobs are
// asked, or the mode is processed (step 8 then reads the working row).
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void capture_raw_logprobs(RowStep& row) {
  if (!row.plan.needs_logprobs() || !row.plan.raw_mode()) return;
  row.backend.convert_row(row.input_row(), row.input.dtype, row.raw.data(), row.vocab_size());
  if (row.plan.logprob_values()) row.backend.log_softmax(row.raw.data(), row.vocab_size());
}

}  // namespace lastmile::detail
