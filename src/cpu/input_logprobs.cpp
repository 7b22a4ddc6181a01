// lastmile — the CPU backend's raw-mode logprobs read from a caller's row (spec §3.1, §4).
// No snapshot is kept: the caller's row is the raw tensor, and the raw values are a monotone map
// of it (RawValues). So every rank and top-N question about values becomes a logit threshold:
// the smallest float whose value reaches v, found by bisection with the map's own arithmetic.
// Entries at or above it are exactly those whose value is >= v, rounding ties included. One
// vector pass over the caller's row (no division, no writes) gives the softmax statistics and
// each block's max; the rank's count and the top-N's list then read only the blocks whose max
// reaches their threshold: a few blocks of 2048, not the row (without those two passes over
// the whole row, a penalised greedy 128k row with 5 logprobs went from 185 to 128 us).
// (Listing the entries near the max on the statistics pass, to answer from the list, was slower:
// its per-block compress cost as much as the separate passes over the cached row.)
#include "cpu/input_logprobs.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cpu/input_draw.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {
namespace {

// The smallest float x with values(x) >= v (-inf for v = -inf: every entry passes).
float smallest_with_value_at_least(RawValues values, float v) {
  const float guess =
      values.max == -std::numeric_limits<float>::infinity() ? v : v + values.log_sum + values.max;
  return smallest_passing([&](float x) { return values(x) >= v; }, guess);
}

float entry(const void* src, DType dtype, size_t i) { return scaled_entry(src, dtype, i, 1.0f); }

// The k largest values among `listed` entries of scratch (which hold every entry whose value is
// >= v, and at least k of them; or every finite entry, fewer than k), descending, equal values by
// ascending id; then, if fewer than k, the -inf ones by id (finish_top_n).
void top_n_of_list(const void* src, DType dtype, size_t n, RawValues values, size_t listed, float v,
                   int64_t k, TokenId* ids, float* out, SortScratch scratch) {
  const size_t shown = largest_listed(scratch, listed, values, v, k, ids);
  finish_top_n(
      shown, static_cast<int64_t>(n), k,
      [&](TokenId i) { return values(entry(src, dtype, static_cast<size_t>(i))); }, ids, out);
}

// Entries >= threshold of the blocks whose max reaches it (no other block holds one): (id, x)
// into scratch in id order; returns how many, or kNotListed when they pass the lists' room.
size_t list_blocks_at_least(const void* src, DType dtype, size_t n, const BlockMaxima& maxima,
                            float threshold, SortScratch scratch) {
  const size_t room = scratch.list_room();
  size_t count = 0;
  for (size_t b = 0; b < maxima.blocks; ++b) {
    if (maxima.max[b] < threshold) continue;
    const size_t begin = b * maxima.block, size = std::min(maxima.block, n - begin);
    bool bad = false;  // checked by step 2 or an input path
    const size_t listed = cpu::compress_source(entry_at(src, dtype, begin), dtype, size, threshold,
                                               scratch.ids.data() + count,
                                               scratch.values.data() + count, &bad, room - count);
    if (count + listed > room) return kNotListed;
    for (size_t i = count; i < count + listed; ++i) scratch.ids[i] += static_cast<int32_t>(begin);
    count += listed;
  }
  return count;
}

// Number of entries >= threshold, counted in the blocks whose max reaches it.
int64_t count_blocks_at_least(const void* src, DType dtype, size_t n, const BlockMaxima& maxima,
                              float threshold) {
  int64_t count = 0;
  for (size_t b = 0; b < maxima.blocks; ++b) {
    if (maxima.max[b] < threshold) continue;
    const size_t begin = b * maxima.block;
    count += cpu::count_source_at_least(entry_at(src, dtype, begin), dtype,
                                        std::min(maxima.block, n - begin), threshold);
  }
  return count;
}

// The k-th largest of the maxima, 1 <= k <= maxima.blocks.
float kth_largest_block_max(const BlockMaxima& maxima, size_t k) {
  return cpu::kth_largest_value(maxima.max, maxima.blocks, k);
}

// The k largest values of the caller's row. Each block max is an entry, so the k-th largest of
// them, m, has k entries at or above it: the k largest entries are >= m, in the blocks whose max
// reaches m (about k blocks, not the row). With fewer blocks than k (20 logprobs of a 32k row,
// 64 of a 128k one), the same by finer groups, their maxima from one more max pass, or for a k
// large for those too, a sampled threshold: the blocks alone gave no m and listed the whole row
// (a greedy 32k row with 20 logprobs took 260 us, not 19). The k-th largest entry x_k is selected
// among those; the k largest values are the entries >= the smallest float whose value reaches
// values(x_k) (x_k itself unless rounding ties lower entries with it: then listed again from
// there). Candidates past the lists' room (ties, or k over about an eighth of the row): the same
// top-N from the row itself (top_n_over_row).
void top_n_by_blocks(const void* src, DType dtype, size_t n, RawValues values,
                     const BlockMaxima& maxima, int64_t k, TokenId* ids, float* out,
                     SortScratch scratch, const ParallelFor& parallel) {
  const auto kk = static_cast<size_t>(k);
  auto over_row = [&](std::optional<float> known_kth = std::nullopt) {
    top_n_over_row(
        n, [&](size_t i) { return entry(src, dtype, i); }, values, k, ids, out, scratch,
        dtype == DType::f32 ? static_cast<const float*>(src) : nullptr, known_kth);
  };
  float floor = kNegInf;  // every entry >= it is listed
  size_t listed = 0;
  std::optional<float> kth;
  if (maxima.blocks >= kk) {
    const float kth_max = kth_largest_block_max(maxima, kk);
    // Fewer than k blocks hold a finite entry (a masked row): the finite ones, not the row.
    floor = kth_max == kNegInf ? std::numeric_limits<float>::lowest() : kth_max;
    listed = list_blocks_at_least(src, dtype, n, maxima, floor, scratch);
    // k blocks or more whose max is the row's hold k entries or more equal to it: it is the k-th
    // largest (a padding row of zeros; a bf16 one's k-th cost four scalar passes, 1.4 ms at 128k).
    if (listed == kNotListed)
      return over_row(kth_max > kNegInf && kth_max == kth_largest_block_max(maxima, 1)
                          ? std::optional<float>(kth_max)
                          : std::nullopt);
  } else {
    kth = kth_largest_by_groups(src, dtype, n, 1.0f, k, scratch, &listed, parallel, &floor);
    if (!kth)  // k large for the groups too (over a quarter of them): a sampled threshold
      kth = kth_largest(
          static_cast<int64_t>(n), k, scratch, &listed,
          [&](int64_t i) {
            const float x = entry(src, dtype, static_cast<size_t>(i));
            return std::isnan(x) ? kNegInf : x;  // the samples' selection needs an order
          },
          [&](float threshold) {
            floor = threshold;
            return list_blocks_at_least(src, dtype, n, maxima, threshold, scratch);
          });
    if (!kth) return over_row();  // past the room
  }
  // Fewer than k listed: fewer than k finite entries, every one listed (a floor that is a k-th
  // largest max lists k or more, unless it is -inf), or an unchecked row.
  if (listed < kk)  // the finite values first: a finite entry can map to -inf (x - max overflows)
    return top_n_of_list(src, dtype, n, values, listed, std::numeric_limits<float>::lowest(), k,
                         ids, out, scratch);
  const float v = values(kth ? *kth : kth_listed(scratch, listed, kk));
  const float from = smallest_with_value_at_least(values, v);
  if (from < floor) listed = list_blocks_at_least(src, dtype, n, maxima, from, scratch);
  if (listed == kNotListed) return over_row();
  top_n_of_list(src, dtype, n, values, listed, v, k, ids, out, scratch);
}

// log_softmax's max and log-sum of the caller's float32 view, with its block maxima: block
// statistics in one read, or (over 2^20 entries) plainly.
RawValues log_softmax_terms(const void* src, DType dtype, int64_t n, BlockMaxima* maxima,
                            const ParallelFor& parallel) {
  float max = kNegInf;
  double total = 0;
  if (!caller_row_softmax(src, dtype, n, &max, &total, maxima, {}, parallel)) {
    static_cast<void>(caller_row_block_maxima(src, dtype, n, maxima));  // a checked row
    const auto size = static_cast<size_t>(n);
    for (size_t i = 0; i < size; ++i) max = std::max(max, entry(src, dtype, i));
    if (max != kNegInf)
      for (size_t i = 0; i < size; ++i) total += std::exp(entry(src, dtype, i) - max);
  }
  return log_softmax_map(max, total);
}

}  // namespace

RawValues log_softmax_map(float max, double total) {
  if (max == kNegInf) return {kNegInf, 0.0f};  // the identity: the row stays -inf
  // The max's own term is exp(0) = 1, so the total is at least 1; the statistics at t = 1 sum
  // exp(x) and scale after, which can leave it up to 4.6e-7 under (and a lone max's logprob
  // positive).
  return {max, static_cast<float>(std::log(std::max(total, 1.0)))};
}

bool summarise_while_converting(const void* src, DType dtype, int64_t n, float* dst,
                                const uint64_t* seen, float repetition_penalty,
                                RawRowSummary* summary, const ParallelFor& parallel,
                                cpu::GroupMaxima groups) {
  float max = kNegInf;
  double total = 0;
  if (!caller_row_softmax(src, dtype, n, &max, &total, &summary->maxima,
                          {dst, seen, repetition_penalty},
                          dst == nullptr ? parallel : ParallelFor{}, groups))
    return false;
  summary->values = log_softmax_map(max, total);
  return true;
}

RawLogprobs raw_logprobs_of_caller_row(const void* src, DType dtype, int64_t n, bool log_softmax,
                                       TokenId token_id, int64_t k, TokenId* ids, float* out,
                                       SortScratch scratch, const RawRowSummary* summary,
                                       const ParallelFor& parallel) {
  const auto size = static_cast<size_t>(n);
  const bool summarised =  // known, and of this row's length as far as its blocking tells
      log_softmax && summary != nullptr && summary->known &&
      summary->maxima.block == block_size(n) &&
      summary->maxima.blocks == (size + summary->maxima.block - 1) / summary->maxima.block;
  BlockMaxima local;
  const BlockMaxima& maxima = summarised ? summary->maxima : local;
  RawValues values;
  if (summarised)
    values = summary->values;
  else if (log_softmax)
    values = log_softmax_terms(src, dtype, n, &local, parallel);
  else
    static_cast<void>(caller_row_block_maxima(src, dtype, n, &local, parallel));  // checked
  const float v = values(entry(src, dtype, static_cast<size_t>(token_id)));
  const int64_t rank =
      count_blocks_at_least(src, dtype, size, maxima, smallest_with_value_at_least(values, v));
  if (k > 0) top_n_by_blocks(src, dtype, size, values, maxima, k, ids, out, scratch, parallel);
  return {values, rank};
}

}  // namespace lastmile::detail::cpu_selection
