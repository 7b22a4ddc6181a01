// Step 7a — greedy argmax (spec §7a, §8.1), on the step-6 logits before temperature.
// Lowest index among equal maxima (PyTorch's argmax), computed for greedy rows only. A greedy
// row that steps 3-6 leave alone and whose working row no logprob reads (none asked, or a raw
// mode) takes its argmax straight from the caller's float32 row: steps 2-7a in one checked read
// (split as the row allows), the same token.
// When steps 3-6 can only lower entries (penalties with repetition >= 1, frequency and presence
// >= 0; masks to -inf), no working-row entry exceeds the caller's, so the block maxima that raw
// logprobs learn of the caller's row bound each block: only blocks whose bound could still beat
// the best so far are read (usually one). A row that only step 6 edits, in a raw_logprobs batch,
// then needs no working row at all: each such block is widened and penalised alone.
#include <algorithm>
#include <array>
#include <bit>
#include <limits>
#include <numeric>

#include "pipeline/penalised_blocks.hpp"
#include "pipeline/steps.hpp"

namespace lastmile::detail {
namespace {

// The argmax of a row no entry of which exceeds its block's bound (bounds.max[b] for block b):
// blocks by descending bound (lower ids first among equals), each read only while it could still
// hold a larger entry, or an equal one at a lower id. block_argmax(start, count) gives a block's
// (value, id). The same token as one read of the whole row.
template <class BlockArgmax>
TokenId argmax_within_bounds(const BlockMaxima& bounds, int64_t n, BlockArgmax block_argmax) {
  std::array<uint16_t, BlockMaxima::kMaxBlocks> order;
  std::iota(order.begin(), order.begin() + bounds.blocks, uint16_t{0});
  std::sort(order.begin(), order.begin() + bounds.blocks, [&](uint16_t a, uint16_t b) {
    return bounds.max[a] > bounds.max[b] || (bounds.max[a] == bounds.max[b] && a < b);
  });
  float best = -std::numeric_limits<float>::infinity();
  int64_t best_id = std::numeric_limits<int64_t>::max();
  for (size_t i = 0; i < bounds.blocks; ++i) {
    const size_t b = order[i];
    if (bounds.max[b] < best) break;  // every later bound is lower still
    const auto start = static_cast<int64_t>(b * bounds.block);
    if (bounds.max[b] == best && start > best_id) continue;  // could only tie at a higher id
    const auto [value, id] =
        block_argmax(start, std::min(n - start, static_cast<int64_t>(bounds.block)));
    if (value > best || (value == best && id < best_id)) {
      best = value;
      best_id = id;
    }
  }
  return static_cast<TokenId>(best_id);
}

}  // namespace

void take_greedy_token(RowStep& row) {
  if (const BlockMaxima* bounds = row.callers_row_bounds()) {
    const float* x = row.logits.data();
    row.greedy_token =
        argmax_within_bounds(*bounds, row.vocab_size(), [&](int64_t start, int64_t count) {
          const int64_t id = start + row.backend.row_argmax(x + start, count);
          return std::pair{x[id], id};
        });
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

bool take_greedy_token_from_penalised_input(RowStep& row) {
  if (!row.sampling.greedy || !greedy_penalised_from_callers_row(row.plan, row.request))
    return false;
  RawRowSummary& summary = row.scratch.raw_summary;
  const bool summarised = row.backend.summarise_row(row.input_row(), row.input.dtype,
                                                    row.vocab_size(), &summary, row.split);
  const BlockMaxima* bounds = summarised ? row.callers_row_bounds() : nullptr;
  if (bounds == nullptr || bounds->block > kPenalisedBlock) {
    summary.known = false;
    return false;  // NaN / +inf (the steps report it), or blocks too long: the steps
  }
  PenalisedBlocks penalised_blocks(row, bounds->block);
  std::array<float, kPenalisedBlock> block;
  row.greedy_token =
      argmax_within_bounds(*bounds, row.vocab_size(), [&](int64_t start, int64_t count) {
        penalised_blocks.read(start, count, block.data());
        const int64_t id = start + row.backend.row_argmax(block.data(), count);
        return std::pair{block[static_cast<size_t>(id - start)], id};
      });
  row.sampled_token = row.greedy_token;
  return true;
}

}  // namespace lastmile::detail
