// Steps 5c and 7c — custom logits processors (spec §6.6), in SamplerConfig order: argmax-changing
// ones after logit_bias, argmax-invariant ones after min_p (sampled batches only).
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_custom_processors(RowStep& row, bool argmax_invariant) {
  if (row.plan.processors.empty()) return;
  const ProcessorRow view{row.row, &row.params(), row.request.prompt_token_ids,
                          row.request.output_token_ids};
  for (const auto& processor : row.plan.processors)
    if (processor->is_argmax_invariant() == argmax_invariant) processor->apply(view, row.logits);
  row.record_bad_value(row.backend.find_nan_or_inf(row.logits.data(), row.vocab_size()),
                       "a custom logits processor");
}

}  // namespace lastmile::detail
