// Step 7a — greedy argmax (spec §7a, §8.1), on the step-6 logits before temperature.
// Lowest index among equal maxima (PyTorch's argmax). Skipped for all-random batches.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void take_greedy_token(RowStep& row) {
  row.greedy_token = row.backend.row_argmax(row.logits.data(), row.vocab_size());
}

}  // namespace lastmile::detail
