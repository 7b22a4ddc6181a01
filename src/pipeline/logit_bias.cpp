// Step 5b — logit_bias (spec §6.4; vLLM LogitBiasLogitsProcessor, argmax-changing).
// A float32 add per listed id, after min_tokens, so a banned stop token stays -inf. Values are
// not clamped (vLLM clamps to +-100 only in its OpenAI front end).
#include <limits>

#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_logit_bias(RowStep& row) {
  for (const auto& [token_id, bias] : row.params().logit_bias) {
    row.logits[token_id] += bias;
    if (row.logits[token_id] == std::numeric_limits<float>::infinity())
      row.record_bad_value(token_id, "logit_bias");  // finite + finite overflowed
  }
}

}  // namespace lastmile::detail
