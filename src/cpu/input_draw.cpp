// lastmile — the CPU backend's draw straight from a caller's row (Backend::draw_from_input).
// Writing a 128k-entry float32 working row costs as much as reading the caller's: the two share
// L2 and evict each other. For a random row that nothing edits and no logprob reads, these paths
// read the caller's row in place (dividing by the temperature on the fly, exactly as step 7b)
// and keep only short lists:
// - temperature only: softmax statistics by blocks in one read; the walk recomputes one block;
// - min_p: the block maxima alone, then the blocks that reach min_p's cut listed: the sum only
//   matters to entries within rounding of the cut (then the statistics and the oracle's test as
//   a logit threshold);
// - top-k (and top-p): candidates at or above the k-th largest group max (a sampled threshold
//   when k is large for the row, or the row is over 2^20), the k-th among them, top-p's cut on
//   the list, the draw on it.
// - top-p alone: the probabilities from the band's low end up, listed on a second read; on a
//   flat row (most of it kept) the band is guessed from samples and marked by the statistics
//   pass itself, with the mass below it, so the row is read once.
// min_p with top-k or top-p needs the whole processed row: the steps.
#include "cpu/input_draw.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "cpu/input_logprobs.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"
#include "reference/float16.hpp"

namespace lastmile::detail::cpu_selection {
namespace {

// Entries converted and weighted at a time on the stack.
constexpr size_t kChunk = 256;

// src[from, from + count) / t into dst; the first NaN / +inf, or -1.
int64_t load_scaled(const void* src, DType dtype, size_t from, size_t count, float t, float* dst) {
  return cpu::load_row(entry_at(src, dtype, from), dtype, dst, count, t);
}

// The quotients src[from, from + count) / t: the caller's own entries for a float32 row at t = 1,
// else loaded into dst (checked by the statistics pass).
const float* quotients_at(const void* src, DType dtype, size_t from, float t, float* dst,
                          size_t count) {
  if (dtype == DType::f32 && t == 1.0f) return static_cast<const float*>(src) + from;
  load_scaled(src, dtype, from, count, t, dst);
  return dst;
}

// The smallest float v whose quotient v / t reaches threshold (division by t > 0 is monotone):
// comparing a caller's values with it selects exactly the entries whose quotients pass, with no
// division over the row.
float smallest_dividend_at_least(float threshold, float t) {
  if (t == 1.0f) return threshold;
  return smallest_passing([&](float v) { return v / t >= threshold; }, threshold * t);
}

// Groups whose maxima bound a row of n for top-k and min-p: at most kMaxGroups of a power-of-two
// size from 64 entries up, which divide row_chunks' blocks; 0 for a row over 2^20.
constexpr size_t kMaxGroups = 1024;
size_t group_size(size_t n) {
  if (n > (size_t{1} << 20)) return 0;
  size_t group = 64;
  while (n > group * kMaxGroups) group *= 2;
  return group;
}

// Moves each chunk's list (counts[c] entries at its region, ids relative to the chunk's begin)
// down to follow the previous ones, ids made absolute; returns the total.
size_t close_up(const RowChunks& chunks, const size_t* counts, int32_t* ids, float* values) {
  size_t total = 0;
  for (size_t c = 0; c < chunks.count; ++c) {
    const size_t from = chunks.region(c);
    std::memmove(ids + total, ids + from, counts[c] * sizeof(int32_t));
    std::memmove(values + total, values + from, counts[c] * sizeof(float));
    const auto offset = static_cast<int32_t>(chunks.begin(c));
    for (size_t i = total; i < total + counts[c]; ++i) ids[i] += offset;
    total += counts[c];
  }
  return total;
}

}  // namespace

size_t list_scaled_at_least(const void* src, DType dtype, size_t n, float t, float threshold,
                            SortScratch scratch, const ParallelFor& parallel, QuotientMaxima maxima,
                            bool* past_room) {
  const float from = smallest_dividend_at_least(threshold, t);
  const size_t block = block_size(static_cast<int64_t>(n));
  const size_t room = scratch.list_room();
  const RowChunks chunks = row_chunks(n, block, room);
  // Maxima by blocks that tile the chunks (whole chunks hold whole ones), kMaxGroups at most, or
  // none: every block read.
  if (maxima.max != nullptr && (block % maxima.block != 0 || n > kMaxGroups * maxima.block))
    maxima = {};
  const size_t step = maxima.max != nullptr ? maxima.block : block;
  size_t counts[kRowChunks];
  bool bad[kRowChunks];
  // Each chunk lists into its own region, ids relative to the chunk's begin. With maxima, only
  // the blocks whose max reaches, read off a compress of the maxima: a branch per block cost a 32k
  // row's top-k listing (500 groups, a tenth of them reaching at random) as much as its compress
  // of those groups.
  // Chunk c's list at `at` in scratch, up to `limit` entries (more: it stopped there).
  auto list = [&](size_t chunk, size_t at, size_t limit, bool* any_bad) {
    int32_t* const ids = scratch.ids.data() + at;
    float* const values = scratch.values.data() + at;
    const size_t chunk_begin = chunks.begin(chunk), chunk_end = chunks.end(chunk);
    const void* const chunk_src = entry_at(src, dtype, chunk_begin);
    if (maxima.max == nullptr)
      return cpu::compress_source(chunk_src, dtype, chunk_end - chunk_begin, from, ids, values,
                                  any_bad, limit);
    const size_t first = chunk_begin / step, last = (chunk_end + step - 1) / step;
    int32_t reaching[kMaxGroups + cpu::kCompressSlack];
    float reaching_max[kMaxGroups + cpu::kCompressSlack];
    const size_t m = cpu::compress_at_least(maxima.max + first, last - first, threshold, false,
                                            reaching, reaching_max);
    return cpu::compress_source_groups(chunk_src, dtype, chunk_end - chunk_begin, step, reaching, m,
                                       from, maxima.few_each, ids, values, any_bad, limit);
  };
  auto list_chunk = [&](int64_t c) {
    const auto chunk = static_cast<size_t>(c);
    counts[chunk] = list(chunk, chunks.region(chunk), chunks.region_room(chunk), &bad[chunk]);
  };
  parallel(static_cast<int64_t>(chunks.count), list_chunk);
  if (std::any_of(bad, bad + chunks.count, [](bool b) { return b; })) return kNotListed;
  bool overflowed = false;
  for (size_t c = 0; c < chunks.count; ++c) overflowed |= counts[c] > chunks.region_room(c);
  size_t count = 0;
  if (!overflowed) {
    count = close_up(chunks, counts, scratch.ids.data(), scratch.values.data());
  } else {  // a chunk holds more than its share (the top of an LLM row can cluster): in one list
    for (size_t c = 0; c < chunks.count; ++c) {
      bool any_bad = false;
      const size_t listed = list(c, count, room - count, &any_bad);
      if (any_bad) return kNotListed;
      if (count + listed > room) {
        if (past_room != nullptr) *past_room = true;
        return kNotListed;
      }
      const auto offset = static_cast<int32_t>(chunks.begin(c));
      for (size_t i = count; i < count + listed; ++i) scratch.ids[i] += offset;
      count += listed;
    }
  }
  if (t != 1.0f && cpu::divide(scratch.values.data(), count, t) >= 0) return kNotListed;
  return count;
}

bool lower_and_divide(const PenalisedRow& row, SortScratch scratch, size_t listed, float t,
                      float* bound, float* lowered_max) {
  float* const values = scratch.values.data();
  row.lower(row.context, scratch.ids.data(), values, listed);
  if (lowered_max != nullptr) *lowered_max = cpu::row_max(values, listed);
  if (t == 1.0f) return true;
  if (cpu::divide(values, listed, t) >= 0) return false;
  cpu::divide(bound, 1, t);
  return true;
}

namespace {

// The oracle's walk over entries [start, n), kChunk at a time, weighted with the vector exp (the
// weights the block sums were made of), until the cumulative sum passes target: chunk(from,
// count) gives the entries' values (<= max), id(i) entry i's token.
template <class Chunk, class Id>
TokenId walk_chunks(size_t n, float max, size_t start, double cumulative, double target,
                    Chunk chunk, Id id) {
  float weights[kChunk];
  TokenId last_kept = 0;
  for (; start < n; start += kChunk) {
    const size_t count = std::min(kChunk, n - start);
    double unused;
    cpu::exp_with_block_sums(chunk(start, count), weights, count, max, count, &unused);
    for (size_t i = 0; i < count; ++i) {
      if (weights[i] == 0.0f) continue;
      cumulative += weights[i];
      last_kept = id(start + i);
      if (cumulative > target) return last_kept;
    }
  }
  return last_kept;  // rounding left the target at the very end
}

// walk_chunks over the caller's row src / t, each chunk converted on the way.
TokenId walk_from(const void* src, DType dtype, size_t n, float t, float max, size_t start,
                  double cumulative, double target) {
  float values[kChunk];
  auto converted = [&](size_t from, size_t count) {
    load_scaled(src, dtype, from, count, t, values);  // checked by the statistics pass
    return values;
  };
  return walk_chunks(n, max, start, cumulative, target, converted,
                     [](size_t i) { return static_cast<TokenId>(i); });
}

// The oracle's walk over `listed` entries (ids, values in id order, max their largest) whose list
// is long, by blocks as walk_from does with the vector exp: one sum pass locates the block
// holding u * total, then its chunks are weighted again. std::exp entry by entry, twice over the
// list, took 1.3 ms of a 128k N(0, 1) row with min_p 0.001 (it keeps 99% of the row).
constexpr size_t kLongList = 4096;  // lists up to it keep the oracle's walk (draw_over_list)
TokenId draw_over_long_list(size_t listed, const int32_t* ids, const float* values, float max,
                            double u) {
  const size_t block = block_size(static_cast<int64_t>(listed));
  double sums[kMaxBlocks];
  const double target = u * cpu::exp_block_sums(values, listed, max, block, sums);
  double cumulative = 0;
  const size_t start = block_holding(sums, listed, block, target, &cumulative);
  return walk_chunks(
      listed, max, start, cumulative, target,
      [values](size_t from, size_t) { return values + from; }, [ids](size_t i) { return ids[i]; });
}

// The softmax statistics of the whole row src / t in one read: block maxima and sums, the sums
// rescaled to the row's max. False: a NaN / +inf, or a vocabulary over 2^20 (blocks larger than
// the stack buffer).
struct RowSoftmax {
  size_t block = 0, blocks = 0;
  float max = kNegInf;
  double total = 0;
  double sums[kMaxBlocks];  // block b's sum of exp(x - max)
  float block_max[kMaxBlocks];
};

// With `band`, its bits are marked too and its below sums rescaled to the row's max, as the sums
// are.
bool row_softmax(const void* src, DType dtype, size_t n, float t, cpu::NearMax* near,
                 RowSoftmax* row, const ParallelFor& parallel, cpu::ConvertedRow out = {},
                 cpu::ValueBand* band = nullptr, cpu::GroupMaxima groups = {}) {
  row->block = block_size(static_cast<int64_t>(n));
  row->blocks = (n + row->block - 1) / row->block;
  if (row->block > cpu::kStatisticsBlock) return false;
  // Groups tile the chunks, which begin on whole blocks.
  if (groups.max != nullptr && (groups.group == 0 || row->block % groups.group != 0)) return false;
  const RowChunks chunks = row_chunks(n, row->block, near->room);
  float* const block_max = row->block_max;
  cpu::NearMax nears[kRowChunks];
  cpu::ValueBand bands[kRowChunks];
  bool ok[kRowChunks];
  auto chunk_stats = [&](int64_t c) {
    const auto chunk = static_cast<size_t>(c);
    float buffer[cpu::kStatisticsBlock + cpu::kCompressSlack];
    const size_t first_block = chunks.begin(chunk) / row->block;
    if (near->ids != nullptr)  // each chunk lists into its own region, with its own max so far
      nears[chunk] = {near->below_max,
                      near->ids + chunks.region(chunk),
                      near->values + chunks.region(chunk),
                      0,
                      chunks.region_room(chunk),
                      near->max_at_least};
    if (band != nullptr)
      bands[chunk] = {band->from, band->to, band->bits + chunks.begin(chunk) / 8,
                      band->below_sums + first_block};
    cpu::ConvertedRow chunk_out = out;  // chunks begin on whole blocks: whole bitmap words
    if (out.dst != nullptr) chunk_out.dst += chunks.begin(chunk);
    if (out.seen != nullptr) chunk_out.seen += chunks.begin(chunk) / 64;
    cpu::GroupMaxima chunk_groups = groups;
    if (groups.max != nullptr) chunk_groups.max += chunks.begin(chunk) / groups.group;
    ok[chunk] = cpu::block_softmax_stats(
        entry_at(src, dtype, chunks.begin(chunk)), dtype, chunks.end(chunk) - chunks.begin(chunk),
        t, row->block, buffer, block_max + first_block, row->sums + first_block, &nears[chunk],
        chunk_out, band != nullptr ? &bands[chunk] : nullptr, chunk_groups);
  };
  parallel(static_cast<int64_t>(chunks.count), chunk_stats);
  if (!std::all_of(ok, ok + chunks.count, [](bool b) { return b; })) return false;
  if (near->ids != nullptr) {
    size_t counts[kRowChunks];
    bool stopped = false;
    for (size_t c = 0; c < chunks.count; ++c) {
      counts[c] = nears[c].count;
      stopped |= counts[c] > nears[c].room;
    }
    // A chunk that stopped leaves the list incomplete: more than the room says so.
    near->count = stopped ? near->room + 1 : close_up(chunks, counts, near->ids, near->values);
  }
  row->max = *std::max_element(block_max, block_max + row->blocks);
  row->total = 0;
  if (row->max == kNegInf) return true;
  for (size_t b = 0; b < row->blocks; ++b) {  // from each block's own max to the row's
    const double rescale = std::exp(static_cast<double>(block_max[b]) - row->max);
    row->total += row->sums[b] *= rescale;
    if (band != nullptr) band->below_sums[b] *= rescale;
  }
  return true;
}

// A row_softmax result's blocks and their maxima, as a BlockMaxima.
void copy_block_maxima(const RowSoftmax& row, BlockMaxima* maxima) {
  maxima->block = row.block;
  maxima->blocks = row.blocks;
  std::copy(row.block_max, row.block_max + row.blocks, maxima->max);
}

}  // namespace

bool caller_row_softmax(const void* src, DType dtype, int64_t n, float* max, double* total,
                        BlockMaxima* maxima, cpu::ConvertedRow out, const ParallelFor& parallel,
                        cpu::GroupMaxima groups) {
  cpu::NearMax none;
  RowSoftmax row;
  if (!row_softmax(src, dtype, static_cast<size_t>(n), 1.0f, &none, &row, parallel, out, nullptr,
                   groups))
    return false;
  *max = row.max;
  *total = row.total;
  copy_block_maxima(row, maxima);
  return true;
}

namespace {

// A draw's statistics of a caller's row at t = 1 are caller_row_softmax's (the same blocks; with
// a near list or a band, the same sums to the bit): what summarise_while_converting would learn,
// into `summary` when asked for.
void learn_raw_summary(const RowSoftmax& row, float t, RawRowSummary* summary) {
  if (summary == nullptr || t != 1.0f) return;
  summary->values = log_softmax_map(row.max, row.total);
  copy_block_maxima(row, &summary->maxima);
  summary->known = true;
}

// The maxima of the quotients src / t by blocks of `block` entries, in one read split over the
// row's chunks: division by t > 0 is monotone, so a block's largest quotient is its max divided.
// False on a NaN / +inf, or a quotient that overflows to +inf.
bool quotient_block_maxima(const void* src, DType dtype, size_t n, float t, size_t block,
                           float* maxima, const ParallelFor& parallel) {
  const RowChunks chunks = row_chunks(n, block);
  bool ok[kRowChunks];
  auto chunk_maxima = [&](int64_t c) {
    const auto chunk = static_cast<size_t>(c);
    ok[chunk] = cpu::source_block_max(entry_at(src, dtype, chunks.begin(chunk)), dtype,
                                      chunks.end(chunk) - chunks.begin(chunk), block,
                                      maxima + chunks.begin(chunk) / block);
  };
  parallel(static_cast<int64_t>(chunks.count), chunk_maxima);
  if (!std::all_of(ok, ok + chunks.count, [](bool b) { return b; })) return false;
  // The pass rejected +inf, so only a division can make one.
  return t == 1.0f || cpu::divide(maxima, (n + block - 1) / block, t) < 0;
}

}  // namespace

bool caller_row_block_maxima(const void* src, DType dtype, int64_t n, BlockMaxima* maxima,
                             const ParallelFor& parallel) {
  const auto size = static_cast<size_t>(n);
  maxima->block = block_size(n);
  maxima->blocks = (size + maxima->block - 1) / maxima->block;
  return quotient_block_maxima(src, dtype, size, 1.0f, maxima->block, maxima->max, parallel);
}

namespace {

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

// The draw over the blocks' kept weights kept[b]: the block holding u * their total, then its
// entries in id order with the statistics' vector exp weights w = exp(x - max), over those
// kept_at(x, w, i) accepts that are not masked in the band (ids[0, band) in id order, masked ones
// with q < 0 in qs). The blocks' kept sums are estimates: the walk goes on into later blocks if
// need be, and if rounding left the target past the last kept token, the oracle's walk ends on it.
template <class KeptAt>
TokenId draw_from_kept_blocks(const void* src, DType dtype, size_t n, float t,
                              const RowSoftmax& row, const double* kept, const int32_t* ids,
                              const float* qs, size_t band, double u, KeptAt kept_at) {
  float values[cpu::kStatisticsBlock], weights[cpu::kStatisticsBlock];  // row_softmax's blocks
  double total = 0;
  for (size_t b = 0; b < row.blocks; ++b) total += kept[b];
  const double target = u * total;
  double cumulative = 0;
  const size_t start = block_holding(kept, n, row.block, target, &cumulative);
  // Block `from`'s quotients into `values`, their weights into `weights`.
  auto weigh = [&](size_t from) {
    const size_t count = std::min(row.block, n - from);
    load_scaled(src, dtype, from, count, t, values);  // checked by the statistics pass
    double unused;
    cpu::exp_with_block_sums(values, weights, count, row.max, count, &unused);
  };
  auto masked_in_band = [&](int32_t id) {
    const int32_t* at = std::lower_bound(ids, ids + band, id);
    return at != ids + band && *at == id && qs[at - ids] < 0.0f;
  };
  // Without a branch an entry (a flat row's walk mispredicted its kept tests, some 2 us of 90):
  // an entry not kept adds +0.0, which leaves the sum as it was.
  size_t next = std::lower_bound(ids, ids + band, static_cast<int32_t>(start)) - ids;
  for (size_t from = start; from < n; from += row.block) {
    weigh(from);
    for (size_t i = 0; i < std::min(row.block, n - from); ++i) {
      const auto id = static_cast<int32_t>(from + i);
      const bool listed = next < band && ids[next] == id;  // the band is in id order
      next += listed;
      const bool masked = listed && qs[next - 1] < 0.0f;
      const bool counted = kept_at(values, weights, i) & !masked;
      cumulative += static_cast<double>(weights[i]) * static_cast<double>(counted);  // finite
      if (cumulative > target) return id;
    }
  }
  for (size_t from = (n - 1) / row.block * row.block;; from -= row.block) {
    weigh(from);
    for (size_t i = std::min(row.block, n - from); i-- > 0;)
      if (kept_at(values, weights, i) && !masked_in_band(static_cast<int32_t>(from + i)))
        return static_cast<TokenId>(from + i);
    if (from == 0) return 0;  // nothing kept: the oracle's all -inf row
  }
}

// Spec §9.3 over a listed band: ids[0, listed) in id order, their q in qs (lo <= q <= hi, q =
// exp(x - max) * inv_sum), every entry below the band masked and adding up to `below`, every one
// above it kept. Masked entries get q < 0 and leave kept[b], block b's kept weight (in units of the
// row's exp sum). The band is narrowed by bisection on q, a sum pass over it a step, to [q_lo,
// q_hi) holding at most kNarrowed entries: the mass below q_lo keeps the cumulative sum <= cut
// (masked), the mass below q_hi passes it (kept from there), and mask_band decides between.
// mask_band over a whole band histogrammed thousands of entries one by one (a flat row's 8k), and
// masked them with a mispredicted branch each (a long-tailed row's 15k: a fifth of its time).
void mask_listed_band(const void* src, DType dtype, size_t n, float t, const RowSoftmax& row,
                      const int32_t* ids, float* qs, size_t listed, double below, float lo,
                      float hi, float inv_sum, float cut, TokenId top, SortScratch scratch,
                      double* kept) {
  auto mask_listed = [&](size_t i) {
    kept[static_cast<size_t>(ids[i]) / row.block] -= qs[i] / inv_sum;
    qs[i] = -1.0f;  // masked
  };
  constexpr size_t kNarrowed = 256;
  // No bisection step passes the largest q (the max's, inv_sum): it is never masked.
  const float top_q = std::min(hi, inv_sum);
  uint32_t a = orderable(lo), b = orderable(top_q) + 1;
  double mass_a = 0;
  size_t count_a = 0, count_b = listed;
  while (count_b - count_a > kNarrowed && b - a > 1) {
    const uint32_t mid = a + (b - a) / 2;
    size_t count = 0;
    const double mass = cpu::sum_below(qs, listed, from_orderable(mid), &count);
    if (static_cast<float>(below + mass) <= cut) {
      a = mid;
      mass_a = mass;
      count_a = count;
    } else {
      b = mid;
      count_b = count;
    }
  }
  // The entries between the bisection's ends, q in [from_orderable(a), from_orderable(b)), listed
  // to the side by their indices in the band with a vector compress (the scalar loop, a branch an
  // entry, cost 4 of a flat row's 52 us). Never more than kNarrowed: the bisection counted them
  // with the same comparisons.
  uint32_t at[kNarrowed + cpu::kCompressSlack];
  size_t narrowed = 0;
  bool narrow = count_b - count_a <= kNarrowed;
  if (narrow) {
    narrowed = cpu::list_between(qs, listed, from_orderable(a), from_orderable(b), at, kNarrowed);
    narrow = narrowed <= kNarrowed;
  }
  // Ties left more than kNarrowed entries between two neighbouring floats: the whole band goes to
  // mask_band instead, as itself.
  if (!narrow) {
    a = orderable(lo);
    b = orderable(top_q) + 1;
    mass_a = 0;
  }
  const float q_lo = from_orderable(a);
  int32_t narrow_ids[kNarrowed];
  float narrow_qs[kNarrowed];
  if (narrow) {
    for (size_t k = 0; k < narrowed; ++k) {
      narrow_ids[k] = ids[at[k]];
      narrow_qs[k] = qs[at[k]];
    }
    // Masked below q_lo, block by block (the list is in id order).
    for (size_t block = 0, i = 0; block < row.blocks; ++block) {
      const auto end = static_cast<int32_t>(std::min(n, (block + 1) * row.block));
      const size_t last = std::lower_bound(ids + i, ids + listed, end) - ids;
      size_t unused;
      kept[block] -= cpu::sum_below(qs + i, last - i, q_lo, &unused) / inv_sum;
      i = last;
    }
    cpu::mask_below(qs, listed, q_lo);  // -inf: masked (q < 0)
  }
  const int32_t* const band_ids = narrow ? narrow_ids : ids;
  const float* const band_qs = narrow ? narrow_qs : qs;
  mask_band(
      band_ids, narrow ? narrowed : listed, [band_qs](size_t i) { return band_qs[i]; },
      [&](size_t i) { return scaled_entry(src, dtype, static_cast<size_t>(band_ids[i]), t); },
      below + mass_a, q_lo, from_orderable(b - 1), cut, top, scratch,
      [&](size_t i) { mask_listed(narrow ? at[i] : i); });
}

// Top-p alone when the band is not a short list to the top (a flat row: most tokens kept). A second
// read by blocks gives each token's weight w = exp(x - max) with the statistics' vector exp and
// q = w * inv_sum, as the steps' probability_band does: the mass below the band, the band's ids,
// and each block's kept weight (w of q >= lo). mask_listed_band decides in the band; the walk finds
// the block holding u * kept total and steps through it skipping q < lo and the band's masked ones.
TokenId draw_top_p_dense(const void* src, DType dtype, size_t n, float t, const RowSoftmax& row,
                         float inv_sum, float cut, const BandGuess& guess, double u,
                         SortScratch scratch) {
  int32_t* const ids = scratch.ids.data();
  float* const qs = scratch.values.data();
  float values[cpu::kStatisticsBlock + cpu::kCompressSlack], weights[cpu::kStatisticsBlock];
  double kept[kMaxBlocks];
  float lo = 0, hi = 2;
  double below = 0;
  size_t band = 0;
  TokenId top = -1;  // the largest entry (lowest id among equals), if in the band: never masked
  for (const size_t margin : {size_t{8}, size_t{32}, size_t{0}}) {  // 0: the whole row
    guess.band(margin, &lo, &hi);
    below = 0;
    band = 0;
    top = -1;
    double band_mass = 0;
    for (size_t start = 0, b = 0; start < n; start += row.block, ++b) {
      const size_t count = std::min(row.block, n - start);
      if (band + count > scratch.list_room()) return kNoInputDraw;  // the block might pass it
      const float* const x = quotients_at(src, dtype, start, t, values, count);
      double unused, block_below = 0;
      const double total = cpu::exp_with_block_sums(x, weights, count, row.max, count, &unused);
      const size_t listed =
          cpu::probability_band(weights, count, inv_sum, lo, hi, ids + band, &block_below);
      for (size_t i = band; i < band + listed; ++i) {  // q from the weights the pass computed
        const auto j = static_cast<size_t>(ids[i]);    // within the block
        band_mass += qs[i] = weights[j] * inv_sum;
        if (top < 0 && x[j] == row.max) top = static_cast<TokenId>(start + j);
        ids[i] += static_cast<int32_t>(start);
      }
      band += listed;
      below += block_below;
      kept[b] = total - block_below / inv_sum;  // locates the block; the walk adds exact weights
    }
    if (static_cast<float>(below) > cut) continue;  // a token below lo stays: crossing below
    if (hi <= 1.0f && static_cast<float>(below + band_mass) <= cut) continue;  // above hi
    break;
  }
  mask_listed_band(src, dtype, n, t, row, ids, qs, band, below, lo, hi, inv_sum, cut, top, scratch,
                   kept);
  auto kept_at = [&](const float*, const float* block_weights, size_t i) {
    return (block_weights[i] != 0.0f) & (block_weights[i] * inv_sum >= lo);
  };
  return draw_from_kept_blocks(src, dtype, n, t, row, kept, ids, qs, band, u, kept_at);
}

// Top-p's band on a flat row, guessed from samples before the statistics pass, so that the pass
// marks it on the way: a flat row keeps most of itself, and finding the band after the pass took
// a second Exp pass over the row (three passes in all on a fifth of N(0, 1) rows). The samples
// are runs of 16 entries (a cache line of float32: the row is cold, and 1024 lone entries cost a
// miss each) spread over the row. A row looks flat when no one of the first look's 256 holds
// over 1/11 of their mass (an LLM-shaped row's few large entries, which samples miss, hold most of
// its mass: there the statistics find the band). Simulated over 4000 rows each (numpy), that
// calls 97.8% of N(0, 1) rows flat and 1.9% of the bench's LLM-shaped ones; the first look of
// 128 and 1/8 before it, 95.3% and 2.8%, and each flat row it missed took the dense path at
// 1.4x the time (73 against 52 us a cached row). Then 1024 samples, sorted, estimate where the
// ascending cumulative mass crosses cut; the band reaches kMargin samples either side (6% of an
// N(0, 1) row, holding the crossing on 99% of them; 16 either side held it on 92%). nullopt: not
// flat, a crossing near the samples' ends (p near 0 or 1), a short row, or NaN / inf.
struct ValueRange {
  float from, to;
  size_t expected;  // entries in it, were the samples exact
};
std::optional<ValueRange> flat_row_band(const void* src, DType dtype, size_t n, float t,
                                        float cut) {
  constexpr size_t kSamples = 1024, kRun = 16, kRuns = kSamples / kRun, kFirstLook = 16;  // runs
  constexpr double kFirstLookMass = 11.0;  // the first look's mass, in units of its largest
  constexpr size_t kMargin = 32;
  constexpr double kFlatMass = 8.0;  // the samples' mass, in units of the largest one's
  if (n < 8 * kSamples) return std::nullopt;
  float samples[kSamples], weights[kSamples];
  // The NaN / +inf test and the max as vector passes: a scalar max over 1024 samples was a chain
  // of 1024 dependent maxss (1.4 us of a flat row's 90), and GCC left a scalar NaN test's loop
  // unvectorised (1% of a flat row's profile). +inf, as NaN, says not flat.
  auto any_bad = [&](size_t count) { return cpu::find_nan_or_inf(samples, count) >= 0; };
  auto mass_of = [&](size_t count) {  // of samples[0, count) (tested), in units of the largest
    const float max = cpu::row_max(samples, count);
    if (!std::isfinite(max)) return 0.0;  // -inf throughout
    double unused;
    return cpu::exp_with_block_sums(samples, weights, count, max, count, &unused);
  };
  auto run_start = [&](size_t run) { return run * (n / kRuns) / kRun * kRun; };
  auto load_run = [&](size_t run, float* to) {  // run r of kRuns, on a 16-entry boundary
    load_scaled(src, dtype, run_start(run), kRun, t, to);
  };
  // Every run's lines asked for first: the row is cold and the runs scattered, which no hardware
  // prefetcher follows, and loaded one call at a time their misses came nearly one after another
  // (the loads were 8% of a flat row's profile). Unlike the streaming reads' requests
  // (software_prefetch_pays), these pay on Zen 4 too: flat top-p 71.5 -> 68.4 us a row. The lines
  // are the row's own, read by the statistics pass next whether or not the row is flat.
  for (size_t run = 0; run < kRuns; ++run) {
    const auto* first = static_cast<const char*>(entry_at(src, dtype, run_start(run)));
    __builtin_prefetch(first);
    __builtin_prefetch(first + kRun * element_size(dtype) - 1);
  }
  for (size_t j = 0; j < kFirstLook; ++j) load_run(j * (kRuns / kFirstLook), samples + j * kRun);
  if (any_bad(kFirstLook * kRun) || mass_of(kFirstLook * kRun) < kFirstLookMass)
    return std::nullopt;
  for (size_t run = 0; run < kRuns; ++run) load_run(run, samples + run * kRun);
  if (any_bad(kSamples)) return std::nullopt;  // sort_samples takes no NaN
  sort_samples(samples, kSamples, 16);         // by the top 16 bits: enough to place a band
  const double total = mass_of(kSamples);      // weights now in (about) ascending order
  if (total < kFlatMass) return std::nullopt;
  double cumulative = 0;
  size_t crossing = 0;
  for (; crossing < kSamples; ++crossing) {
    cumulative += weights[crossing];
    if (cumulative > cut * total) break;
  }
  if (crossing < kMargin || crossing + kMargin >= kSamples) return std::nullopt;
  const ValueRange range{samples[crossing - kMargin], samples[crossing + kMargin],
                         (2 * kMargin + 1) * n / kSamples};
  if (!(range.from < range.to)) return std::nullopt;  // the order is bf16's
  return range;
}

// Top-p alone over a flat row whose statistics pass marked the entries in range (a bitmap over
// scratch.keys) and took each block's mass below it (below_sums, rescaled): decides
// as draw_top_p_dense does when the crossing lies in the band (every entry below it masked, so
// their mass is `below`, and every entry above it kept); nullopt when it does not.
std::optional<TokenId> draw_top_p_banded(const void* src, DType dtype, size_t n, float t,
                                         const RowSoftmax& row, ValueRange range,
                                         const double* below_sums, float cut, double u,
                                         SortScratch scratch) {
  const auto inv_sum = static_cast<float>(1.0 / row.total);
  int32_t* const ids = scratch.ids.data();
  float* const qs = scratch.values.data();  // the band's quotients, then their q
  // Read once, by list_marked: mask_band's histogram and keys then write over it.
  const auto* bitmap = reinterpret_cast<const uint8_t*>(scratch.keys.data());
  double below = 0;
  for (size_t b = 0; b < row.blocks; ++b) below += below_sums[b];
  below *= inv_sum;
  if (static_cast<float>(below) > cut) return std::nullopt;  // a token below the band stays
  // Crossing above the band, judged before listing it: twice the entries the samples put in it,
  // each at q(to), its largest, do not reach the cut. A peaked row whose head the samples missed
  // ends here (its band, in the body, holds little mass). A wrong guess would only send the row
  // to the steps' path below, which decides any row.
  const double band_bound = 2.0 * static_cast<double>(range.expected) *
                            std::exp(static_cast<double>(range.to) - row.max) * inv_sum;
  if (static_cast<float>(below + band_bound) <= cut) return std::nullopt;
  const size_t listed = cpu::list_marked(src, dtype, n, t, bitmap, ids, qs, scratch.list_room());
  if (listed == 0 || listed > scratch.list_room()) return std::nullopt;
  TokenId top = -1;  // the largest entry (lowest id among equals), if in the band: never masked
  if (range.to >= row.max) {  // the max may be in the band
    for (size_t i = 0; i < listed && top < 0; ++i)
      if (qs[i] == row.max) top = ids[i];
  }
  float lo = 0, hi = 0;
  const double band_mass = cpu::probabilities(qs, listed, row.max, inv_sum, &lo, &hi);
  if (static_cast<float>(below + band_mass) <= cut) return std::nullopt;  // crosses above it
  double kept[kMaxBlocks];
  for (size_t b = 0; b < row.blocks; ++b) kept[b] = row.sums[b] - below_sums[b];
  mask_listed_band(src, dtype, n, t, row, ids, qs, listed, below, lo, hi, inv_sum, cut, top,
                   scratch, kept);
  auto kept_at = [from = range.from](const float* values, const float* weights, size_t i) {
    return (weights[i] != 0.0f) & (values[i] >= from);
  };
  return draw_from_kept_blocks(src, dtype, n, t, row, kept, ids, qs, listed, u, kept_at);
}

// An upper bound on the lowest logit top-p keeps, from the block statistics alone: the blocks
// taken by ascending max until their masses add up to more than cut_mass; the max of the one that
// passes it. Were the lowest kept logit above it, all of those blocks would be masked.
float kept_logit_ceiling(const RowSoftmax& row, double cut_mass) {
  uint64_t order[kMaxBlocks];  // the blocks by ascending max (ascending_key, the block as id)
  for (size_t b = 0; b < row.blocks; ++b)
    order[b] = ascending_key(row.block_max[b], static_cast<int32_t>(b));
  cpu::sort_keys(order, row.blocks);
  double cumulative = 0;
  for (size_t i = 0; i < row.blocks; ++i) {
    const auto b = static_cast<size_t>(key_id(order[i]));
    cumulative += row.sums[b];
    if (cumulative > cut_mass) return row.block_max[b];
  }
  return row.max;
}

// Top-p alone, deciding as the steps do (cpu_backend.cpp top_p_without_sort) with the same
// probabilities q = exp(x - max) * inv_sum. The band is every entry with q >= lo, so that those
// below it (all masked) add up to `below`: since q >= lo is a logit threshold (up to the exp's
// rounding), one compress of the blocks whose max reaches it lists the candidates with a margin,
// the vector exp gives their q, and the mass below is the rest of the total. mask_band decides in
// the band, and the draw walks the kept ones with q as weights (proportional to exp(x - max) up
// to one rounding). lo is first kBelowCeiling under kept_logit_ceiling, which on a peaked row
// reads a few blocks; if a token below it stays, a band guessed from samples. Bands that stop
// below the top, or list over 1/8 of the row, take draw_top_p_dense. A row that looks flat to
// flat_row_band tries draw_top_p_banded first, on what the statistics pass marked.
TokenId draw_top_p(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                   SortScratch scratch, const ParallelFor& parallel, RawRowSummary* summary) {
  constexpr float kLogitMargin = 1e-3f;  // far above the exp's 5.5 ULP, and max's rounding
  // Below the ceiling, in logits: the lowest kept one was within 2 of it on 94% of LLM-shaped rows.
  constexpr float kBelowCeiling = 2.0f;
  const auto size = static_cast<size_t>(n);
  const float t = params.temperature;
  const float cut = 1.0f - params.top_p;
  cpu::NearMax none;
  RowSoftmax row;
  const std::optional<ValueRange> flat = flat_row_band(src, dtype, size, t, cut);
  double below_sums[kMaxBlocks];
  cpu::ValueBand flat_band;
  if (flat) {
    flat_band = {flat->from, flat->to, reinterpret_cast<uint8_t*>(scratch.keys.data()), below_sums};
  }
  if (!row_softmax(src, dtype, size, t, &none, &row, parallel, {}, flat ? &flat_band : nullptr))
    return kNoInputDraw;
  learn_raw_summary(row, t, summary);
  if (row.max == kNegInf) return 0;
  if (flat) {
    if (const auto token =
            draw_top_p_banded(src, dtype, size, t, row, *flat, below_sums, cut, u, scratch))
      return *token;
  }
  const auto inv_sum = static_cast<float>(1.0 / row.total);
  int32_t* const ids = scratch.ids.data();
  float* const qs = scratch.values.data();  // the listed quotients, then their q
  // The band of low end lo into ids / qs (id order, q in place of the quotient), the mass below
  // it into `below`; kNotListed on a NaN / +inf, kTooMany past 1/8 of the row or the room.
  constexpr size_t kTooMany = kNotListed - 1;
  double below = 0;
  auto list_band = [&](float lo) {
    const float from = row.max + std::log(lo / inv_sum) - kLogitMargin;
    bool past_room = false;
    const size_t listed = list_scaled_at_least(src, dtype, size, t, from, scratch, parallel,
                                               {row.block_max, row.block}, &past_room);
    if (past_room || (listed != kNotListed && listed > size / 8)) return kTooMany;
    if (listed == kNotListed) return kNotListed;
    size_t kept = 0;
    double band_mass = 0;
    for (size_t start = 0; start < listed; start += kChunk) {  // q by the vector exp, in place
      const size_t count = std::min(kChunk, listed - start);
      float weights[kChunk];
      double unused;
      cpu::exp_with_block_sums(qs + start, weights, count, row.max, count, &unused);
      for (size_t i = 0; i < count; ++i) {
        const float q = weights[i] * inv_sum;
        if (q < lo) continue;
        ids[kept] = ids[start + i];
        qs[kept++] = q;
        band_mass += q;
      }
    }
    below = row.total * inv_sum - band_mass;
    return kept;
  };
  const float floor = kept_logit_ceiling(row, cut * row.total) - kBelowCeiling;
  float lo = std::exp(floor - row.max) * inv_sum;
  float hi = 2;
  size_t band = kNotListed;
  // Tried only if it reads at most half of the blocks. Of 400 of the bench's LLM-shaped rows (top-p
  // 0.95), 95% reach at most half and 99% of those find their band there; of the other 19, whose
  // crossing lies deep in the body (as a flat row's does), one. At most a quarter, as before, sent
  // a fifth of the rows to the sampled band below, each at twice the time.
  if (lo > 0.0f && 2 * static_cast<size_t>(std::count_if(row.block_max, row.block_max + row.blocks,
                                                         [&](float m) { return m >= floor; })) <=
                       row.blocks) {
    const size_t kept = list_band(lo);
    if (kept == kNotListed) return kNoInputDraw;
    if (kept != kTooMany && static_cast<float>(below) <= cut) band = kept;
  }
  if (band == kNotListed) {
    auto sample_q = [&](size_t i) {
      return std::exp(scaled_entry(src, dtype, i, t) - row.max) * inv_sum;  // a guess: std::exp
    };
    const BandGuess guess(size, cut, sample_q);
    auto dense = [&] {
      return draw_top_p_dense(src, dtype, size, t, row, inv_sum, cut, guess, u, scratch);
    };
    for (const size_t margin : {size_t{8}, size_t{32}}) {
      guess.band(margin, &lo, &hi);
      if (hi <= 1.0f || lo <= 0.0f) return dense();  // the band is not a short list to the top
      const size_t kept = list_band(lo);
      if (kept == kNotListed) return kNoInputDraw;
      if (kept == kTooMany) return dense();
      if (static_cast<float>(below) > cut) continue;  // a token below lo stays: crossing below
      band = kept;
      break;
    }
    if (band == kNotListed) return dense();
  }
  // The largest entry (lowest id among equals) is never masked: its q is the largest, inv_sum.
  TokenId top = -1;
  for (size_t i = 0; i < band && top < 0; ++i)
    if (qs[i] == inv_sum && scaled_entry(src, dtype, static_cast<size_t>(ids[i]), t) == row.max)
      top = ids[i];
  mask_band(
      ids, band, [qs](size_t i) { return qs[i]; },
      [&](size_t i) { return scaled_entry(src, dtype, static_cast<size_t>(ids[i]), t); }, below, lo,
      hi, cut, top, scratch, [qs](size_t i) { qs[i] = 0.0f; });
  double total = 0;
  for (size_t i = 0; i < band; ++i) total += qs[i];
  const double target = u * total;
  double cumulative = 0;
  TokenId last_kept = 0;
  for (size_t i = 0; i < band; ++i) {
    if (qs[i] == 0.0f) continue;  // masked, or a probability of 0
    cumulative += qs[i];
    last_kept = ids[i];
    if (cumulative > target) return last_kept;
  }
  return last_kept;
}

}  // namespace

namespace {

// Top-k's groups: at least 4k of them, else 0.
size_t top_k_group_size(size_t n, int64_t k) {
  const size_t group = group_size(n);
  if (k < 1 || group == 0) return 0;
  return (n + group - 1) / group / 4 >= static_cast<uint64_t>(k) ? group : 0;
}

}  // namespace

// One max pass, a selection among at most kMaxGroups maxima and a listing of a few percent of
// the row, where a sampled threshold listed hundreds of entries from a compress of all of it.
std::optional<float> kth_largest_by_groups(const void* src, DType dtype, size_t n, float t,
                                           int64_t k, SortScratch scratch, size_t* candidates,
                                           const ParallelFor& parallel, float* listed_from,
                                           const float* known_maxima) {
  const size_t group = top_k_group_size(n, k);
  if (group == 0) return std::nullopt;
  float read_maxima[kMaxGroups];
  const float* const maxima = known_maxima != nullptr ? known_maxima : read_maxima;
  if (known_maxima == nullptr &&
      !quotient_block_maxima(src, dtype, n, t, group, read_maxima, parallel))
    return std::nullopt;
  const auto groups = static_cast<int64_t>((n + group - 1) / group);
  size_t listed_maxima = 0;  // the k-th largest max, itself by sampled threshold among the maxima
  const float kth_max = *kth_largest(
      groups, k, scratch, &listed_maxima, [&](int64_t g) { return maxima[g]; },
      [&](float threshold) {
        return cpu::compress_at_least(maxima, static_cast<size_t>(groups), threshold, false,
                                      scratch.ids.data(), scratch.values.data());
      });
  const auto kk = static_cast<size_t>(k);
  // Fewer than k groups hold a finite quotient (a masked row: a processed top-k, top-p or min-p
  // row shown with more logprobs than it keeps, or top-k after a grammar's mask): from -inf the
  // whole row would be listed and selected, so the finite ones only, as kth_largest lists.
  const float from = kth_max == kNegInf ? std::numeric_limits<float>::lowest() : kth_max;
  // A masked row's list (from the lowest float) holds every finite entry: not one or two a group.
  size_t listed = list_scaled_at_least(src, dtype, n, t, from, scratch, parallel,
                                       {maxima, group, kth_max > kNegInf});
  // Fewer than k listed from a finite max cannot happen on a checked row; declining keeps a
  // broken list harmless.
  if (listed == kNotListed || (listed < kk && kth_max > kNegInf)) return std::nullopt;
  if (listed_from != nullptr) *listed_from = from;
  *candidates = listed;
  if (listed < kk) return kNegInf;  // fewer than k finite, those listed
  return kth_listed(scratch, listed, kk);
}

namespace {

// The draw over top-k's survivors, the candidates listed in scratch (id order) that reach the
// k-th largest quotient kth, after top-p if asked.
TokenId draw_over_top_k(size_t candidates, float kth, const DrawParams& params, double u,
                        SortScratch scratch) {
  size_t kept = keep_at_least(scratch, candidates, kth);
  if (params.apply_top_p) kept = top_p_keep(kept, params.top_p, scratch, nullptr);
  const float* values = scratch.values.data();
  // Top-k in the thousands: by blocks (an all -inf list goes on to the oracle's token 0).
  const float max = kept > kLongList ? *std::max_element(values, values + kept) : kNegInf;
  if (max > kNegInf) return draw_over_long_list(kept, scratch.ids.data(), values, max, u);
  return draw_over_list(kept, scratch.ids.data(), u, [values](size_t i) { return values[i]; });
}

// Top-k, then top-p on the survivors.
TokenId draw_top_k(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                   SortScratch scratch, const ParallelFor& parallel) {
  const float t = params.temperature;
  bool bad = false;
  auto sample = [&](int64_t i) {
    float v = scaled_entry(src, dtype, static_cast<size_t>(i), t);
    if (std::isnan(v) || std::isinf(v)) {
      bad = bad || !(v < 0);  // NaN or +inf; -inf is a masked token
      return kNegInf;         // keeps the sample selection well defined
    }
    return v;
  };
  auto compress = [&](float threshold) {
    return bad ? kNotListed
               : list_scaled_at_least(src, dtype, static_cast<size_t>(n), t, threshold, scratch,
                                      parallel);
  };
  size_t candidates = 0;
  // A row the groups decline (NaN / +inf) the sampled threshold's listing declines too.
  std::optional<float> kth = kth_largest_by_groups(src, dtype, static_cast<size_t>(n), t,
                                                   params.top_k, scratch, &candidates, parallel);
  if (!kth) kth = kth_largest(n, params.top_k, scratch, &candidates, sample, compress);
  if (!kth) return kNoInputDraw;
  return draw_over_top_k(candidates, *kth, params, u, scratch);
}

// Top-k (then top-p) over a penalised row, from the caller's row and a list. Step 6 only lowers
// entries, so an entry below the 2k-th largest of the caller's group maxima, m, stays below m.
// The entries at or above m (2k at least, id order) are listed from the caller's row, as
// kth_largest_by_groups lists them for 2k, lowered as step 6 lowers them (PenalisedRow::lower)
// and divided. When k of them keep a quotient above m's, the list holds the working row's k
// largest quotients and every entry that reaches the k-th: the k-th and the survivors (id order,
// same quotients) that draw_top_k finds over the working row, so the same top-p and the same
// token. Else (the history holds most of the largest) it declines, and the steps decide. The
// bench mix's penalised top-k rows (152k bf16 logits, 2k-token histories, one thread) took 119 us
// each this way, 169 through the steps (medians of five runs in turns). Listing the entries near
// the max during the summary's read, instead of reading the group maxima again, took 135: the
// early blocks' maxima lie far below the row's, so those blocks listed most of their entries.
// group_maxima, if known: the caller's row's, as kth_largest_by_groups reads them for 2k.
TokenId draw_top_k_from_penalised_row(const PenalisedRow& row, size_t n, const DrawParams& params,
                                      double u, SortScratch scratch, const ParallelFor& parallel,
                                      const float* group_maxima) {
  const auto k = static_cast<size_t>(params.top_k);
  size_t listed = 0;
  float bound = kNegInf;  // m: every entry at or above it is listed
  const std::optional<float> kth =
      kth_largest_by_groups(row.src, row.dtype, n, 1.0f, 2 * params.top_k, scratch, &listed,
                            parallel, &bound, group_maxima);
  // Declined: NaN / +inf (the steps report it), or a masked row (fewer than 2k groups hold a
  // finite entry: listed from the lowest float).
  if (!kth || bound == std::numeric_limits<float>::lowest()) return kNoInputDraw;
  if (!lower_and_divide(row, scratch, listed, params.temperature, &bound)) return kNoInputDraw;
  const float* const values = scratch.values.data();
  const auto above = std::count_if(values, values + listed, [bound](float v) { return v > bound; });
  if (static_cast<size_t>(above) < k) return kNoInputDraw;
  return draw_over_top_k(listed, kth_listed(scratch, listed, k), params, u, scratch);
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

TokenId draw_from_caller_row(const void* src, DType dtype, int64_t n, const DrawParams& params,
                             double u, SortScratch scratch, const ParallelFor& parallel,
                             RawRowSummary* summary) {
  const bool top_k = params.top_k<n, min_p = params.min_p> 0.0f;
  const bool top_p = params.apply_top_p && params.top_p < 1.0f;
  if (top_k && !min_p) return draw_top_k(src, dtype, n, params, u, scratch, parallel);
  if (top_p && !top_k && !min_p)
    return draw_top_p(src, dtype, n, params, u, scratch, parallel, summary);
  if (top_k || top_p) return kNoInputDraw;
  // p = 1 top-p masks only tokens of probability 0, which the draw never picks (u > 0).
  return draw_by_softmax(src, dtype, n, params, u, scratch, parallel, summary);
}

// min_p alone over a penalised row read block by block. Step 6 only lowered entries, so the
// caller's block maxima bound the working row's: its max is read from the blocks by descending
// bound while one could still hold more, and only the blocks whose bound reaches min_p_cut's
// range are listed, as draw_min_p_by_maxima lists the working row: the same list, so the same
// token. What this declines (an entry in the range, or over a quarter of the blocks by bounds,
// which count no fewer than the working row's maxima) the steps decide, as draw_by_softmax does
// over the working row, where declining changes no token either. Top-k without min_p (then
// top-p) lists its candidates from the caller's row (draw_top_k_from_penalised_row); top-p alone
// lists the entries near the max and bounds the rest by the raw summary's total, learned here
// when not asked for (draw_top_p_from_penalised_row).
TokenId draw_from_penalised_blocks(const PenalisedRow& row, int64_t n, const DrawParams& params,
                                   double u, SortScratch scratch, RawRowSummary* summary,
                                   const ParallelFor& parallel) {
  const auto size = static_cast<size_t>(n);
  const size_t block = block_size(n);
  const bool min_p_alone =
      params.min_p > 0.0f && params.top_k >= n && !(params.apply_top_p && params.top_p < 1.0f);
  const size_t top_k_group = top_k_group_size(size, 2 * params.top_k);
  const bool top_k = params.min_p == 0.0f && top_k_group > 0 && row.lower != nullptr;
  const bool top_p_alone = row.lower != nullptr && params.apply_top_p && params.top_p < 1.0f &&
                           params.top_k >= n && params.min_p == 0.0f;
  if (summary != nullptr) summary->known = false;
  if (!top_k && !top_p_alone && (!min_p_alone || !min_p_by_maxima_fits(size, params.min_p)))
    return kNoInputDraw;  // unread
  // Top-p alone bounds the unlisted entries by the raw summary's total: learned here when no
  // logprob asks for it, as one Exp pass at t = 1 where the steps would take the working row's.
  // Top-k's group maxima come with that read when it is made: a max pass fewer (the bench mix's
  // top-k rows, 152k bf16 with 5 logprobs, took 38.9 us each instead of 44.6; one thread, Zen 4,
  // medians of six rounds in turns).
  RawRowSummary own;
  RawRowSummary* const learned = summary != nullptr ? summary : top_p_alone ? &own : nullptr;
  // Top-p's list of the entries near the max reads the groups that reach it, not the blocks (a
  // sixth of an LLM-shaped row's groups against some two thirds of its blocks): the bench mix's
  // top-p rows alone, bf16 152k 46.5 -> 45.4 us, float32 128k 33.7 -> 32.5 (one thread, Zen 4,
  // medians of five and three runs in turns). A wash while the summary read bf16 rows as floats
  // (its groups then cost it some 1.9 us a row).
  const size_t group = top_k ? top_k_group : top_p_alone ? group_size(size) : 0;
  float group_maxima[kMaxGroups];
  const cpu::GroupMaxima groups = {group, group > 0 ? group_maxima : nullptr};
  if (learned != nullptr) {
    learned->known = summarise_while_converting(row.src, row.dtype, n, nullptr, nullptr, 1.0f,
                                                learned, parallel, groups);
    if (!learned->known) return kNoInputDraw;
  }
  if (top_k)
    return draw_top_k_from_penalised_row(row, size, params, u, scratch, parallel,
                                         learned != nullptr ? group_maxima : nullptr);
  if (top_p_alone)
    return draw_top_p_from_penalised_row(row, size, params, u, scratch, *learned, parallel,
                                         {groups.max, group, true});
  BlockMaxima caller_maxima;
  const BlockMaxima* bounds = &caller_maxima;
  if (summary != nullptr) {
    bounds = &summary->maxima;
  } else {
    caller_maxima.block = block;
    caller_maxima.blocks = (size + block - 1) / block;
    if (!quotient_block_maxima(row.src, row.dtype, size, 1.0f, block, caller_maxima.max, parallel))
      return kNoInputDraw;
  }
  if (bounds->block != block) return kNoInputDraw;  // not this row's blocks
  if (row.lower != nullptr) {
    if (const std::optional<TokenId> token =
            draw_min_p_from_list(row, size, params, u, scratch, *bounds, parallel))
      return *token;
  }
  const size_t blocks = bounds->blocks;
  float values[kPenalisedBlock + cpu::kCompressSlack];
  auto read = [&](size_t b) {
    const size_t start = b * block, count = std::min(block, size - start);
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
