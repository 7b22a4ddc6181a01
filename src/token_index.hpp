// lastmile — TokenIndex: token id -> index in a list of distinct tokens, allocation-free once
// reserved.
#pragma once

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "lastmile/params.hpp"

namespace lastmile::detail {

// Token id -> index in a list of distinct tokens (a request's output counts, a row's history
// counts): open addressing over a power-of-two table at most half full, which doubles when it
// would not be. reserve() sizes it up front, so meeting a new token allocates nothing (a
// node-based map allocates on every new token).
class TokenIndex {
 public:
  // Room for `tokens` distinct ids without growing; keys(i) is the id at index i (to rehash).
  template <class KeyAt>
  void reserve(size_t tokens, KeyAt keys) {
    size_t size = 16;
    while (size < 2 * tokens) size *= 2;
    if (size <= slots_.size()) return;
    const std::vector<uint32_t> old = std::exchange(slots_, std::vector<uint32_t>(size, 0));
    for (uint32_t index : old)
      if (index != 0) slots_[free_slot(keys(index - 1))] = index;
  }
  // Forgets every id, keeping the table's size.
  void clear() { std::fill(slots_.begin(), slots_.end(), 0u); }
  // Forgets every id when indices [0, count) are all there are (keys(i): the id at index i), in
  // O(count) rather than O(table): a table once sized for a long history then costs a short one
  // nothing. Each index is sought from its id's home slot by its own value, not by id, so
  // emptied slots on the way do not end the search. A table at most 8 slots per index is
  // cleared whole instead: one streaming store beats that many dependent probes (2k-token
  // histories: about 2 of the 6.7 us counting took).
  template <class KeyAt>
  void forget(size_t count, KeyAt keys) {
    if (slots_.size() <= 8 * count) return clear();
    for (size_t i = 0; i < count; ++i) {
      size_t at = slot_of(keys(static_cast<uint32_t>(i)));
      while (slots_[at] != i + 1) at = (at + 1) & (slots_.size() - 1);
      slots_[at] = 0;
    }
  }
  // The index of `id`, or `next` (recorded) when it is new.
  template <class KeyAt>
  uint32_t find_or_insert(TokenId id, uint32_t next, KeyAt keys) {
    if (2 * (size_t{next} + 1) > slots_.size()) reserve(2 * (size_t{next} + 1), keys);
    size_t at = slot_of(id);
    for (; slots_[at] != 0; at = (at + 1) & (slots_.size() - 1))
      if (keys(slots_[at] - 1) == id) return slots_[at] - 1;
    slots_[at] = next + 1;
    return next;
  }

 private:
  size_t slot_of(TokenId id) const {  // Fibonacci hashing: the top bits of id * 2^32 / phi
    const int bits = std::countr_zero(slots_.size());
    return (static_cast<uint32_t>(id) * 0x9e3779b9u) >> (32 - bits);
  }
  size_t free_slot(TokenId id) const {
    size_t at = slot_of(id);
    while (slots_[at] != 0) at = (at + 1) & (slots_.size() - 1);
    return at;
  }
  std::vector<uint32_t> slots_;  // index + 1; 0: empty
};

}  // namespace lastmile::detail
