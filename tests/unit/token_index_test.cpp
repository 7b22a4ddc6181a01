// TokenIndex (src/token_index.hpp): token id -> index of first appearance, and forgetting a
// row's ids without clearing the whole table.
#include "token_index.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace lastmile_test {
namespace {

using lastmile::TokenId;
using lastmile::detail::TokenIndex;

// Inserts ids in order; returns each one's index (a repeat gets its first index).
std::vector<uint32_t> insert(TokenIndex& index, std::vector<TokenId>& distinct,
                             const std::vector<TokenId>& ids) {
  std::vector<uint32_t> at;
  const auto id_at = [&distinct](uint32_t i) { return distinct[i]; };
  for (TokenId id : ids) {
    const auto next = static_cast<uint32_t>(distinct.size());
    at.push_back(index.find_or_insert(id, next, id_at));
    if (at.back() == next) distinct.push_back(id);
  }
  return at;
}

// Ids that share a home slot (found here with the table's Fibonacci hash) make long probe runs,
// which forgetting must empty whatever slots it has emptied already. A table of 128 slots for
// 60 ids is cleared whole; one of 4096 is emptied id by id.
TEST(TokenIndex, ForgetEmptiesTheTableAfterCollidingInserts) {
  for (const int bits : {7, 12}) {
    TokenIndex index;
    index.reserve(size_t{1} << (bits - 1), [](uint32_t) { return TokenId{0}; });  // kept
    std::vector<TokenId> ids;
    for (TokenId id = 0; ids.size() < 40; ++id)  // home slot 5
      if ((static_cast<uint32_t>(id) * 0x9e3779b9u) >> (32 - bits) == 5) ids.push_back(id);
    for (TokenId k = 0; k < 20; ++k) ids.push_back(100000 + k);
    ids.push_back(ids[0]);
    ids.push_back(ids[1]);  // repeats
    std::vector<TokenId> distinct;
    const std::vector<uint32_t> at = insert(index, distinct, ids);
    ASSERT_EQ(distinct.size(), 60u);
    EXPECT_EQ(at[60], at[0]);
    EXPECT_EQ(at[61], at[1]);
    index.forget(distinct.size(), [&distinct](uint32_t i) { return distinct[i]; });
    // Empty again: inserted anew (after the old list, so that old indices stay readable), every
    // id gets a new index, none its old one.
    const size_t before = distinct.size();
    const std::vector<TokenId> reversed(ids.rbegin() + 2, ids.rend());
    const std::vector<uint32_t> fresh = insert(index, distinct, reversed);
    for (size_t i = 0; i < fresh.size(); ++i)
      EXPECT_EQ(fresh[i], before + i) << "bits " << bits << " id " << reversed[i];
  }
}

}  // namespace
}  // namespace lastmile_test
