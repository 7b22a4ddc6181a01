// lastmile — min_p, and temperature alone, drawn from a caller's row in place (input_draw.hpp):
// block maxima and a listing where they decide the kept set, else the statistics with a list of
// the entries near the max taken on the way; over a penalised row, from a list of the caller's
// entries near its max, or block by block through the row's callbacks.
#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>

#include "cpu/input_draw.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {

// min_p without the softmax's sum: when no entry lies in min_p_cut's range (selection.hpp), the
// kept set is the one the statistics pass would give for any sum, so block maxima and a listing
// of the blocks that reach the range decide it, with no Exp pass; the same list in id order, so
// the same token. Whether a row of n entries may be decided so by its blocks of block_size(n) (a
// penalised row's): min_p large enough for the cut, blocks no longer than row_softmax's (the same
// rows as the statistics), and 4 blocks at least (the max's own block reaches the cut, so fewer
// always list over a quarter).
bool min_p_by_maxima_fits(size_t n, float min_p) {
  static_assert(cpu::kStatisticsBlock <= kPenalisedBlock,
                "a penalised row reads such blocks whole");
  const size_t block = block_size(static_cast<int64_t>(n));
  return min_p >= kSmallestDecidedMinP && block <= cpu::kStatisticsBlock &&
         (n + block - 1) / block >= 4;
}

namespace {

// Whether at most a quarter of the blocks reach the cut's range by their (quotient) maxima: else
// the listing would read most of the row, and the statistics decide.
bool few_blocks_reach(const float* maxima, size_t blocks, const MinPCut& cut) {
  const auto reaching =
      std::count_if(maxima, maxima + blocks, [&](float m) { return m >= cut.masked_below; });
  return 4 * static_cast<size_t>(reaching) <= blocks;
}

// The draw over the entries at or above cut.masked_below, listed in id order in scratch;
// nullopt when one lies in the cut's range, where only the sum decides it.
std::optional<TokenId> draw_over_min_p_list(size_t listed, const MinPCut& cut, double u,
                                            SortScratch scratch) {
  const float* values = scratch.values.data();
  if (std::any_of(values, values + listed, [&](float v) { return v < cut.kept_from; }))
    return std::nullopt;
  return draw_over_list(listed, scratch.ids.data(), u, [values](size_t i) { return values[i]; });
}

// min_p by the maxima of the row src / t; nullopt: the statistics decide (*row_max then holds the
// row's max if the maxima were read, for their near list).
std::optional<TokenId> draw_min_p_by_maxima(const void* src, DType dtype, size_t n,
                                            const DrawParams& params, double u, SortScratch scratch,
                                            const ParallelFor& parallel, float* row_max) {
  // By groups, not the row's blocks of 2048: a 32k row has 16 such blocks, more than a quarter
  // of which reached an LLM row's cut, and min_p there cost more than at 128k. The same rows as
  // the statistics (group_size declines those over 2^20), of 4 groups at least.
  const size_t group = group_size(n);
  if (params.min_p < kSmallestDecidedMinP || group == 0) return std::nullopt;
  const size_t groups = (n + group - 1) / group;
  if (groups < 4) return std::nullopt;
  float maxima[kMaxGroups];
  if (!quotient_block_maxima(src, dtype, n, params.temperature, group, maxima, parallel))
    return kNoInputDraw;  // the steps report it
  const float max = *std::max_element(maxima, maxima + groups);
  if (max == kNegInf) return 0;  // the oracle's draw on an all -inf row
  *row_max = max;
  const MinPCut cut = min_p_cut(max, params.min_p);
  if (!few_blocks_reach(maxima, groups, cut)) return std::nullopt;
  bool past_room = false;
  const size_t listed = list_scaled_at_least(src, dtype, n, params.temperature, cut.masked_below,
                                             scratch, parallel, {maxima, group}, &past_room);
  if (past_room) return std::nullopt;
  if (listed == kNotListed) return kNoInputDraw;
  return draw_over_min_p_list(listed, cut, u, scratch);
}

// min_p alone over a penalised row from a list of the caller's entries near its max M (the
// largest of `bounds`), as top-k's and top-p's penalised rows list theirs: the entries at or above
// F = M + t log(min_p) - kMinPListBelowCut are listed, lowered (PenalisedRow::lower) and divided.
// Step 6 only lowers, so when the cut the listed max sets lies above F's quotient, that max is the
// working row's and every entry that reaches the cut is listed: the list of
// draw_min_p_by_maxima over the working row (and of the statistics when none lies in the cut's
// range), so the same token. The bench mix's min-p rows read some 5-10 blocks through the blocks
// path below. nullopt: the blocks path decides (the max lowered by more than the margin, or a
// list past a long list's length).
constexpr float kMinPListBelowCut = 1.0f;
std::optional<TokenId> draw_min_p_from_list(const PenalisedRow& row, size_t n,
                                            const DrawParams& params, double u, SortScratch scratch,
                                            const BlockMaxima& bounds,
                                            const ParallelFor& parallel) {
  const float raw_max = *std::max_element(bounds.max, bounds.max + bounds.blocks);
  const float t = params.temperature;
  const float from = raw_max + t * std::log(params.min_p) - kMinPListBelowCut;
  if (!std::isfinite(from)) return std::nullopt;
  bool past_room = false;
  const size_t listed = list_scaled_at_least(row.src, row.dtype, n, 1.0f, from, scratch, parallel,
                                             {bounds.max, bounds.block}, &past_room);
  if (listed == kNotListed || listed == 0 || listed > kLongList) return std::nullopt;
  float quotient_from = from;
  if (!lower_and_divide(row, scratch, listed, t, &quotient_from)) return kNoInputDraw;
  const float* const values = scratch.values.data();
  // The cut lies at or below the listed max: above F's quotient, it also shows that max reached
  // F, so it is the working row's (every unlisted entry stays below F).
  const MinPCut cut = min_p_cut(cpu::row_max(values, listed), params.min_p);
  if (!(quotient_from < cut.masked_below)) return std::nullopt;  // unlisted ones may reach it
  const size_t kept = keep_at_least(scratch, listed, cut.masked_below);
  return draw_over_min_p_list(kept, cut, u, scratch).value_or(kNoInputDraw);
}

}  // namespace

// Temperature only, or min_p. min_p keeps the entries >= about max + log(min_p): the statistics
// pass lists those within a margin of that on the way, so the survivors need no second read
// (unless rounding put the threshold lower). The list starts from the max the group maxima gave:
// from each block's running max it overflowed its room on a flat row's first blocks, and the row
// was listed again (with the four-vector compress, a flat row 110.7 -> 85.6 us, one thread).
TokenId draw_by_softmax(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                        SortScratch scratch, const ParallelFor& parallel, RawRowSummary* summary) {
  constexpr float kMinPMargin = 0.01f;
  const auto size = static_cast<size_t>(n);
  const float t = params.temperature;
  cpu::NearMax near;
  if (params.min_p > 0.0f) {
    float max = kNegInf;
    if (const std::optional<TokenId> token =
            draw_min_p_by_maxima(src, dtype, size, params, u, scratch, parallel, &max))
      return *token;
    near = {std::log(params.min_p) - kMinPMargin,
            scratch.ids.data(),
            scratch.values.data(),
            0,
            scratch.list_room(),
            max};
  }
  RowSoftmax row;
  if (!row_softmax(src, dtype, size, t, &near, &row, parallel)) return kNoInputDraw;
  learn_raw_summary(row, t, summary);
  if (row.max == kNegInf) return 0;  // the oracle's draw on an all -inf row
  if (params.min_p > 0.0f) {
    const auto inv_sum = static_cast<float>(1.0 / row.total);
    const float from = smallest_kept(row.max, inv_sum, params.min_p * inv_sum);
    if (from == kNegInf) return kNoInputDraw;  // min_p masks nothing: the dense draw
    size_t listed = near.count;
    // The list may miss some, or stopped at its room: read the row again.
    if (near.count > near.room || from < row.max + near.below_max)
      listed = list_scaled_at_least(src, dtype, size, t, from, scratch, parallel,
                                    {row.block_max, row.block});
    if (listed == kNotListed) return kNoInputDraw;
    const size_t kept = keep_at_least(scratch, listed, from);
    const float* values = scratch.values.data();
    if (kept > kLongList) return draw_over_long_list(kept, scratch.ids.data(), values, row.max, u);
    return draw_over_list(kept, scratch.ids.data(), u, [values](size_t i) { return values[i]; });
  }
  const double target = u * row.total;
  double cumulative = 0;
  const size_t start = block_holding(row.sums, size, row.block, target, &cumulative);
  return walk_from(src, dtype, size, t, row.max, start, cumulative, target);
}

// min_p alone over a penalised row read block by block. Step 6 only lowered entries, so the
// caller's block maxima bound the working row's: its max is read from the blocks by descending
// bound while one could still hold more, and only the blocks whose bound reaches min_p_cut's
// range are listed, as draw_min_p_by_maxima lists the working row: the same list, so the same
// token. What this declines (an entry in the range, or over a quarter of the blocks by bounds,
// which count no fewer than the working row's maxima) the steps decide, as draw_by_softmax does
// over the working row, where declining changes no token either. First, where the row can lower
// entries, the list near the max (draw_min_p_from_list).
TokenId draw_min_p_from_penalised_blocks(const PenalisedRow& row, size_t n,
                                         const DrawParams& params, double u, SortScratch scratch,
                                         const RawRowSummary* summary,
                                         const ParallelFor& parallel) {
  const size_t block = block_size(static_cast<int64_t>(n));
  BlockMaxima caller_maxima;
  const BlockMaxima* bounds = &caller_maxima;
  if (summary != nullptr) {
    bounds = &summary->maxima;
  } else {
    caller_maxima.block = block;
    caller_maxima.blocks = (n + block - 1) / block;
    if (!quotient_block_maxima(row.src, row.dtype, n, 1.0f, block, caller_maxima.max, parallel))
      return kNoInputDraw;
  }
  if (bounds->block != block) return kNoInputDraw;  // not this row's blocks
  if (row.lower != nullptr) {
    if (const std::optional<TokenId> token =
            draw_min_p_from_list(row, n, params, u, scratch, *bounds, parallel))
      return *token;
  }
  const size_t blocks = bounds->blocks;
  float values[kPenalisedBlock + cpu::kCompressSlack];
  auto read = [&](size_t b) {
    const size_t start = b * block, count = std::min(block, n - start);
    row.read(row.context, static_cast<int64_t>(start), static_cast<int64_t>(count), values);
    return count;
  };
  uint64_t order[kMaxBlocks];  // the blocks by ascending max (ascending_key), walked from the top
  for (size_t b = 0; b < blocks; ++b)
    order[b] = ascending_key(bounds->max[b], static_cast<int32_t>(b));
  cpu::sort_keys(order, blocks);
  float max = kNegInf;
  for (size_t i = blocks; i-- > 0;) {
    const auto b = static_cast<size_t>(key_id(order[i]));
    if (!(bounds->max[b] > max)) break;
    max = std::max(max, cpu::row_max(values, read(b)));
  }
  if (max == kNegInf) return 0;  // the oracle's draw on an all -inf row
  const float t = params.temperature;
  auto quotient = [t](float v) { return t == 1.0f ? v : v / t; };
  if (quotient(max) == kNegInf) return 0;  // the division made every entry -inf
  if (!(quotient(max) < std::numeric_limits<float>::infinity())) return kNoInputDraw;
  const MinPCut cut = min_p_cut(quotient(max), params.min_p);
  float quotient_bounds[kMaxBlocks];  // no fewer reach the cut than the working row's maxima
  std::transform(bounds->max, bounds->max + blocks, quotient_bounds, quotient);
  if (!few_blocks_reach(quotient_bounds, blocks, cut)) return kNoInputDraw;
  int32_t* const ids = scratch.ids.data();
  float* const listed_values = scratch.values.data();
  size_t listed = 0;
  for (size_t b = 0; b < blocks; ++b) {
    if (quotient_bounds[b] < cut.masked_below) continue;
    if (listed + block > scratch.list_room()) return kNoInputDraw;  // the block might pass it
    const size_t count = read(b);
    if (t != 1.0f) cpu::divide(values, count, t);  // no overflow: none is above the max
    const size_t found = cpu::compress_at_least(values, count, cut.masked_below, false,
                                                ids + listed, listed_values + listed);
    for (size_t i = listed; i < listed + found; ++i) ids[i] += static_cast<int32_t>(b * block);
    listed += found;
  }
  return draw_over_min_p_list(listed, cut, u, scratch).value_or(kNoInputDraw);
}

}  // namespace lastmile::detail::cpu_selection
