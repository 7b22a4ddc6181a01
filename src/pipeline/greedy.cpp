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

// The longest block penalised at a time (block_size for vocabularies up to 2^20).
constexpr int64_t kMaxBlock = 2048;

// Step 6 for the few blocks a greedy row reads, with no working row: the repetition set (the
// worker's seen bitmap marked from the prompt and history, or a RequestBatch's kept one) and the
// history's counts bucketed by block, once per row in O(prompt + history + blocks); then each
// block read is widened and penalised as step 6 does it, repetition over its seen tokens, then
// frequency and presence over its counted ones (Backend::apply_penalties, ids made relative).
class PenalisedBlocks {
 public:
  PenalisedBlocks(RowStep& row, size_t block) : row_(row), block_(block) {
    if (row.has_kept_counts) {
      seen_ = row.kept_seen.data();
      counts_ = row.kept_output_counts;
    } else {
      row.mark_prompt_and_history(true);
      seen_ = row.scratch.seen.data();
      counts_ = row.count_history();
    }
    // A counting sort of the counts by block into scratch.sort_ids (free until step 8).
    const size_t blocks = (static_cast<size_t>(row.vocab_size()) + block - 1) / block;
    std::fill(first_.begin(), first_.begin() + blocks + 1, 0u);
    for (const TokenCount& c : counts_) ++first_[static_cast<size_t>(c.token_id) / block + 1];
    for (size_t b = 0; b < blocks; ++b) first_[b + 1] += first_[b];
    std::array<uint32_t, BlockMaxima::kMaxBlocks> next;
    std::copy(first_.begin(), first_.begin() + blocks, next.begin());
    order_ = row.scratch.sort_ids.data();
    for (size_t i = 0; i < counts_.size(); ++i)
      order_[next[static_cast<size_t>(counts_[i].token_id) / block]++] = static_cast<int32_t>(i);
  }
  ~PenalisedBlocks() {
    if (!row_.has_kept_counts) row_.mark_prompt_and_history(false);  // all zero between rows
  }
  PenalisedBlocks(const PenalisedBlocks&) = delete;
  PenalisedBlocks& operator=(const PenalisedBlocks&) = delete;

  // Entries [start, start + count) of the row (a whole block) as steps 2 and 6 leave them.
  void read(int64_t start, int64_t count, float* out) const {
    const size_t element = element_size(row_.input.dtype);
    row_.backend.convert_row(static_cast<const char*>(row_.input_row()) + start * element,
                             row_.input.dtype, out, count);  // checked by the summary's read
    const RequestParams& p = row_.params();
    if (p.repetition_penalty != 1.0f) {
      Batched repeated(row_.backend, out, p.repetition_penalty, 0.0f, 0.0f);
      for (auto w = static_cast<size_t>(start) / 64; w * 64 < static_cast<size_t>(start + count);
           ++w)
        for (uint64_t bits = seen_[w]; bits != 0; bits &= bits - 1) {
          const auto i = static_cast<int64_t>(w * 64) + std::countr_zero(bits);
          if (i < start + count) repeated.add({static_cast<TokenId>(i - start), 0, true});
        }
      repeated.flush();
    }
    if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
    Batched counted(row_.backend, out, 1.0f, p.frequency_penalty, p.presence_penalty);
    const size_t b = static_cast<size_t>(start) / block_;
    for (uint32_t k = first_[b]; k < first_[b + 1]; ++k) {
      const TokenCount& c = counts_[static_cast<size_t>(order_[k])];
      counted.add({static_cast<TokenId>(c.token_id - start), c.output_count, false});
    }
    counted.flush();
  }

 private:
  // Backend::apply_penalties over tokens handed in one at a time, 64 to a call.
  class Batched {
   public:
    Batched(const Backend& backend, float* x, float repetition, float frequency, float presence)
        : backend_(backend), x_(x), penalties_{repetition, frequency, presence} {}
    void add(const TokenCount& c) {
      tokens_[size_++] = c;
      if (size_ == tokens_.size()) flush();
    }
    void flush() {
      backend_.apply_penalties(x_, std::span<const TokenCount>(tokens_.data(), size_),
                               penalties_[0], penalties_[1], penalties_[2]);
      size_ = 0;
    }

   private:
    const Backend& backend_;
    float* x_;
    std::array<float, 3> penalties_;
    std::array<TokenCount, 64> tokens_;
    size_t size_ = 0;
  };

  RowStep& row_;
  size_t block_;
  const uint64_t* seen_ = nullptr;
  std::span<const TokenCount> counts_;
  std::array<uint32_t, BlockMaxima::kMaxBlocks + 1>
      first_;  // block b's counts: order_[first_[b], first_[b + 1])
  int32_t* order_ = nullptr;
};

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
  if (bounds == nullptr || bounds->block > kMaxBlock) {
    summary.known = false;
    return false;  // NaN / +inf (the steps report it), or blocks too long: the steps
  }
  const PenalisedBlocks penalised_blocks(row, bounds->block);
  std::array<float, kMaxBlock> block;
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
