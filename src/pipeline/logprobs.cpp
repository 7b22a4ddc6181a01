// Step 8 — logprobs (spec §3, §4, §5; vLLM gather_logprobs, gather_specific_token_logprobs).
// Everything is read from the active mode's row: the raw snapshot of step 1, or the processed
// working row (log_softmax'ed in place for processed_logprobs; sampling is done with it).
// Outputs: the full row (num_logprobs -1); the sampled token, top-N and the sampled token's rank
// (count of entries >=); and, beside them rather than instead (a deliberate difference from vLLM),
// the explicit logprob_token_ids with id 0 / -inf / invalid padding to the batch's width.
#include <algorithm>

#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

float* active_row(RowStep& row) {
  if (row.plan.raw_mode()) return row.raw.data();
  if (row.plan.logprob_values()) row.backend.log_softmax(row.logits.data(), row.vocab_size());
  return row.logits.data();
}

void gather_top_n(RowStep& row, const float* active, int64_t rank) {
  OutputBuffers& out = row.out;
  const int64_t width = out.top_width;
  TokenId* ids = out.top_ids.data() + row.row * width;
  float* values = out.top_logprobs.data() + row.row * width;
  ids[0] = row.sampled_token;
  values[0] = active[row.sampled_token];
  row.backend.top_n(active, row.vocab_size(), width - 1, ids + 1, values + 1, row.scratch.sort());
  out.top_ranks[row.row] = rank;
}

void gather_token_ids(RowStep& row, const float* active, int64_t rank) {
  OutputBuffers& out = row.out;
  const int64_t width = out.token_width;
  TokenId* ids = out.token_ids.data() + row.row * width;
  float* values = out.token_logprobs.data() + row.row * width;
  uint8_t* valid = out.token_valid.data() + row.row * width;
  std::fill(ids, ids + width, 0);
  std::fill(values, values + width, kNegInf);
  std::fill(valid, valid + width, uint8_t{0});
  ids[0] = row.sampled_token;
  values[0] = active[row.sampled_token];
  valid[0] = 1;
  if (const auto& list = row.params().logprob_token_ids) {
    for (size_t i = 0; i < list->size(); ++i) {
      ids[i + 1] = (*list)[i];
      values[i + 1] = active[(*list)[i]];
      valid[i + 1] = 1;
    }
  }
  out.token_ranks[row.row] = rank;
}

}  // namespace

void gather_logprobs(RowStep& row) {
  if (!row.plan.needs_logprobs()) return;
  const float* active = active_row(row);
  const int64_t vocab = row.vocab_size();
  if (row.plan.num_logprobs == -1)
    std::copy(active, active + vocab, row.out.full.data() + row.row * vocab);
  if (row.out.top_width == 0 && row.out.token_width == 0) return;
  const int64_t rank = row.backend.rank_of(active, vocab, row.sampled_token);
  if (row.out.top_width) gather_top_n(row, active, rank);
  if (row.out.token_width) gather_token_ids(row, active, rank);
}

}  // namespace lastmile::detail
