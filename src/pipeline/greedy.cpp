// Step 7a — greedy argmax (spec §7a, §8.1), on the step-6 logits before temperature.
// Lowest index among equal maxima (PyTorch's argmax), computed for greedy rows only. An unedited
// float32 greedy row whose working row no logprob reads, and whose raw logprobs (if any) need no
// softmax (or whose softmax the bounds below could not learn: over 2^20 entries), takes its argmax
// straight from the caller's row: steps 2-7a in one checked read (split as the row allows), the
// same token.
// When steps 3-6 can only lower entries (penalties with repetition >= 1, frequency and presence
// >= 0; masks to -inf), no working-row entry exceeds the caller's, so the caller's row's block
// maxima bound each block: only blocks whose bound could still beat the best so far are read
// (usually one). A row that no step edits but step 6, lowering, and whose working row no logprob
// reads then needs no working row at all: one read learns the bounds (with raw logprobs' softmax
// terms when step 8 needs them, which it then reads instead of the row), and each block read is
// widened, and penalised, alone. A bf16 or f16 row so reads its 2-byte logits about once, where
// the steps wrote and read a float32 row of twice their size.
#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <limits>
#include <numeric>
#include <optional>

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
  // Taken from a heap, not sorted: the walk usually stops after a block or two, and sorting a
  // 152k row's 75 blocks took about 4% of a greedy row's time (perf, bf16, one thread).
  std::array<uint16_t, BlockMaxima::kMaxBlocks> heap;
  auto end = heap.begin() + static_cast<std::ptrdiff_t>(bounds.blocks);
  std::iota(heap.begin(), end, uint16_t{0});
  auto later = [&](uint16_t a, uint16_t b) {  // the heap's top: the largest bound, lowest id
    return bounds.max[a] < bounds.max[b] || (bounds.max[a] == bounds.max[b] && a > b);
  };
  std::make_heap(heap.begin(), end, later);
  float best = -std::numeric_limits<float>::infinity();
  int64_t best_id = std::numeric_limits<int64_t>::max();
  while (end != heap.begin()) {
    std::pop_heap(heap.begin(), end, later);
    const size_t b = *--end;
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

bool take_greedy_token_within_callers_bounds(RowStep& row) {
  if (!row.sampling.greedy || !greedy_within_callers_bounds(row.plan, row.request)) return false;
  if (row.input.dtype == DType::f32 && !row.plan.needs_raw_softmax() &&
      !row.edited_before_sampling())
    return false;  // one checked read of the whole row is faster (take_greedy_token_from_input)
  // One read learns the bounds: with step 8's softmax terms when it needs them, else alone.
  RawRowSummary& summary = row.scratch.raw_summary;
  BlockMaxima maxima_alone;
  const BlockMaxima* bounds = nullptr;
  if (row.plan.needs_raw_softmax()) {
    if (row.backend.summarise_row(row.input_row(), row.input.dtype, row.vocab_size(), &summary,
                                  row.split))
      bounds = row.callers_row_bounds();
  } else if (row.backend.block_maxima(row.input_row(), row.input.dtype, row.vocab_size(),
                                      &maxima_alone, row.split)) {
    bounds = &maxima_alone;
  }
  if (bounds == nullptr || bounds->block > kPenalisedBlock) {
    summary.known = false;
    return false;  // NaN / +inf (the steps report it), no such pass, or blocks too long: the steps
  }
  std::optional<PenalisedBlocks> penalised_blocks;
  if (penalised(row.plan, row.params())) penalised_blocks.emplace(row, bounds->block);
  const auto* input = static_cast<const char*>(row.input_row());
  const size_t element = element_size(row.input.dtype);
  std::array<float, kPenalisedBlock> block;
  row.greedy_token =
      argmax_within_bounds(*bounds, row.vocab_size(), [&](int64_t start, int64_t count) {
        if (penalised_blocks)
          penalised_blocks->read(start, count, block.data());
        else  // checked by the read that found the bounds
          row.backend.convert_row(input + static_cast<size_t>(start) * element, row.input.dtype,
                                  block.data(), count);
        const int64_t id = start + row.backend.row_argmax(block.data(), count);
        return std::pair{block[static_cast<size_t>(id - start)], id};
      });
  row.sampled_token = row.greedy_token;
  return true;
}

}  // namespace lastmile::detail
