// Step 1 — raw logprob modes (spec §2.1 step 1, §3.1; vLLM Sampler.forward).
// vLLM takes raw_logprobs / raw_logits before any step edits the logits. Here no step edits the
// caller's row (step 2 widens it into a working row of our own), so the caller's row is that
// tensor: no snapshot is copied. Its values are a map of the float32 view, read by step 8 where
// it asks: log_softmax's max and log-sum in raw_logprobs mode, the logits themselves in
// raw_logits mode.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

RawValues raw_values(const RowStep& row) {
  if (!row.plan.logprob_values()) return {};  // raw_logits: x - 0 - 0 is x
  return row.backend.input_log_softmax(row.input_row(), row.input.dtype, row.vocab_size());
}

}  // namespace lastmile::detail
