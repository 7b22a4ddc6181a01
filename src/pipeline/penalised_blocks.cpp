// lastmile — PenalisedBlocks: step 6 block by block (penalised_blocks.hpp).
#include "pipeline/penalised_blocks.hpp"

#include <algorithm>
#include <bit>

namespace lastmile::detail {
namespace {

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
    backend_.apply_penalties(x_, std::span<const TokenCount>(tokens_.data(), size_), penalties_[0],
                             penalties_[1], penalties_[2]);
    size_ = 0;
  }

 private:
  const Backend& backend_;
  float* x_;
  std::array<float, 3> penalties_;
  std::array<TokenCount, 64> tokens_;
  size_t size_ = 0;
};

}  // namespace

PenalisedBlocks::PenalisedBlocks(RowStep& row, size_t block) : row_(row), block_(block) {
  if (row.has_kept_counts) {
    seen_ = row.kept_seen.data();
    counts_ = row.kept_output_counts;
  } else {
    row.mark_prompt_and_history(true);
    seen_ = row.scratch.seen.data();
    counts_ = row.count_history();
  }
  // A counting sort of the counts by block (reserve_lists made room for any row's counts).
  const size_t blocks = (static_cast<size_t>(row.vocab_size()) + block - 1) / block;
  std::fill(first_.begin(), first_.begin() + blocks + 1, 0u);
  for (const TokenCount& c : counts_) ++first_[static_cast<size_t>(c.token_id) / block + 1];
  for (size_t b = 0; b < blocks; ++b) first_[b + 1] += first_[b];
  std::array<uint32_t, BlockMaxima::kMaxBlocks> next;
  std::copy(first_.begin(), first_.begin() + blocks, next.begin());
  uint32_t* const order = row.scratch.counts_by_block.data();
  for (size_t i = 0; i < counts_.size(); ++i)
    order[next[static_cast<size_t>(counts_[i].token_id) / block]++] = static_cast<uint32_t>(i);
  order_ = order;
}

PenalisedBlocks::~PenalisedBlocks() {
  if (!row_.has_kept_counts) row_.mark_prompt_and_history(false);  // all zero between rows
}

void PenalisedBlocks::read(int64_t start, int64_t count, float* out) const {
  const size_t element = element_size(row_.input.dtype);
  row_.backend.convert_row(static_cast<const char*>(row_.input_row()) + start * element,
                           row_.input.dtype, out, count);  // checked by the summary's read
  const RequestParams& p = row_.params();
  const int64_t end = start + count;
  if (p.repetition_penalty != 1.0f) {
    Batched repeated(row_.backend, out, p.repetition_penalty, 0.0f, 0.0f);
    for (auto w = static_cast<size_t>(start) / 64; w * 64 < static_cast<size_t>(end); ++w)
      for (uint64_t bits = seen_[w]; bits != 0; bits &= bits - 1) {
        const auto i = static_cast<int64_t>(w * 64) + std::countr_zero(bits);
        if (i >= start && i < end) repeated.add({static_cast<TokenId>(i - start), 0, true});
      }
    repeated.flush();
  }
  if (p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f) return;
  Batched counted(row_.backend, out, 1.0f, p.frequency_penalty, p.presence_penalty);
  const size_t b = static_cast<size_t>(start) / block_;
  for (uint32_t k = first_[b]; k < first_[b + 1]; ++k) {
    const TokenCount& c = counts_[static_cast<size_t>(order_[k])];
    if (c.token_id >= start && c.token_id < end)
      counted.add({static_cast<TokenId>(c.token_id - start), c.output_count, false});
  }
  counted.flush();
}

}  // namespace lastmile::detail
