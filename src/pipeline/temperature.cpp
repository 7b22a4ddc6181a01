// Step 7b — temperature (spec §8.1; vLLM apply_temperature).
// Each row divided by its temperature; greedy rows (temperature < 1e-5) by 1, an exact identity
// we skip.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_temperature(RowStep& row) {
  if (row.sampling.greedy || row.sampling.temperature == 1.0f) return;
  row.backend.divide(row.logits.data(), row.vocab_size(), row.sampling.temperature);
}

}  // namespace lastmile::detail
