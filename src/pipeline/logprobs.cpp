// Step 8 — logprobs (spec §3, §4, §5; vLLM gather_logprobs, gather_specific_token_logprobs).
// Everything is read from the active mode's values: in raw modes the caller's row, read in place
// by step 1's backend call (no row is written unless the full matrix is asked: it is the same
// map, written to the output), in processed modes the working row (log_softmax'ed in place for
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
};

// The processed working row, log_softmax'ed in place for processed_logprobs, copied to the full
// matrix when asked.
const float* processed_row(RowStep& row) {
  if (row.plan.logprob_values()) row.backend.log_softmax(row.logits.data(), row.vocab_size());
  if (row.plan.num_logprobs == -1)
    std::copy(row.logits.begin(), row.logits.end(),
              row.out.full.data() + row.row * row.vocab_size());
  return row.logits.data();
}

// The raw full matrix row: the caller's row through the map every other raw read uses.
void write_raw_row(RowStep& row, RawValues values) {
  float* const full = row.out.full.data() + row.row * row.vocab_size();
  row.backend.convert_row(row.input_row(), row.input.dtype, full, row.vocab_size());  // checked
  for (int64_t i = 0; i < row.vocab_size(); ++i) full[i] = values(full[i]);
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
  OutputBuffers& out = row.out;
  // Top-N: the sampled token first, then the k largest.
  const int64_t k = out.top_width > 0 ? out.top_width - 1 : 0;
  TokenId* top_ids = out.top_width > 0 ? out.top_ids.data() + row.row * out.top_width : nullptr;
  float* top_values =
      out.top_width > 0 ? out.top_logprobs.data() + row.row * out.top_width : nullptr;
  ActiveValues active{row, nullptr, {}};
  int64_t rank = 0;
  if (row.plan.raw_mode()) {  // one read of the caller's row answers the map, rank and top-N
    const RawLogprobs raw =
        read_raw_logprobs(row, k, k > 0 ? top_ids + 1 : nullptr, k > 0 ? top_values + 1 : nullptr);
    active.raw = raw.values;
    rank = raw.rank;
    if (row.plan.num_logprobs == -1) write_raw_row(row, raw.values);
  } else {
    active.row = processed_row(row);
    if (out.top_width == 0 && out.token_width == 0) return;
    rank = row.backend.rank_of(active.row, row.vocab_size(), row.sampled_token);
    if (k > 0)
      row.backend.top_n(active.row, row.vocab_size(), k, top_ids + 1, top_values + 1,
                        row.scratch.sort());
  }
  if (top_ids != nullptr) {
    top_ids[0] = row.sampled_token;
    top_values[0] = active.at(row.sampled_token);
    out.top_ranks[row.row] = rank;
  }
  if (out.token_width) gather_token_ids(row, active, rank);
}

}  // namespace lastmile::detail
