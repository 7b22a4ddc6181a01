// Step 7c — min_p (spec §6.5; vLLM MinPLogitsProcessor, argmax-invariant).
// After temperature: tokens with probability strictly below min_p times the top probability are
// masked. Rows with min_p = 0 are identities and skipped.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_min_p(RowStep& row) {
  if (row.sampling.min_p <= 0.0f) return;
  row.backend.apply_min_p(row.logits.data(), row.vocab_size(), row.sampling.min_p);
}

}  // namespace lastmile::detail
