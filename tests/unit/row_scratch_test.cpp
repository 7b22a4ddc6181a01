// A worker's scratch for a vocabulary (RowScratch::reserve): its rows, in float32 rows' bytes.
#include <gtest/gtest.h>

#include <cstdint>

#include "pipeline/row_step.hpp"

namespace {
using lastmile::detail::RowScratch;

size_t row_bytes(const RowScratch& s) {
  return s.logits.capacity() * sizeof(float) + s.sort_values.capacity() * sizeof(float) +
         s.sort_ids.capacity() * sizeof(int32_t) + s.sort_keys.capacity() * sizeof(uint64_t);
}

// The working row, ids and values for selection, and keys for an eighth of a row (lists longer
// than that are sorted by chunks): three and a quarter float32 rows, plus the SIMD slack.
TEST(RowScratch, HoldsThreeRowsAndAQuarterForTheVocabulary) {
  for (const int64_t vocab : {32000, 128256, 151936, 256000}) {
    RowScratch s;
    s.reserve(vocab);
    const auto row = static_cast<size_t>(vocab) * sizeof(float);
    EXPECT_LE(row_bytes(s), row * 13 / 4 + 2 * lastmile::detail::kSortSlack * sizeof(float))
        << "vocab " << vocab;
    EXPECT_GE(s.sort_keys.size(), (static_cast<size_t>(vocab) + 63) / 64);  // a bitmap of the row
  }
}

}  // namespace
