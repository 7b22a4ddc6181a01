// Step 2 — the float32 working row (spec §2.1 step 2).
// fp16 / bf16 widen exactly. Unlike vLLM, the caller's logits are never edited: the working row
// is ours. A NaN or +inf is recorded and the row stops here; the sampler reports it by row.
// A random row that steps 3-6 leave alone is divided by its temperature (step 7b) in the same
// pass: the same bits, one read of the row (raw modes read the caller's row, not this one).
#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

bool temperature_folds_into_conversion(const RowStep& row) {
  return !row.sampling.greedy && row.sampling.temperature != 1.0f && !row.edited_before_sampling();
}

}  // namespace

bool convert_to_float32(RowStep& row) {
  if (temperature_folds_into_conversion(row)) {
    row.divided_by_temperature =
        row.backend.convert_row_divided(row.input_row(), row.input.dtype, row.logits.data(),
                                        row.vocab_size(), row.sampling.temperature) < 0;
    if (row.divided_by_temperature) return true;
    // NaN / +inf: in the input, or made by the division? The steps apart tell, as they report.
  }
  row.failure.token_id = row.backend.convert_row(row.input_row(), row.input.dtype,
                                                 row.logits.data(), row.vocab_size());
  return !row.failed();
}

}  // namespace lastmile::detail
