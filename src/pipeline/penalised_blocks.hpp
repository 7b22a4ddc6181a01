// lastmile — a penalised row read block by block, with no working row: step 6 applied to each
// block as it is widened (greedy rows' argmax, random rows' Backend::draw_from_penalised_input).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "pipeline/row_step.hpp"

namespace lastmile::detail {

// Step 6 for the few blocks a row reads, each block widened and penalised as step 6 does it:
// repetition over its seen tokens (prompt and history), then frequency and presence over its
// counted ones (Backend::apply_penalties, ids made relative).
// A stateless row finds a block's tokens by scanning its prompt and history (chunks of ids tested
// at once: about a microsecond for 2k tokens), which is all a greedy row needs (one block, at
// times two). A row read further buckets those tokens by block once, in O(prompt + history +
// blocks), and later reads walk their bucket. Either way a block's tokens are gathered into a
// bitmap and counts of its own, with no hash of the history and no row-wide bitmap to mark and
// clear: those took a greedy 152k-token row with 1k prompt and 1k output tokens 13 of its 118
// us. A RequestBatch's row has its kept seen bitmap and counts, bucketed by block at the start.
class PenalisedBlocks {
 public:
  // `block`: the blocks read, kPenalisedBlock at most.
  PenalisedBlocks(RowStep& row, size_t block);
  PenalisedBlocks(const PenalisedBlocks&) = delete;
  PenalisedBlocks& operator=(const PenalisedBlocks&) = delete;

  // Entries [start, start + count) of the row (one block, or part of one) as steps 2 and 6
  // leave them. One thread at a time: a read may bucket the row's tokens.
  void read(int64_t start, int64_t count, float* out);

  // Step 6 on listed entries of the row (PenalisedRow::lower): values[i], entry ids[i] of the
  // caller's float32 view, ids ascending, as step 6 leaves it. Uses the scratch's token counts.
  void lower_listed(const int32_t* ids, float* values, size_t count);

  // Reads that scan the prompt and history before they are bucketed.
  static constexpr int kScannedReads = 2;

 private:
  void bucket_tokens();
  void bucket_kept_counts();
  // A token's block. Blocks are a power of two in practice (2048): a shift, where a division by
  // the run-time block took about 4 of a greedy 152k row's 107 us (perf: 3.7% of its samples).
  // A value: the buckets copy it into a local, which their stores do not make the loop reload.
  struct BlockOf {
    size_t block;
    int shift;  // log2(block), or -1
    size_t operator()(size_t id) const { return shift >= 0 ? id >> shift : id / block; }
  };
  void penalise_tokens(int64_t start, int64_t count, float* out) const;
  void penalise_kept(int64_t start, int64_t count, float* out) const;

  RowStep& row_;
  BlockOf block_of_;
  int reads_ = 0;
  bool bucketed_ = false;  // stateless rows: their tokens bucketed (else scanned)
  // Bucket b: order_[k] for k in [first_[b], first_[b + 1]). Stateless rows: a token's id within
  // its block, kCounted set for the history's (RequestBatch rows: an index into counts_).
  std::array<uint32_t, BlockMaxima::kMaxBlocks + 1> first_;
  const uint32_t* order_ = nullptr;
  std::span<const TokenCount> counts_;  // a RequestBatch row's kept counts
  static constexpr uint32_t kCounted = uint32_t{1} << 31;
};

}  // namespace lastmile::detail
