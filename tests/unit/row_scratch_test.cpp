// A worker's scratch for a vocabulary (RowScratch::reserve): its rows, in float32 rows' bytes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>

#include "backend.hpp"
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

// The working row; ids and values for the cpu backend's lists, a quarter of a row each (all of a
// row up to 4096 tokens, 4096 entries up to 16384); keys for an eighth of a row (lists longer
// than that are sorted by chunks), whose storage also holds top-p's histogram (32 KB: more than
// the keys below 32520 tokens); the penalties' bitmap of the row; the SIMD slack. At most two
// float32 rows from 32000 tokens up.
TEST(RowScratch, HoldsAtMostTwoRowsFromThirtyTwoThousandTokens) {
  for (const int64_t vocab : {1000, 4096, 16384, 32000, 32520, 128256, 151936, 256000}) {
    RowScratch s;
    s.reserve(vocab, lastmile::detail::cpu_backend().list_room(vocab));
    const auto n = static_cast<size_t>(vocab);
    const size_t row = n * sizeof(float);
    const size_t room = std::min(n, std::max(n / 4, size_t{4096}));
    const size_t lists = 2 * (room + kSortSlack) * sizeof(float);
    const size_t keys = std::max(n / 8, kHistogramSize) * sizeof(uint64_t);
    const size_t bitmap = (n + 63) / 64 * sizeof(uint64_t);
    EXPECT_EQ(s.sort().list_room(), room) << "vocab " << vocab;
    EXPECT_LE(vocab_bytes(s), row + lists + keys + bitmap + sizeof(RowScratch))
        << "vocab " << vocab;
    if (vocab >= 32000) {
      EXPECT_LE(vocab_bytes(s), 2 * row) << "vocab " << vocab;
    }
    EXPECT_GE(s.sort_keys.size(), (n + 63) / 64);  // a bitmap of the row
    EXPECT_GE(s.sort().keys.size(), lastmile::detail::sort_keys_size(n));
    EXPECT_EQ(s.sort().histogram.size(), kHistogramSize);
    EXPECT_EQ(s.sort().histogram.data(), s.sort().keys.data());  // one storage
  }
}

// The oracle sorts whole rows: its scratch lists a row.
TEST(RowScratch, TheOraclesListsHoldARow) {
  RowScratch s;
  s.reserve(128256, lastmile::detail::reference_backend().list_room(128256));
  EXPECT_EQ(s.sort().list_room(), size_t{128256});
}

}  // namespace
