// Step 5a — min_tokens (spec §6.3; vLLM MinTokensLogitsProcessor, argmax-changing).
// While fewer than min_tokens tokens are generated, every stop token id is -inf. Committed output
// only: drafts never count here, even when predicting the bonus token.
#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_min_tokens(RowStep& row) {
  const RequestParams& p = row.params();
  if (static_cast<int64_t>(row.request.output_token_ids.size()) >= p.min_tokens) return;
  for (TokenId id : p.stop_token_ids) row.logits[id] = kNegInf;
}

}  // namespace lastmile::detail
