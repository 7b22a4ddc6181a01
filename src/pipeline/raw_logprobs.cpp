// Step 1 — raw logprob modes (spec §2.1 step 1, §3.1; vLLM Sampler.forward).
// vLLM takes raw_logprobs / raw_logits before any step edits the logits. Here no step edits the
// caller's row (step 2 widens it into a working row of our own), so the caller's row is that
// tensor: no snapshot is copied. Step 8 reads it through the backend, in place: the map of the
// float32 view to the mode's values (log_softmax's terms, or the identity for raw_logits), the
// sampled token's rank and the top-N. What step 2 learned of the row while converting it
// (raw_logprobs' softmax terms, read once for both) is passed along.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

RawLogprobs read_raw_logprobs(RowStep& row, int64_t k, TokenId* ids, float* values) {
  return row.backend.input_raw_logprobs(
      row.input_row(), row.input.dtype, row.vocab_size(), row.plan.logprob_values(),
      row.sampled_token, k, ids, values, row.scratch.sort(), &row.scratch.raw_summary, row.split);
}

}  // namespace lastmile::detail
