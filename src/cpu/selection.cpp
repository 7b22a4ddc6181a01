// lastmile — the CPU backend's selection pieces (selection.hpp).
#include "cpu/selection.hpp"

#include <algorithm>
#include <bit>
#include <limits>
#include <utility>

namespace lastmile::detail::cpu_selection {

// Every entry is copied and the count advanced by the test (kept <= i, so nothing unread is
// overwritten): a branch on it mispredicted on lists of which about half is kept (top-k 20000
// lists about 40000 candidates).
size_t keep_at_least(SortScratch scratch, size_t candidates, float kth) {
  size_t kept = 0;
  for (size_t i = 0; i < candidates; ++i) {
    const float value = scratch.values[i];
    scratch.ids[kept] = scratch.ids[i];
    scratch.values[kept] = value;
    kept += value >= kth;
  }
  return kept;
}

namespace {

// How many of `kept` entries top-p masks, value_at(i) being the i-th in ascending_key order:
// the oracle's sums in that order, from the smallest; never the largest (spec §9.3).
// A top-k list's weights (up to kRememberedWeights) are computed once and remembered for the
// cumulative walk: std::exp twice per entry was a third of a 32k row's top-k/top-p cost past its
// read.
template <class ValueAt>
size_t top_p_masked_count(size_t kept, float top_p, ValueAt value_at) {
  constexpr size_t kRememberedWeights = 256;
  const float max = value_at(kept - 1);
  if (max == kNegInf) return 0;
  float weights[kRememberedWeights];
  const bool remembered = kept <= kRememberedWeights;
  double sum = 0;
  for (size_t i = 0; i < kept; ++i) {
    const float w = std::exp(value_at(i) - max);
    if (remembered) weights[i] = w;
    sum += w;
  }
  const auto inv_sum = static_cast<float>(1.0 / sum);
  const float cut = 1.0f - top_p;
  double cumulative = 0;
  size_t masked = 0;
  for (size_t i = 0; i + 1 < kept; ++i) {
    cumulative += (remembered ? weights[i] : std::exp(value_at(i) - max)) * inv_sum;
    if (static_cast<float>(cumulative) > cut) break;
    masked = i + 1;
  }
  return masked;
}

// Sorts scratch's first `count` entries (ids / values) in place by key(value, id), which
// decode(key, &value, &id) turns back into the entry (all of it but a zero's sign: -0 comes back
// as +0, an equal logit): in chunks of at most keys.size(), each the smallest left, which a radix
// select bounds and a partition moves to the front of the rest, sorted in scratch.keys.
template <class Key, class Decode>
void sort_list_by_chunks(size_t count, SortScratch scratch, Key key, Decode decode) {
  int32_t* ids = scratch.ids.data();
  float* values = scratch.values.data();
  uint64_t* keys = scratch.keys.data();
  const size_t room = scratch.keys.size();
  for (size_t begin = 0; begin < count && room > 0;) {
    const size_t m = std::min(room, count - begin);
    if (m < count - begin) {
      const uint64_t last = nth_smallest_key(
          count - begin, [&](size_t i) { return key(values[begin + i], ids[begin + i]); }, false, 0,
          m);
      for (size_t i = begin, to = begin; i < count; ++i) {
        if (key(values[i], ids[i]) > last) continue;
        std::swap(values[i], values[to]);
        std::swap(ids[i], ids[to++]);
      }
    }
    for (size_t i = 0; i < m; ++i) keys[i] = key(values[begin + i], ids[begin + i]);
    cpu::sort_keys(keys, m);
    for (size_t i = 0; i < m; ++i) decode(keys[i], &values[begin + i], &ids[begin + i]);
    begin += m;
  }
}

// The list sorted in place by ascending_key (by chunks), decided on that order as in
// top_p_keep, then its survivors, the end of that order, moved to the front and sorted by id.
size_t top_p_keep_by_chunks(size_t kept, float top_p, SortScratch scratch, float* x) {
  auto ascending = [](float value, int32_t id) { return ascending_key(value, id); };  // inlined
  sort_list_by_chunks(kept, scratch, ascending, [](uint64_t key, float* value, int32_t* id) {
    *value = key_value(key);
    *id = key_id(key);
  });
  float* values = scratch.values.data();
  int32_t* ids = scratch.ids.data();
  const size_t masked = top_p_masked_count(kept, top_p, [values](size_t i) { return values[i]; });
  for (size_t i = 0; x != nullptr && i < masked; ++i) x[ids[i]] = kNegInf;
  const size_t alive = kept - masked;
  if (masked > 0) {
    std::copy(values + masked, values + kept, values);
    std::copy(ids + masked, ids + kept, ids);
  }
  auto by_id = [](float value, int32_t id) {
    return (uint64_t{static_cast<uint32_t>(id)} << 32) | orderable(value);
  };
  sort_list_by_chunks(alive, scratch, by_id, [](uint64_t key, float* value, int32_t* id) {
    *value = from_orderable(static_cast<uint32_t>(key));
    *id = static_cast<int32_t>(key >> 32);
  });
  return alive;
}

}  // namespace

// How many of `kept` equal finite entries top-p masks: each weighs exp(0) = 1, the sum is the
// count, each q is inv_sum, and the walk's order among equal values is the larger id first, so
// those are the ones masked. The same arithmetic as the walk, in O(count), where the walk's chunks
// cost some 20 ms a 128k row (9 passes over the row a chunk of an eighth).
size_t equal_entries_masked(size_t kept, float top_p) {
  const auto inv_sum = static_cast<float>(1.0 / static_cast<double>(kept));
  const float cut = 1.0f - top_p;
  double cumulative = 0;
  size_t masked = 0;
  while (masked + 1 < kept) {  // never the walk's last entry (the smallest id)
    cumulative += 1.0f * inv_sum;
    if (static_cast<float>(cumulative) > cut) break;
    ++masked;
  }
  return masked;
}

// The masked entries of the oracle's full walk add exact zeros to its sums, so deciding on the
// list alone gives the same cut. Cumulative sums never decrease: the masked ones are a prefix.
size_t top_p_keep(size_t kept, float top_p, SortScratch scratch, float* x) {
  if (kept == 0) return 0;
  if (kept > scratch.keys.size()) {
    // A list of one value (ties at a top-k's k-th: on a row of four values, a quarter of it)
    // masks its largest ids, the end of the list, where sorting it by chunks took 2 ms at 128k.
    const float* values = scratch.values.data();
    const float max = cpu::row_max(values, kept);
    if (max > kNegInf && static_cast<size_t>(cpu::count_at_least(values, kept, max)) == kept) {
      const size_t masked = equal_entries_masked(kept, top_p);
      for (size_t i = kept - masked; x != nullptr && i < kept; ++i) x[scratch.ids[i]] = kNegInf;
      return kept - masked;
    }
    return top_p_keep_by_chunks(kept, top_p, scratch, x);
  }
  uint64_t* keys = scratch.keys.data();
  for (size_t i = 0; i < kept; ++i) keys[i] = ascending_key(scratch.values[i], scratch.ids[i]);
  cpu::sort_keys(keys, kept);
  const size_t masked =
      top_p_masked_count(kept, top_p, [keys](size_t i) { return key_value(keys[i]); });
  if (masked == 0) return kept;
  for (size_t i = 0; x != nullptr && i < masked; ++i) x[key_id(keys[i])] = kNegInf;
  const uint64_t last_masked = keys[masked - 1];
  size_t alive = 0;
  for (size_t i = 0; i < kept; ++i) {
    if (ascending_key(scratch.values[i], scratch.ids[i]) <= last_masked) continue;
    scratch.ids[alive] = scratch.ids[i];
    scratch.values[alive++] = scratch.values[i];
  }
  return alive;
}

namespace {

// top_p_over_row on a row whose kept entries are all equal (a padding row of zeros, a row masked
// to one value), as equal_entries_masked counts them: the largest ids masked.
void top_p_over_equal_entries(float* x, size_t n, size_t kept, float top_p) {
  for (size_t i = n, masked = equal_entries_masked(kept, top_p); masked > 0 && i-- > 0;) {
    if (x[i] == kNegInf) continue;
    x[i] = kNegInf;
    --masked;
  }
}

// Buckets a key range is split into when its entries pass the keys' room: 8 KB of counts on the
// stack a level, at most three levels (11 + 11 + 10 bits) before a range holds one value.
constexpr int kSplitBits = 11;

// Calls visit(sorted, m) with the ascending_key keys of x's entries whose orderable bits lie in
// [lo_key, hi_key), `count` of them (finite, NaN-free, lo_key at least the lowest float's), in
// ascending order, in chunks of at most scratch.keys.size() sorted in scratch.keys; false once
// visit returned false. visit may mask (-inf) the entries it was given, no others. A range that
// fits is listed by one vector pass (list_between, into scratch.ids) and sorted. A longer one is
// narrowed to the keys it holds (a vector pass): one value is listed from the largest id down,
// already in order, a room's worth of ids at a time; more are split by a histogram over their
// keys, neighbouring buckets walked together while they fit. for_each_ascending's radix select
// cost 9 scalar passes over the row a chunk: 12 to 80 ms a 128k row with top-p after a top-k of
// 30000 to 100000, 20 ms a row of zeros and one biased token, 54 ms a row of four values.
template <class Visit>
bool walk_key_range(const float* x, size_t n, uint32_t lo_key, uint32_t hi_key, size_t count,
                    SortScratch scratch, Visit& visit) {
  const size_t room = scratch.keys.size();
  uint64_t* const keys = scratch.keys.data();
  // ids: room + kSortSlack entries, at least room + kCompressSlack.
  auto* const at = reinterpret_cast<uint32_t*>(scratch.ids.data());
  if (count <= room) {
    // The entries the count counted (lo <= x < hi is lo_key <= orderable(x) < hi_key), so never
    // past the room; the min keeps a broken count inside the keys.
    const size_t listed = std::min(
        room, cpu::list_between(x, n, from_orderable(lo_key), from_orderable(hi_key), at, room));
    for (size_t j = 0; j < listed; ++j)
      keys[j] = ascending_key(x[at[j]], static_cast<int32_t>(at[j]));
    cpu::sort_keys(keys, listed);
    return listed == 0 || visit(static_cast<const uint64_t*>(keys), listed);
  }
  float min = 0, max = 0;
  cpu::min_max_between(x, n, from_orderable(lo_key), from_orderable(hi_key), &min, &max);
  if (min > max) return true;  // none left (only if visit masked outside its chunks)
  lo_key = orderable(min);
  hi_key = orderable(max) + 1;
  if (hi_key - lo_key == 1) {  // one value (-0 and +0 alike): the larger id first
    const float above = from_orderable(hi_key);
    for (size_t end = n; end > 0;) {
      const size_t begin = end > room ? end - room : 0;
      const size_t listed =
          std::min(room, cpu::list_between(x + begin, end - begin, min, above, at, room));
      for (size_t j = 0; j < listed; ++j)
        keys[j] = ascending_key(min, static_cast<int32_t>(begin + at[listed - 1 - j]));
      if (listed > 0 && !visit(static_cast<const uint64_t*>(keys), listed)) return false;
      end = begin;
    }
    return true;
  }
  const uint32_t span = hi_key - lo_key;
  const int shift = std::max(0, static_cast<int>(std::bit_width(span - 1)) - kSplitBits);
  const size_t buckets = ((span - 1) >> shift) + 1;
  uint32_t counts[size_t{1} << kSplitBits] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t offset = orderable(x[i]) - lo_key;  // wraps below the range: -inf's too
    if (offset < span) ++counts[offset >> shift];
  }
  auto key_of = [&](size_t bucket) {  // where bucket starts; the range's end past the last
    return bucket == buckets ? hi_key : lo_key + static_cast<uint32_t>(bucket << shift);
  };
  for (size_t b = 0; b < buckets;) {
    if (counts[b] == 0) {
      ++b;
      continue;
    }
    size_t e = b, total = 0;
    while (e < buckets && total + counts[e] <= room) total += counts[e++];
    if (e == b) total = counts[e++];  // one bucket past the room: narrowed and split again
    if (!walk_key_range(x, n, key_of(b), key_of(e), total, scratch, visit)) return false;
    b = e;
  }
  return true;
}

// walk_key_range over every finite entry of x, min and max its smallest and largest.
template <class Visit>
void walk_ascending(const float* x, size_t n, float min, float max, size_t finite,
                    SortScratch scratch, Visit visit) {
  walk_key_range(x, n, orderable(min), orderable(max) + 1, finite, scratch, visit);
}

}  // namespace

void top_p_over_row(float* x, size_t n, float top_p, SortScratch scratch) {
  if (n == 0) return;
  const float max = cpu::row_max(x, n);
  if (max == kNegInf) return;
  const float min = cpu::finite_min(x, n);
  const auto kept =
      static_cast<size_t>(cpu::count_at_least(x, n, std::numeric_limits<float>::lowest()));
  if (min == max) return top_p_over_equal_entries(x, n, kept, top_p);
  // exp(v - max) of a chunk's entries, the last one remembered: the walk meets equal values in
  // runs (a padding row's thousands of zeros), where an exp each cost more than the walk. The
  // sums are kept in locals: through a captured reference, a store and a reload an entry.
  struct Weight {
    float max, value = std::numeric_limits<float>::quiet_NaN(), weight = 0;
    float operator()(float v) {
      if (v != value) value = v, weight = std::exp(v - max);
      return weight;
    }
  };
  double sum = 0;  // in ascending order, as top_p_masked_count sums its sorted list
  walk_ascending(x, n, min, max, kept, scratch, [&](const uint64_t* sorted, size_t m) {
    Weight weight{max};
    double partial = sum;
    for (size_t j = 0; j < m; ++j) partial += weight(key_value(sorted[j]));
    sum = partial;
    return true;
  });
  const auto inv_sum = static_cast<float>(1.0 / sum);
  const float cut = 1.0f - top_p;
  double cumulative = 0;
  size_t walked = 0;
  walk_ascending(x, n, min, max, kept, scratch, [&](const uint64_t* sorted, size_t m) {
    Weight weight{max};
    double partial = cumulative;
    for (size_t j = 0; j < m; ++j, ++walked) {
      if (walked + 1 >= kept) return false;  // never the largest
      partial += weight(key_value(sorted[j])) * inv_sum;
      if (static_cast<float>(partial) > cut) return false;
      x[key_id(sorted[j])] = kNegInf;  // its key leaves the walk
    }
    cumulative = partial;
    return true;
  });
}

void sort_samples(float* values, size_t n, unsigned from_bit) {
  constexpr size_t kMax = 1024, kBits = 8, kBuckets = size_t{1} << kBits;
  uint32_t keys[kMax], other[kMax];
  for (size_t i = 0; i < n; ++i) keys[i] = orderable(values[i]);
  uint32_t* from = keys;
  uint32_t* to = other;
  for (unsigned shift = from_bit; shift < 32; shift += kBits) {  // least significant digit first
    uint32_t start[kBuckets] = {};
    for (size_t i = 0; i < n; ++i) ++start[(from[i] >> shift) & (kBuckets - 1)];
    uint32_t sum = 0;
    for (uint32_t& s : start) sum += std::exchange(s, sum);
    for (size_t i = 0; i < n; ++i) to[start[(from[i] >> shift) & (kBuckets - 1)]++] = from[i];
    std::swap(from, to);
  }
  for (size_t i = 0; i < n; ++i) values[i] = from_orderable(from[i]);
}

// Between -inf (masked unless threshold is 0) and max (kept when threshold <= inv_sum).
float smallest_kept(float max, float inv_sum, float threshold) {
  return smallest_passing([&](float v) { return !(std::exp(v - max) * inv_sum < threshold); },
                          max + std::log(threshold / inv_sum));
}

MinPCut min_p_cut(float max, float min_p) {
  auto smallest_with_weight = [max](float w) {
    return smallest_passing([&](float v) { return !(std::exp(v - max) < w); }, max + std::log(w));
  };
  return {smallest_with_weight(from_orderable(orderable(min_p) - 4)), smallest_with_weight(min_p)};
}

}  // namespace lastmile::detail::cpu_selection
