// Step 6 — repetition, frequency and presence penalties (spec §7; vLLM ops/penalties.py).
// In place on the float32 row. Repetition applies to every token of the prompt or history;
// frequency and presence to the history only (output, plus drafts when predicting the bonus
// token, §7.4). Per token the order is repetition, frequency, presence, as in the reference.
// Seen tokens are a bitmap: kept by a RequestBatch (updated per new token), or built here in
// O(H) in the worker's scratch and cleared again. Repetition is one dense SIMD pass over the
// bitmap when the history is long, else a sparse walk; frequency and presence touch the distinct
// history tokens, counted with a token index over the history alone. Repetition is usually
// applied by step 2 already, while converting the row (float32_view.cpp). Rows with neutral
// penalties are exact identities and skipped; the step is skipped when no row has penalties (vLLM's
// no_penalties).
#include <algorithm>
#include <limits>

#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

bool test_and_clear(std::vector<uint64_t>& bits, TokenId id) {
  uint64_t& word = bits[static_cast<size_t>(id) / 64];
  const uint64_t bit = uint64_t{1} << (id % 64);
  const bool was_set = (word & bit) != 0;
  word &= ~bit;
  return was_set;
}

// Repetition from the batch's prompt and history: the bitmap is built, used and left all zero.
void apply_repetition_from_batch(RowStep& row, float repetition_penalty) {
  std::vector<uint64_t>& seen = row.scratch.seen;
  const History history = row.history();
  row.mark_prompt_and_history(true);
  const size_t tokens = row.request.prompt_token_ids.size() + history.size();
  if (tokens * 16 >= static_cast<size_t>(row.vocab_size())) {  // dense: one pass, then clear
    row.record_bad_value(row.backend.apply_repetition_dense(row.logits.data(), row.vocab_size(),
                                                            seen.data(), repetition_penalty),
                         "repetition_penalty");
    row.mark_prompt_and_history(false);
    return;
  }
  // Sparse: the distinct tokens (each bit cleared on its first visit) through the backend's
  // penalty with frequency and presence 0, then the lowest id made +inf, as the dense pass and a
  // RequestBatch's kept bitmap name it.
  std::vector<TokenCount>& distinct = row.scratch.token_counts;
  distinct.clear();
  const auto visit = [&](TokenId id) {
    if (test_and_clear(seen, id)) distinct.push_back({id, 0, true});
  };
  for (TokenId id : row.request.prompt_token_ids) visit(id);
  for (size_t i = 0; i < history.size(); ++i) visit(history[i]);
  row.backend.apply_penalties(row.logits.data(), distinct, repetition_penalty, 0.0f, 0.0f);
  TokenId lowest = -1;
  for (const TokenCount& c : distinct)
    if (row.logits[c.token_id] == kInf && (lowest < 0 || c.token_id < lowest)) lowest = c.token_id;
  row.record_bad_value(lowest, "repetition_penalty");
}

}  // namespace

void apply_penalties(RowStep& row) {
  if (!row.plan.any_penalties) return;
  const RequestParams& p = row.params();
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)
    return;
  if (p.repetition_penalty != 1.0f && !row.repetition_applied) {
    if (row.has_kept_counts)
      row.record_bad_value(
          row.backend.apply_repetition_dense(row.logits.data(), row.vocab_size(),
                                             row.kept_seen.data(), p.repetition_penalty),
          "repetition_penalty");
    else
      apply_repetition_from_batch(row, p.repetition_penalty);
  }
  if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  // A repetition factor of 1 is an exact identity: frequency and presence alone.
  const std::span<const TokenCount> counts =
      row.has_kept_counts ? row.kept_output_counts : row.count_history();
  row.backend.apply_penalties(row.logits.data(), counts, 1.0f, p.frequency_penalty,
                              p.presence_penalty);
}

}  // namespace lastmile::detail
