// Step 6 — repetition, frequency and presence penalties (spec §7; vLLM ops/penalties.py).
// In place on the float32 row, sparse: only tokens of the prompt or history are touched. Repetition
// uses prompt and history; frequency and presence the history only (output, plus drafts when
// predicting the bonus token, §7.4). A RequestBatch keeps a bitmap of seen tokens and the output
// counts (repetition then runs as one dense pass); otherwise counts come from the batch in
// O(H log H). Rows with neutral penalties are exact identities
// and skipped; the whole step is skipped when no row has penalties (vLLM's no_penalties).
#include <algorithm>
#include <limits>

#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

std::span<const TokenCount> count_tokens(RowStep& row) {
  std::vector<int64_t>& keys = row.scratch.history_keys;
  keys.clear();
  for (TokenId id : row.request.prompt_token_ids) keys.push_back(int64_t{id} * 2);
  const History history = row.history();
  for (size_t i = 0; i < history.size(); ++i) keys.push_back(int64_t{history[i]} * 2 + 1);
  std::sort(keys.begin(), keys.end());
  std::vector<TokenCount>& counts = row.scratch.token_counts;
  counts.clear();
  for (int64_t key : keys) {
    const auto id = static_cast<TokenId>(key / 2);
    if (counts.empty() || counts.back().token_id != id) counts.push_back({id, 0, false});
    if (key % 2)
      ++counts.back().output_count;
    else
      counts.back().in_prompt = true;
  }
  return counts;
}

// A RequestBatch's state: repetition as one dense pass over the bitmap of seen tokens (a long
// prompt costs no scattered reads), then frequency and presence on the distinct output tokens
// (a repetition factor of 1 there is an exact identity). Per token, the same operations in the
// same order as the sparse path.
void apply_kept_penalties(RowStep& row) {
  const RequestParams& p = row.params();
  if (p.repetition_penalty != 1.0f)
    row.record_bad_value(
        row.backend.apply_repetition_dense(row.logits.data(), row.vocab_size(),
                                           row.kept_seen.data(), p.repetition_penalty),
        "repetition_penalty");
  if (p.frequency_penalty != 0.0f || p.presence_penalty != 0.0f)
    row.backend.apply_penalties(row.logits.data(), row.kept_output_counts, 1.0f,
                                p.frequency_penalty, p.presence_penalty);
}

}  // namespace

void apply_penalties(RowStep& row) {
  if (!row.plan.any_penalties) return;
  const RequestParams& p = row.params();
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)
    return;
  if (row.has_kept_counts) return apply_kept_penalties(row);
  const std::span<const TokenCount> counts = count_tokens(row);
  row.backend.apply_penalties(row.logits.data(), counts, p.repetition_penalty, p.frequency_penalty,
                              p.presence_penalty);
  // Only a repetition_penalty < 1 can raise a finite logit to +inf (frequency and presence
  // terms are too small to reach it), and only at the touched tokens.
  if (p.repetition_penalty < 1.0f)
    for (const TokenCount& c : counts)
      if (row.logits[c.token_id] == std::numeric_limits<float>::infinity()) {
        row.record_bad_value(c.token_id, "repetition_penalty");
        return;
      }
}

}  // namespace lastmile::detail
