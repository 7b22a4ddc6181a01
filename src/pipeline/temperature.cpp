// Step 7b — temperature (spec §8.1; vLLM apply_temperature).
// Each row divided by its temperature; greedy rows (temperature < 1e-5) by 1, an exact identity
// we skip. Step 2 may have divided the row already (float32_view.cpp). A small temperature can
// overflow large logits to +inf: the row fails (never sampled from NaN probabilities, as vLLM
// would).
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_temperature(RowStep& row) {
  if (row.sampling.greedy || row.sampling.temperature == 1.0f || row.divided_by_temperature) return;
  row.record_bad_value(
      row.backend.divide(row.logits.data(), row.vocab_size(), row.sampling.temperature),
      "temperature");
}

}  // namespace lastmile::detail
