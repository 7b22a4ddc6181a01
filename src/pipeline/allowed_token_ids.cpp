// Step 3 — the allowed-token whitelist (spec §6.1; vLLM allowed_token_ids_mask, True = forbidden).
// Every id outside the request's list becomes -inf. Rows without a list are untouched.
#include <algorithm>

#include "pipeline/steps.hpp"

namespace lastmile::detail {

void apply_allowed_token_ids(RowStep& row) {
  const auto& allowed = row.params().allowed_token_ids;
  if (!allowed) return;
  // Keep the listed values aside, mask the row, put them back: O(V + list), duplicates harmless.
  std::vector<float>& saved = row.scratch.saved;
  saved.resize(allowed->size());
  for (size_t i = 0; i < allowed->size(); ++i) saved[i] = row.logits[(*allowed)[i]];
  std::fill(row.logits.begin(), row.logits.end(), kNegInf);
  for (size_t i = 0; i < allowed->size(); ++i) row.logits[(*allowed)[i]] = saved[i];
}

}  // namespace lastmile::detail
