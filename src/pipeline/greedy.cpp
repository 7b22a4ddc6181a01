// Step 7a — greedy argmax (spec §7a, §8.1), on the step-6 logits before temperature.
// Lowest index among equal maxima (PyTorch's argmax), computed for greedy rows only. A greedy
// row that steps 3-6 leave alone and whose working row no logprob reads (none asked, or a raw
// mode) takes its argmax straight from the caller's float32 row: steps 2-7a in one checked read
// (split as the row allows), the same token.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void take_greedy_token(RowStep& row) {
  row.greedy_token = row.backend.row_argmax(row.logits.data(), row.vocab_size());
}

bool take_greedy_token_from_input(RowStep& row) {
  if (!row.sampling.greedy || row.input.dtype != DType::f32 || row.logprobs_read_working_row() ||
      row.edited_before_sampling())
    return false;
  int64_t first_bad = -1;
  row.greedy_token = row.backend.argmax_checked(static_cast<const float*>(row.input_row()),
                                                row.vocab_size(), &first_bad, row.split);
  row.failure.token_id = first_bad;
  row.sampled_token = row.greedy_token;
  return true;
}

}  // namespace lastmile::detail
