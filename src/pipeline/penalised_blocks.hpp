// lastmile — a penalised row read block by block, with no working row: step 6 applied to each
// block as it is widened (greedy rows' argmax, random rows' Backend::draw_from_penalised_input).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "pipeline/row_step.hpp"

namespace lastmile::detail {

// Step 6 for the few blocks a row reads: the repetition set (the worker's seen bitmap marked from
// the prompt and history, or a RequestBatch's kept one) and the history's counts bucketed by
// block, once per row in O(prompt + history + blocks); then each block read is widened and
// penalised as step 6 does it, repetition over its seen tokens, then frequency and presence over
// its counted ones (Backend::apply_penalties, ids made relative). The buckets live in
// scratch.counts_by_block.
class PenalisedBlocks {
 public:
  // `block`: the blocks read, kPenalisedBlock at most, a multiple of 64 (whole bitmap words).
  PenalisedBlocks(RowStep& row, size_t block);
  ~PenalisedBlocks();
  PenalisedBlocks(const PenalisedBlocks&) = delete;
  PenalisedBlocks& operator=(const PenalisedBlocks&) = delete;

  // Entries [start, start + count) of the row (one block, or part of one) as steps 2 and 6
  // leave them.
  void read(int64_t start, int64_t count, float* out) const;

 private:
  RowStep& row_;
  size_t block_;
  const uint64_t* seen_ = nullptr;
  std::span<const TokenCount> counts_;
  // Block b's counts: counts_[order_[k]] for k in [first_[b], first_[b + 1]).
  std::array<uint32_t, BlockMaxima::kMaxBlocks + 1> first_;
  const uint32_t* order_ = nullptr;
};

}  // namespace lastmile::detail
