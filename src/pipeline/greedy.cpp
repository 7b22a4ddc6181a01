// Step 7a — greedy argmax (spec §7a, §8.1), on the step-6 logits before temperature.
// Lowest index among equal maxima (PyTorch's argmax), computed for greedy rows only. A greedy
// row that steps 3-6 leave alone and whose working row no logprob reads (none asked, or a raw
// mode) takes its argmax straight from the caller's float32 row: steps 2-7a in one checked read
// (split as the row allows), the same token. A greedy row whose caller's row was summarised for
// raw logprobs, and whose steps 3-6 only lower entries, reads only the blocks of its working row
// whose caller's max could still hold the argmax (usually one).
#include <algorithm>
#include <limits>
#include <numeric>

#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

// Whether no working-row entry exceeds the caller's: every penalty lowers (repetition >= 1 scales
// toward -inf on either sign, frequency and presence >= 0 subtract) and nothing else raises one
// (steps 3-4 and min_tokens only mask to -inf; a logit bias or a processor may raise).
bool working_row_bounded_by_callers(const RowStep& row) {
  const RequestParams& p = row.params();
  return row.scratch.raw_summary.known && p.logit_bias.empty() && row.plan.processors.empty() &&
         p.repetition_penalty >= 1.0f && p.frequency_penalty >= 0.0f && p.presence_penalty >= 0.0f;
}

// row_argmax of x, given that no entry of block b exceeds bounds.max[b]: blocks by descending
// bound (lower ids first among equals), each read only if it could still hold a larger entry, or
// an equal one at a lower id. The same token as one read of the whole row.
TokenId argmax_within_bounds(const Backend& backend, const float* x, int64_t n,
                             const BlockMaxima& bounds) {
  uint16_t order[BlockMaxima::kMaxBlocks];
  std::iota(order, order + bounds.blocks, uint16_t{0});
  std::sort(order, order + bounds.blocks, [&](uint16_t a, uint16_t b) {
    return bounds.max[a] > bounds.max[b] || (bounds.max[a] == bounds.max[b] && a < b);
  });
  float best = -std::numeric_limits<float>::infinity();
  int64_t best_id = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < bounds.blocks; ++i) {
    const size_t b = order[i];
    if (bounds.max[b] < best) break;  // every later bound is lower still
    const auto start = static_cast<int64_t>(b * bounds.block);
    if (bounds.max[b] == best && start > best_id) continue;  // could only tie at a higher id
    const int64_t id =
        start +
        backend.row_argmax(x + start, std::min(n - start, static_cast<int64_t>(bounds.block)));
    if (x[id] > best || (x[id] == best && id < best_id)) {
      best = x[id];
      best_id = id;
    }
  }
  return static_cast<TokenId>(best_id);
}

}  // namespace

void take_greedy_token(RowStep& row) {
  const BlockMaxima& bounds = row.scratch.raw_summary.maxima;
  if (working_row_bounded_by_callers(row) &&
      bounds.blocks * bounds.block >= static_cast<size_t>(row.vocab_size())) {
    row.greedy_token =
        argmax_within_bounds(row.backend, row.logits.data(), row.vocab_size(), bounds);
    return;
  }
  row.greedy_token = row.backend.row_argmax(row.logits.data(), row.vocab_size());
}

bool take_greedy_token_from_input(RowStep& row) {
  if (!row.sampling.greedy || row.input.dtype != DType::f32 || row.logprobs_read_working_row() ||
      row.edited_before_sampling())
    return false;
  int64_t first_bad = -1;
  row.greedy_token = row.backend.argmax_checked(static_cast<const float*>(row.input_row()),
                                                row.vocab_size(), &first_bad, row.split);
  row.failure.token_id = first_bad;
  row.sampled_token = row.greedy_token;
  return true;
}

}  // namespace lastmile::detail
