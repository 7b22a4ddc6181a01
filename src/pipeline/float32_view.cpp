// Step 2 — the float32 working row (spec §2.1 step 2).
// fp16 / bf16 widen exactly. Unlike vLLM, the caller's logits are never edited: the working row
// is ours. A NaN or +inf is recorded and the row stops here; the sampler reports it by row.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

bool convert_to_float32(RowStep& row) {
  row.failure.token_id = row.backend.convert_row(row.input_row(), row.input.dtype,
                                                 row.logits.data(), row.vocab_size());
  return !row.failed();
}

}  // namespace lastmile::detail
