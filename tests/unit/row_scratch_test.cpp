// A worker's scratch for a vocabulary (RowScratch::reserve): its rows, in float32 rows' bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "pipeline/row_step.hpp"

namespace {
using lastmile::detail::kHistogramSize;
using lastmile::detail::kSortSlack;
using lastmile::detail::RowScratch;

// Every buffer whose size follows the vocabulary, and the struct itself. The history's lists
// (token_counts, history_index, saved, counts_by_block) follow the batch's longest history.
size_t vocab_bytes(const RowScratch& s) {
  return sizeof(RowScratch) + s.logits.capacity() * sizeof(float) +
         s.sort_values.capacity() * sizeof(float) + s.sort_ids.capacity() * sizeof(int32_t) +
         s.sort_keys.capacity() * sizeof(uint64_t) + s.seen.capacity() * sizeof(uint64_t);
}

// The working row, ids and values for selection, keys for an eighth of a row (lists longer than
// that are sorted by chunks) whose storage also holds top-p's histogram (32 KB: more than the
// keys below 32520 tokens), and the penalties' bitmap of the row, plus the SIMD slack.
TEST(RowScratch, HoldsThreeRowsKeysOrTheHistogramAndABitmap) {
  for (const int64_t vocab : {1000, 32000, 32512, 32520, 128256, 151936, 256000}) {
    RowScratch s;
    s.reserve(vocab);
    const auto n = static_cast<size_t>(vocab);
    const size_t row = n * sizeof(float);
    const size_t keys = std::max(n / 8, kHistogramSize) * sizeof(uint64_t);
    const size_t bitmap = (n + 63) / 64 * sizeof(uint64_t);
    EXPECT_LE(vocab_bytes(s),
              3 * row + keys + bitmap + 2 * kSortSlack * sizeof(float) + sizeof(RowScratch))
        << "vocab " << vocab;
    if (vocab >= 128256) {  // three and a quarter rows, and a bitmap's 1/32
      EXPECT_LE(vocab_bytes(s),
                row * 105 / 32 + 2 * kSortSlack * sizeof(float) + sizeof(RowScratch))
          << "vocab " << vocab;
    }
    EXPECT_GE(s.sort_keys.size(), (n + 63) / 64);  // a bitmap of the row
    EXPECT_GE(s.sort().keys.size(), lastmile::detail::sort_keys_size(n));
    EXPECT_EQ(s.sort().histogram.size(), kHistogramSize);
    EXPECT_EQ(s.sort().histogram.data(), s.sort().keys.data());  // one storage
  }
}

}  // namespace
