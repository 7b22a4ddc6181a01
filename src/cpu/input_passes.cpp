// lastmile — the passes over a caller's row in place that its draws share (input_draw.hpp): the
// entries whose quotient reaches a threshold listed, the softmax statistics by blocks (and the raw
// summary they give), block maxima, and the oracle's walk with the vector exp.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "cpu/input_draw.hpp"
#include "cpu/input_logprobs.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {

namespace {

// The smallest float v whose quotient v / t reaches threshold (division by t > 0 is monotone):
// comparing a caller's values with it selects exactly the entries whose quotients pass, with no
// division over the row.
float smallest_dividend_at_least(float threshold, float t) {
  if (t == 1.0f) return threshold;
  return smallest_passing([&](float v) { return v / t >= threshold; }, threshold * t);
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

}  // namespace

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

bool row_softmax(const void* src, DType dtype, size_t n, float t, cpu::NearMax* near,
                 RowSoftmax* row, const ParallelFor& parallel, cpu::ConvertedRow out,
                 cpu::ValueBand* band, cpu::GroupMaxima groups) {
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

namespace {

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

void learn_raw_summary(const RowSoftmax& row, float t, RawRowSummary* summary) {
  if (summary == nullptr || t != 1.0f) return;
  summary->values = log_softmax_map(row.max, row.total);
  copy_block_maxima(row, &summary->maxima);
  summary->known = true;
}

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

bool caller_row_block_maxima(const void* src, DType dtype, int64_t n, BlockMaxima* maxima,
                             const ParallelFor& parallel) {
  const auto size = static_cast<size_t>(n);
  maxima->block = block_size(n);
  maxima->blocks = (size + maxima->block - 1) / maxima->block;
  return quotient_block_maxima(src, dtype, size, 1.0f, maxima->block, maxima->max, parallel);
}

}  // namespace lastmile::detail::cpu_selection
