// Step 4 — bad-word sequences (spec §6.2; vLLM ops/bad_words.py).
// A sequence of length L bans its last token when its first L-1 tokens equal the last L-1 tokens
// of the history (output, plus drafts when predicting the bonus token). The prompt is never
// consulted; single-token words are always banned.
#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

bool prefix_matches(const std::vector<TokenId>& word, const History& history) {
  const size_t prefix = word.size() - 1;
  if (prefix > history.size()) return false;  // L > len(h) + 1: cannot complete
  const size_t start = history.size() - prefix;
  for (size_t i = 0; i < prefix; ++i)
    if (history[start + i] != word[i]) return false;
  return true;
}

}  // namespace

void apply_bad_words(RowStep& row) {
  const auto& words = row.params().bad_words_token_ids;
  if (words.empty()) return;
  const History history = row.history();
  for (const std::vector<TokenId>& word : words)
    if (prefix_matches(word, history)) row.logits[word.back()] = kNegInf;
}

}  // namespace lastmile::detail
