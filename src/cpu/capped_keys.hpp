// lastmile — walking a list in key order when its keys do not fit SortScratch::keys, which holds
// sort_keys_size(n) of them, an eighth of a row: a radix select finds where each chunk of keys
// ends, and the chunk is listed and sorted there. The selection paths sort their usual lists
// (a few hundred entries) in that room at once; this is their fallback for longer ones (a top-k
// of thousands followed by top-p, a top-N of thousands, a top-p band of equal probabilities).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

#include "cpu/kernels.hpp"

namespace lastmile::detail::cpu_selection {

// key_at(i) for an entry the walk skips. No key our lists make is all ones: that would need a
// value whose orderable bits are all ones or all zeros, which are NaN's.
inline constexpr uint64_t kNoKey = UINT64_MAX;

// The m-th smallest (1-based, duplicates counted) of the keys key_at(i), i < count, that are not
// kNoKey and, when above_floor, are > floor; at least m of them must be. Radix select, one pass
// per byte from the byte at from_shift down: no copy of the keys, 8 passes for 64-bit keys.
template <class KeyAt>
uint64_t nth_smallest_key(size_t count, KeyAt key_at, bool above_floor, uint64_t floor, size_t m,
                          int from_shift = 56) {
  uint64_t prefix = 0, prefix_mask = 0;
  size_t rank = m;
  for (int shift = from_shift; shift >= 0; shift -= 8) {
    size_t histogram[256] = {};
    for (size_t i = 0; i < count; ++i) {
      const uint64_t key = key_at(i);
      if (key == kNoKey || (above_floor && key <= floor) || (key & prefix_mask) != prefix) continue;
      ++histogram[(key >> shift) & 0xff];
    }
    size_t digit = 0;
    while (digit < 255 && rank > histogram[digit]) rank -= histogram[digit++];
    prefix |= uint64_t{digit} << shift;
    prefix_mask |= uint64_t{0xff} << shift;
  }
  return prefix;
}

// Calls visit(sorted, m) with the keys key_at(i) (i < count; kNoKey ones skipped) in ascending
// order, in chunks of at most keys.size() sorted in keys; stops when visit returns false. The keys
// must be distinct (ours hold an id or a list index). A counting pass, then each chunk but the
// last costs 9 passes over the list (the select's 8, then the listing), the last one pass. A key
// that visit's side effects change must leave the walk (kNoKey, or at most the chunk's largest).
template <class KeyAt, class Visit>
void for_each_ascending(size_t count, KeyAt key_at, std::span<uint64_t> keys, Visit visit) {
  size_t remaining = 0;
  for (size_t i = 0; i < count; ++i) remaining += key_at(i) != kNoKey;
  bool above_floor = false;
  uint64_t floor = 0;
  while (remaining > 0 && !keys.empty()) {
    const size_t m = std::min(remaining, keys.size());
    const uint64_t last =
        m == remaining ? kNoKey - 1 : nth_smallest_key(count, key_at, above_floor, floor, m);
    size_t listed = 0;
    for (size_t i = 0; i < count && listed < m; ++i) {
      const uint64_t key = key_at(i);
      if (key != kNoKey && (!above_floor || key > floor) && key <= last) keys[listed++] = key;
    }
    if (listed == 0) return;  // only if key_at changed under the walk
    cpu::sort_keys(keys.data(), listed);
    if (!visit(static_cast<const uint64_t*>(keys.data()), listed)) return;
    remaining -= listed;
    above_floor = true;
    floor = last;
  }
}

}  // namespace lastmile::detail::cpu_selection
