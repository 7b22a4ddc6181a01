// lastmile — the CPU backend's selection pieces, shared by the row kernels (cpu_backend.cpp) and
// the draw straight from a caller's row (input_draw.hpp): top-k without sorting the row, top-p's
// cut on a list with the oracle's arithmetic, the oracle's walk over a list, and the logit
// threshold of a softmax probability test. Their sorts fit scratch.keys or go by chunks
// (capped_keys.hpp).
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>

#include "backend.hpp"
#include "cpu/capped_keys.hpp"
#include "cpu/kernels.hpp"
#include "float_keys.hpp"

namespace lastmile::detail::cpu_selection {

inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// The longest list this backend keeps of a row of n (Backend::list_room): a quarter of the row,
// and rows of up to kShortRow whole. Its usual lists fit: top-k's candidates number a few k,
// top-p's short bands an eighth of the row at most, min-p's listing by maxima about a quarter at
// most. A longer list is decided on the row itself, or declined by a path from the caller's row.
inline constexpr size_t kShortRow = 4096;
inline size_t list_room(int64_t n) {
  const auto size = static_cast<size_t>(n);
  return std::min(size, std::max(size / 4, kShortRow));
}

// The k-th largest of scratch.values[0, count), 1 <= k <= count, duplicates counted: by counting
// passes over the values (kth_largest_value) while they fit in a core's L2; beyond, a selection
// on a copy of their keys, or by radix when they do not fit there.
inline float kth_listed(SortScratch scratch, size_t count, size_t k) {
  constexpr size_t kCountedAtMost = 65536;  // 256 KB of values, read at most 34 times
  if (count <= kCountedAtMost) return cpu::kth_largest_value(scratch.values.data(), count, k);
  if (count > scratch.keys.size()) {
    const float* values = scratch.values.data();
    const uint64_t key = nth_smallest_key(
        count, [values](size_t i) { return uint64_t{orderable(values[i])}; }, false, 0,
        count - k + 1, /*from_shift=*/24);
    return from_orderable(static_cast<uint32_t>(key));
  }
  uint64_t* keys = scratch.keys.data();
  for (size_t i = 0; i < count; ++i) keys[i] = orderable(scratch.values[i]);
  std::nth_element(keys, keys + k - 1, keys + count, std::greater<uint64_t>());
  return from_orderable(static_cast<uint32_t>(keys[k - 1]));
}

// The k-th largest of n values (duplicates counted), 1 <= k <= n, without sorting them: the j-th
// largest of 64 to 512 evenly spaced samples (all n if fewer; sample(i) for i < n) gives a
// threshold expected to keep about 2k entries (plus a margin); compress(threshold) lists every
// entry >= it in scratch.ids / values (id order) and returns how many, or kNotListed to give up
// (nullopt). The k-th is selected among them; the threshold drops until at least k pass. It
// never drops below the lowest float, so only finite entries are ever listed: with fewer than k
// of them (a masked row; or NaN among them, which no threshold passes) the k-th is -inf, and
// the finite ones are the *candidates listed, not the whole row. Selection, not sorting, on the
// samples too.
template <class Sample, class Compress>
std::optional<float> kth_largest(int64_t n, int64_t k, SortScratch scratch, size_t* candidates,
                                 Sample sample, Compress compress) {
  // One sample per 128 entries, 64 to 512 of them: a fixed cost that shrinks with the row.
  constexpr int64_t kMaxSamples = 512, kSmallJ = 8;
  float samples[kMaxSamples];
  const int64_t m = std::min(n, std::clamp<int64_t>(n / 128, 64, kMaxSamples));
  const int64_t stride = n / m;
  // Samples among the top k - 1 number (k - 1) m / n on average: j above twice that (rounded
  // up) plus one fails (too few pass) about once in a thousand rows, and then j grows.
  int64_t j = std::min<int64_t>(m - 1, (2 * k * m + n - 1) / n + 1);
  // The usual small j: the j + 1 largest samples kept sorted while sampling (no selection pass).
  float largest[kSmallJ + 1];
  int64_t kept = 0;
  for (int64_t i = 0; i < m; ++i) {
    const float v = samples[i] = sample(i * stride);
    if (j > kSmallJ || (kept == j + 1 && v <= largest[j])) continue;
    int64_t at = kept < j + 1 ? kept++ : j;
    for (; at > 0 && largest[at - 1] < v; --at) largest[at] = largest[at - 1];
    largest[at] = v;
  }
  constexpr float kLowest = std::numeric_limits<float>::lowest();
  for (;;) {
    float threshold = kLowest;
    if (j <= kSmallJ && j < m - 1) {
      threshold = std::max(largest[j], kLowest);
    } else if (j < m - 1) {
      threshold = std::max(
          cpu::kth_largest_value(samples, static_cast<size_t>(m), static_cast<size_t>(j) + 1),
          kLowest);
    }
    const size_t count = compress(threshold);
    if (count == kNotListed) return std::nullopt;
    const bool enough = static_cast<int64_t>(count) >= k;
    if (enough || threshold == kLowest) {
      *candidates = count;  // not enough at the lowest float: fewer than k finite, the k-th -inf
      return enough ? kth_listed(scratch, count, static_cast<size_t>(k)) : kNegInf;
    }
    j = j * 4 + 16;
  }
}

// The k-th largest (duplicates counted) of the finite entries entry(i), i < n, of a NaN-free row;
// -inf when fewer than k are finite. A radix select over their keys, four passes over the row and
// no list: for a row whose candidates would pass the lists' room (a top-k or top-N of over about
// an eighth of the row, whose 2k candidates pass a quarter, or ties).
template <class Entry>
float kth_largest_in_row(size_t n, size_t k, Entry entry) {
  size_t finite = 0;
  for (size_t i = 0; i < n; ++i) finite += entry(i) != kNegInf;
  if (finite < k) return kNegInf;
  const uint64_t key = nth_smallest_key(
      n,
      [&](size_t i) {
        const float v = entry(i);
        return v == kNegInf ? kNoKey : uint64_t{orderable(v)};
      },
      false, 0, finite - k + 1, /*from_shift=*/24);
  return from_orderable(static_cast<uint32_t>(key));
}

// Spec §9.3 over the finite entries of x, as top_p_keep decides on their list (the oracle's
// arithmetic in the oracle's order), for a row whose list would pass the lists' room: the order
// is walked twice by value ranges that fit scratch.keys, instead of listed (scratch.ids holds
// each range's indices). Masks x.
void top_p_over_row(float* x, size_t n, float top_p, SortScratch scratch);

// Keeps the listed candidates >= kth (top-k: ties at the k-th value kept, spec §9.2; min_p: its
// smallest kept logit), in id order; returns how many.
size_t keep_at_least(SortScratch scratch, size_t candidates, float kth);

// Spec §9.3 on a list of `kept` entries (scratch.ids / values, id order) with the oracle's
// arithmetic in the oracle's order (ascending_key, sorted in scratch.keys, or the list itself
// sorted by chunks when longer): sets x[id] = -inf for each entry masked (x may be null), leaves
// the survivors in scratch in id order and returns how many.
size_t top_p_keep(size_t kept, float top_p, SortScratch scratch, float* x);

// The oracle's draw (inverse CDF, double cumulative sum of float32 weights exp(v - max), zero
// weights skipped) over `listed` entries in id order: value_at(i) is entry i's logit, ids[i] its
// id. An empty or all -inf list gives 0.
template <class ValueAt>
TokenId draw_over_list(size_t listed, const int32_t* ids, double u, ValueAt value_at) {
  float max = kNegInf;
  for (size_t i = 0; i < listed; ++i) max = std::max(max, value_at(i));
  if (max == kNegInf) return 0;
  double total = 0;
  for (size_t i = 0; i < listed; ++i) total += std::exp(value_at(i) - max);
  const double target = u * total;
  double cumulative = 0;
  TokenId last_kept = 0;
  for (size_t i = 0; i < listed; ++i) {
    const float weight = std::exp(value_at(i) - max);
    if (weight == 0.0f) continue;
    cumulative += weight;
    last_kept = ids[i];
    if (cumulative > target) return last_kept;
  }
  return last_kept;
}

// The k largest values(x) among `listed` entries of scratch.ids / values (x), when they hold every
// entry whose value is >= v: their ids into ids[0, m), descending value, equal values by
// ascending id (the oracle's order, as one unsigned key, sorted in scratch.keys, or by chunks
// when more pass than it holds); returns m = min(k, how many pass).
template <class Values>
size_t largest_listed(SortScratch scratch, size_t listed, Values values, float v, int64_t k,
                      TokenId* ids) {
  auto key_of = [&](size_t i, float value) {
    return (uint64_t{~orderable(value)} << 32) | static_cast<uint32_t>(scratch.ids[i]);
  };
  auto key_at = [&](size_t i) {
    const float value = values(scratch.values[i]);
    return value >= v ? key_of(i, value) : kNoKey;
  };
  uint64_t* keys = scratch.keys.data();
  const auto kk = static_cast<size_t>(k);
  size_t count = 0;
  // Each key stored, counted only when it passes: a branch on the pass mispredicted about every
  // other entry of a list some twice the shown.
  for (size_t i = 0; i < listed; ++i) {
    const float value = values(scratch.values[i]);
    if (count == scratch.keys.size()) {  // full: another that passes is too many to sort at once
      if (!(value >= v)) continue;
      size_t shown = 0;  // the first k by chunks
      for_each_ascending(listed, key_at, scratch.keys, [&](const uint64_t* sorted, size_t m) {
        for (size_t j = 0; j < m && shown < kk; ++j)
          ids[shown++] = static_cast<TokenId>(sorted[j] & 0xffffffffu);
        return shown < kk;
      });
      return shown;
    }
    keys[count] = key_of(i, value);
    count += value >= v;
  }
  // Sorted by sort_keys; where more than twice the shown pass (ties at v), the shown smallest keys
  // selected first and sorted alone. std::partial_sort's heap took some 50 of the 120 us of a
  // 128k fp32 row shown with 1000 logprobs (one thread).
  const size_t shown = std::min(count, kk);
  const bool select_first = count > 2 * shown;
  if (select_first) std::nth_element(keys, keys + shown, keys + count);
  cpu::sort_keys(keys, select_first ? shown : count);
  for (size_t i = 0; i < shown; ++i) ids[i] = static_cast<TokenId>(keys[i] & 0xffffffffu);
  return shown;
}

// Completes a top-N of k whose first `shown` ids hold the largest finite values (shown < k only
// when fewer than k entries are finite, or on an unchecked row): the entries whose value is -inf
// follow by ascending id, the oracle's order among equal values, then id 0 should any room be
// left (NaN entries, which no top-N lists); out[i] = value_of(ids[i]), the row's own value (a
// key cannot tell -0 from +0).
template <class ValueOf>
void finish_top_n(size_t shown, int64_t n, int64_t k, ValueOf value_of, TokenId* ids, float* out) {
  const auto kk = static_cast<size_t>(k);
  for (int64_t i = 0; shown < kk && i < n; ++i)
    if (value_of(static_cast<TokenId>(i)) == kNegInf) ids[shown++] = static_cast<TokenId>(i);
  for (size_t i = 0; i < kk; ++i) {
    if (i >= shown) ids[i] = 0;
    out[i] = i < shown ? value_of(ids[i]) : kNegInf;
  }
}

// A top-N (ids, out) of the k largest values(entry(i)) of a NaN-free row of n entries, as
// largest_listed and finish_top_n give it from a list of the candidates, for a row whose
// candidates would pass the lists' room: the k-th largest entry by kth_largest_in_row, then the
// entries whose value passes its value v (fewer than k) walked in order by chunks of
// scratch.keys, then those whose value is v by ascending id, the oracle's order among equals,
// while room is left: a scan, where walking them by chunks cost a padding row of 128k zeros
// shown with 20 logprobs 4 ms. row: the entries as a float32 row when they are one (else null),
// whose k-th the vector counting passes find (on that row of zeros, one min / max pass where the
// radix select took four scalar ones); known_kth: the k-th largest entry when the caller knows it.
template <class Entry, class Values>
void top_n_over_row(size_t n, Entry entry, Values values, int64_t k, TokenId* ids, float* out,
                    SortScratch scratch, const float* row = nullptr,
                    std::optional<float> known_kth = std::nullopt) {
  const auto kk = static_cast<size_t>(k);
  // The k-th of all n is -inf when fewer than k are finite, as kth_largest_in_row's.
  const float kth = known_kth        ? *known_kth
                    : row != nullptr ? cpu::kth_largest_value(row, n, kk)
                                     : kth_largest_in_row(n, kk, entry);
  // Fewer than k finite: every finite one, as the lists give them (the -inf ones follow). A
  // finite k-th whose value is -inf (x - max overflows) ties with every -inf one, by id.
  const float v = kth == kNegInf ? std::numeric_limits<float>::lowest() : values(kth);
  auto key_at = [&](size_t i) {
    const float value = values(entry(i));
    return value > v ? (uint64_t{~orderable(value)} << 32) | i : kNoKey;
  };
  size_t shown = 0;
  for_each_ascending(n, key_at, scratch.keys, [&](const uint64_t* sorted, size_t m) {
    for (size_t j = 0; j < m && shown < kk; ++j)
      ids[shown++] = static_cast<TokenId>(sorted[j] & 0xffffffffu);
    return shown < kk;
  });
  for (size_t i = 0; i < n && shown < kk; ++i)
    if (values(entry(i)) == v) ids[shown++] = static_cast<TokenId>(i);
  finish_top_n(
      shown, static_cast<int64_t>(n), k,
      [&](TokenId i) { return values(entry(static_cast<size_t>(i))); }, ids, out);
}

// Sorts n <= 1024 floats ascending (no NaN; -0 and +0 come out as +0) by their orderable keys: a
// radix sort, 4 passes of 8 bits. std::sort on 512 random floats mispredicts most comparisons.
// from_bit 16: two passes, by the keys' top 16 bits only (the order of the values truncated to
// bf16).
void sort_samples(float* values, size_t n, unsigned from_bit = 0);

// Where top-p's ascending cumulative probability should cross cut: m evenly spaced samples of the
// probabilities (q_at(sample_at(n, j)) for j < m, in that order), sorted once; each stands for
// n / m tokens, so their running sum estimates the cumulative mass. band(margin) reaches `margin`
// samples either side of where the estimate passes the cut; margin 0, or a short row, gives every
// probability (0, 2).
class BandGuess {
 public:
  static constexpr size_t kSamples = 512;
  // Whether a row of n is sampled (a short row's band is all of it), and where sample j lies.
  static bool sampled(size_t n) { return n >= 8 * kSamples; }
  static size_t sample_at(size_t n, size_t j) { return j * (n / kSamples); }

  template <class QAt>
  BandGuess(size_t n, float cut, QAt q_at) {
    if (!sampled(n)) return;
    for (size_t j = 0; j < kSamples; ++j) samples_[j] = q_at(sample_at(n, j));
    sort_samples(samples_, kSamples);
    const double weight = static_cast<double>(n) / kSamples;
    double estimate = 0;
    for (crossing_ = 0; crossing_ < kSamples; ++crossing_) {
      estimate += samples_[crossing_] * weight;
      if (estimate > cut) break;
    }
    sampled_ = true;
  }
  void band(size_t margin, float* lo, float* hi) const {
    *lo = 0.0f;
    *hi = 2.0f;
    if (margin == 0 || !sampled_) return;
    if (crossing_ >= margin) *lo = samples_[crossing_ - margin];
    if (crossing_ + margin < kSamples) *hi = samples_[crossing_ + margin];
  }

 private:
  float samples_[kSamples];
  size_t crossing_ = 0;
  bool sampled_ = false;
};

// Spec §9.3 decided on a band: ids[0, count) in id order with probabilities q_at(i) and logits
// value_at(i), every probability below the band (those < lo) adding up to `below` and masked by
// the caller. The band is histogrammed by the float bits of q (32 buckets an octave, from lo up
// to min(hi, 1)); buckets whose whole mass keeps the ascending cumulative sum <= cut (1 - p) are
// masked, buckets above the crossing one kept, and the crossing bucket's entries are walked in
// the oracle's order (ascending value, larger id first) with the oracle's rule, sorted in
// scratch.keys, or by chunks when the bucket holds more. mask(i) is called for every band entry
// masked, never for the entry whose id is `top`.
template <class QAt, class ValueAt, class Mask>
void mask_band(const int32_t* ids, size_t count, QAt q_at, ValueAt value_at, double below, float lo,
               float hi, float cut, TokenId top, SortScratch scratch, Mask mask) {
  // Probabilities are in [0, 1]: keys up to those of 1.0, kHistogramSize of them.
  auto key = [](float v) { return std::bit_cast<uint32_t>(v) >> kHistogramShift; };
  const uint32_t first_key = key(lo);
  const size_t buckets = key(std::min(hi, 1.0f)) - first_key + 1;  // <= kHistogramSize
  // Doubles' bits in the keys' storage (SortScratch), done with before the first key is written.
  uint64_t* const mass_bits = scratch.histogram.data();
  auto mass = [mass_bits](size_t bucket) { return std::bit_cast<double>(mass_bits[bucket]); };
  std::fill(mass_bits, mass_bits + buckets, std::bit_cast<uint64_t>(0.0));
  for (size_t i = 0; i < count; ++i) {
    const size_t bucket = key(q_at(i)) - first_key;
    mass_bits[bucket] = std::bit_cast<uint64_t>(mass(bucket) + q_at(i));
  }
  double cumulative = below;
  size_t crossing = 0;
  for (; crossing + 1 < buckets; ++crossing) {
    if (static_cast<float>(cumulative + mass(crossing)) > cut) break;
    cumulative += mass(crossing);
  }
  // The crossing bucket's entries by ascending_key with the list index for the id: the list is in
  // id order, so the order is the oracle's. From here the histogram's words may hold keys.
  uint64_t* keys = scratch.keys.data();
  size_t walked = 0;
  for (size_t i = 0; i < count; ++i) {
    const size_t bucket = key(q_at(i)) - first_key;
    if (bucket < crossing && ids[i] != top) {
      mask(i);
    } else if (bucket == crossing) {
      if (walked < scratch.keys.size())
        keys[walked] = ascending_key(value_at(i), static_cast<int32_t>(i));
      ++walked;
    }
  }
  // The walk over sorted keys, masking in its order (a caller's mask may subtract from a sum);
  // false at the first sum above the cut, as the sum never decreases.
  auto walk = [&](const uint64_t* sorted, size_t m) {
    for (size_t k = 0; k < m; ++k) {
      const auto i = static_cast<size_t>(key_id(sorted[k]));
      cumulative += q_at(i);
      if (static_cast<float>(cumulative) > cut) return false;
      // A p so small that 1 - p rounds to about 1 can put the cut above every bucket, the top
      // token's included (rounded masses sum to just under 1): the largest is never masked, §9.3.
      if (ids[i] != top) mask(i);
    }
    return true;
  };
  if (walked <= scratch.keys.size()) {
    cpu::sort_keys(keys, walked);
    walk(keys, walked);
    return;
  }
  // Too many to sort at once (probabilities all but equal): by chunks. A masked entry's key
  // leaves the walk's remaining keys: its q leaves the bucket (set to -1 or 0) or its value
  // drops to -inf, below the chunk's.
  for_each_ascending(
      count,
      [&](size_t i) {
        return key(q_at(i)) - first_key == crossing
                   ? ascending_key(value_at(i), static_cast<int32_t>(i))
                   : kNoKey;
      },
      scratch.keys, walk);
}

// The bisection of the keys (lo, hi]: lo fails (or is -inf's key, untested), hi passes (or is
// +inf's, assumed to).
template <class Passes>
float smallest_passing_between(Passes passes, uint32_t lo, uint32_t hi) {
  while (hi - lo > 1) {
    const uint32_t mid = lo + (hi - lo) / 2;
    (passes(from_orderable(mid)) ? hi : lo) = mid;
  }
  return from_orderable(hi);
}

// The smallest float v for which passes(v) holds, for a test monotone in v that +inf passes
// (-inf if it passes too): a bisection over the orderable keys, 32 steps at most.
template <class Passes>
float smallest_passing(Passes passes) {
  if (passes(kNegInf)) return kNegInf;
  return smallest_passing_between(passes, orderable(kNegInf),
                                  orderable(std::numeric_limits<float>::infinity()));
}

// smallest_passing near a guess: from the guess's key, steps of 1, 2, 4, ... keys towards the
// answer until the test changes, then a bisection of that bracket. A monotone test has one
// smallest passing float, so this is the same float; a guess a few ULPs off takes a handful of
// tests instead of 32 (a divide or an exp each, in a dependent chain: the 32 divisions of a
// top-k row's listing threshold were 3% of a 32k row), a guess far off up to 64. A NaN guess
// bisects the whole range.
template <class Passes>
float smallest_passing(Passes passes, float guess) {
  if (std::isnan(guess)) return smallest_passing(passes);
  const uint32_t bottom = orderable(kNegInf),
                 top = orderable(std::numeric_limits<float>::infinity());
  // lo fails (or is bottom, untested), hi passes (or is top, assumed to).
  uint32_t lo = orderable(guess), hi = lo;
  if (passes(guess)) {
    for (uint64_t step = 1;; step *= 2) {
      if (hi - bottom <= step) {
        if (passes(kNegInf)) return kNegInf;
        lo = bottom;
        break;
      }
      const auto below = static_cast<uint32_t>(hi - step);
      if (!passes(from_orderable(below))) {
        lo = below;
        break;
      }
      hi = below;
    }
  } else {
    for (uint64_t step = 1;; step *= 2) {
      if (top - lo <= step) {
        hi = top;
        break;
      }
      const auto above = static_cast<uint32_t>(lo + step);
      if (passes(from_orderable(above))) {
        hi = above;
        break;
      }
      lo = above;
    }
  }
  return smallest_passing_between(passes, lo, hi);
}

// The oracle's probability test, std::exp(v - max) * inv_sum < threshold (min_p's strict rule;
// top-p's "probability 0" at p = 1), is monotone in v, so it masks the logits below a threshold:
// the smallest kept float, found by bisection with the oracle's own arithmetic.
float smallest_kept(float max, float inv_sum, float threshold);

// Where min_p's test (smallest_kept(max, inv_sum, min_p * inv_sum)) can fall for any sum: inv_sum
// = 1 / sum lies in [2^-21, 1] (the sum holds the max's 1 and at most 2^20 terms). Whatever its
// value, rounding being monotone, every w = std::exp(v - max) >= min_p is kept, and every w 4 ULPs
// or more below min_p (2^-22 relative: more than the two products' roundings, which stay normal
// for min_p >= kSmallestDecidedMinP) is masked. So the test's smallest kept logit lies in
// [masked_below, kept_from], the logits where w reaches those two bounds (by bisection).
inline constexpr float kSmallestDecidedMinP = 0x1p-100f;
struct MinPCut {
  float masked_below;  // every entry below it is masked, whatever the sum
  float kept_from;     // every entry at or above it is kept, whatever the sum
};
MinPCut min_p_cut(float max, float min_p);  // min_p >= kSmallestDecidedMinP, max finite

// An inverse-CDF draw's first step: the start of the block holding target, skipping whole
// blocks of `block` entries (of n; block b's weights sum to sums[b]) while the cumulative sum
// with them stays <= target, never the last block. The skipped sums are added to *cumulative.
inline size_t block_holding(const double* sums, size_t n, size_t block, double target,
                            double* cumulative) {
  size_t start = 0;
  for (size_t b = 0; start + block < n && *cumulative + sums[b] <= target; ++b, start += block)
    *cumulative += sums[b];
  return start;
}

// Rows of any length are cut into at most kMaxBlocks blocks of a fixed size (a multiple of every
// lane count) that depends only on n: sums and draws never depend on threads.
inline constexpr size_t kMaxBlocks = 512;
inline size_t block_size(int64_t n) {
  const auto per_block = (static_cast<size_t>(n) + kMaxBlocks - 1) / kMaxBlocks;
  return std::max<size_t>(2048, (per_block + 63) / 64 * 64);
}

}  // namespace lastmile::detail::cpu_selection
