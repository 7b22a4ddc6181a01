// Step 8 — logprobs (spec §3, §4, §5; vLLM gather_logprobs, gather_specific_token_logprobs).
// Everything is read from the active mode's values: in raw modes the caller's row through step
// 1's map (no row is written unless the full matrix is asked: it is computed in the output and
// read there), in processed modes the working row (log_softmax'ed in place for
// processed_logprobs; sampling is done with it).
// Outputs: the full row (num_logprobs -1); the sampled token, top-N and the sampled token's rank
// (count of entries >=); and, beside them rather than instead (a deliberate difference from vLLM),
// the explicit logprob_token_ids with id 0 / -inf / invalid padding to the batch's width.
#include <algorithm>

#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

// The active mode's values: a float32 row of them, or (row null) the caller's row mapped.
struct ActiveValues {
  const RowStep& step;
  const float* row = nullptr;
  RawValues raw;

  float at(TokenId id) const {
    if (row != nullptr) return row[id];
    float x = 0;
    const auto* src = static_cast<const char*>(step.input_row());
    step.backend.convert_row(src + static_cast<size_t>(id) * element_size(step.input.dtype),
                             step.input.dtype, &x, 1);
    return raw(x);
  }
  int64_t rank_of(TokenId id) const {
    if (row != nullptr) return step.backend.rank_of(row, step.vocab_size(), id);
    return step.backend.input_rank_of(step.input_row(), step.input.dtype, step.vocab_size(), raw,
                                      id);
  }
  void top_n(int64_t k, TokenId* ids, float* values) const {
    if (row != nullptr)
      return step.backend.top_n(row, step.vocab_size(), k, ids, values, step.scratch.sort());
    step.backend.input_top_n(step.input_row(), step.input.dtype, step.vocab_size(), raw, k, ids,
                             values, step.scratch.sort());
  }
};

ActiveValues active_values(RowStep& row) {
  const int64_t vocab = row.vocab_size();
  float* const full = row.plan.num_logprobs == -1 ? row.out.full.data() + row.row * vocab : nullptr;
  if (!row.plan.raw_mode()) {
    if (row.plan.logprob_values()) row.backend.log_softmax(row.logits.data(), vocab);
    if (full != nullptr) std::copy(row.logits.begin(), row.logits.end(), full);
    return {row, row.logits.data(), {}};
  }
  if (full == nullptr) return {row, nullptr, raw_values(row)};
  row.backend.convert_row(row.input_row(), row.input.dtype, full, vocab);  // checked before
  if (row.plan.logprob_values()) row.backend.log_softmax(full, vocab);
  return {row, full, {}};
}

void gather_top_n(RowStep& row, const ActiveValues& active, int64_t rank) {
  OutputBuffers& out = row.out;
  const int64_t width = out.top_width;
  TokenId* ids = out.top_ids.data() + row.row * width;
  float* values = out.top_logprobs.data() + row.row * width;
  ids[0] = row.sampled_token;
  values[0] = active.at(row.sampled_token);
  active.top_n(width - 1, ids + 1, values + 1);
  out.top_ranks[row.row] = rank;
}

void gather_token_ids(RowStep& row, const ActiveValues& active, int64_t rank) {
  OutputBuffers& out = row.out;
  const int64_t width = out.token_width;
  TokenId* ids = out.token_ids.data() + row.row * width;
  float* values = out.token_logprobs.data() + row.row * width;
  uint8_t* valid = out.token_valid.data() + row.row * width;
  std::fill(ids, ids + width, 0);
  std::fill(values, values + width, kNegInf);
  std::fill(valid, valid + width, uint8_t{0});
  ids[0] = row.sampled_token;
  values[0] = active.at(row.sampled_token);
  valid[0] = 1;
  if (const auto& list = row.params().logprob_token_ids) {
    for (size_t i = 0; i < list->size(); ++i) {
      ids[i + 1] = (*list)[i];
      values[i + 1] = active.at((*list)[i]);
      valid[i + 1] = 1;
    }
  }
  out.token_ranks[row.row] = rank;
}

}  // namespace

void gather_logprobs(RowStep& row) {
  if (!row.plan.needs_logprobs()) return;
  const ActiveValues active = active_values(row);
  if (row.out.top_width == 0 && row.out.token_width == 0) return;
  const int64_t rank = active.rank_of(row.sampled_token);
  if (row.out.top_width) gather_top_n(row, active, rank);
  if (row.out.token_width) gather_token_ids(row, active, rank);
}

}  // namespace lastmile::detail
