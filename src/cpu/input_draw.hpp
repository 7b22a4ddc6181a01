// lastmile — the CPU backend's passes over a caller's row in place: the draw
// (Backend::draw_from_input) and the pieces raw logprobs share with it (input_logprobs.cpp).
#pragma once

#include <algorithm>
#include <cstdint>

#include "backend.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"
#include "reference/float16.hpp"

namespace lastmile::detail::cpu_selection {

// The address of entry i of a caller's row of `dtype`.
inline const void* entry_at(const void* src, DType dtype, size_t i) {
  return static_cast<const char*>(src) + i * element_size(dtype);
}

// A row's passes split into at most kRowChunks chunks of whole blocks, fixed by n alone, for a
// ParallelFor: results merged in chunk order never depend on how the chunks were run. A pass that
// lists lists each chunk into its own region of the scratch lists (kCompressSlack apart:
// compressing stores whole vectors past a count), whose share of the lists' room follows the
// chunk's share of the row, and closes the regions up in chunk order.
inline constexpr size_t kRowChunks = 8;
static_assert((kRowChunks + 1) * cpu::kCompressSlack <= kSortSlack,
              "SortScratch must hold every chunk's region");

struct RowChunks {
  size_t count = 0;
  size_t size = 0;  // entries per chunk, a multiple of the block; the last may be shorter
  size_t n = 0;
  size_t room = 0;  // the lists' room (SortScratch::list_room), shared out among the chunks
  size_t begin(size_t c) const { return c * size; }
  size_t end(size_t c) const { return std::min(n, begin(c) + size); }
  // Where chunk c lists, and how many entries it may list there.
  size_t region(size_t c) const { return share(begin(c)) + c * cpu::kCompressSlack; }
  size_t region_room(size_t c) const { return share(end(c)) - share(begin(c)); }

 private:
  size_t share(size_t i) const { return room >= n ? i : i * room / n; }
};

inline RowChunks row_chunks(size_t n, size_t block, size_t room = SIZE_MAX) {
  const size_t blocks = (n + block - 1) / block;
  const size_t size = (blocks + kRowChunks - 1) / kRowChunks * block;
  return {(n + size - 1) / size, size, n, room};
}

// fn(entry), where entry(i) is entry i of a caller's row src of `dtype` in float32 (the widening
// is exact): one switch on the dtype for a loop over many entries, not one per entry.
template <class Fn>
auto with_entries(const void* src, DType dtype, Fn fn) {
  switch (dtype) {
    case DType::bf16:
      return fn([x = static_cast<const uint16_t*>(src)](size_t i) { return bf16_to_f32(x[i]); });
    case DType::f16:
      return fn([x = static_cast<const uint16_t*>(src)](size_t i) { return f16_to_f32(x[i]); });
    case DType::f32:
      break;
  }
  return fn([x = static_cast<const float*>(src)](size_t i) { return x[i]; });
}

// Entry i of a caller's row src divided by t (t = 1: not divided), in float32: the same bits
// as the vector passes (the division is IEEE).
inline float scaled_entry(const void* src, DType dtype, size_t i, float t) {
  const float v = with_entries(src, dtype, [i](auto entry) { return entry(i); });
  return t == 1.0f ? v : v / t;
}

// The maxima of a row's quotients src / t by blocks of `block` entries (row_chunks' blocks, or
// blocks that divide them), from an earlier pass: a block whose max is below a threshold holds
// nothing to list.
struct QuotientMaxima {
  const float* max = nullptr;  // null: unknown, every block is read
  size_t block = 0;
  // The blocks that reach hold one or two entries that pass (top-k's; top-p's near list, where
  // a few may hold more: appended one by one, correct either way).
  bool few_each = false;
};

// Lists (id, src / t) of the entries whose quotient is >= threshold, in id order, into scratch;
// kNotListed when the row holds NaN / +inf or a listed quotient overflows (the largest entries
// are listed first of all, so an overflow anywhere shows among them), or when more pass than
// scratch.list_room() (then *past_room, if asked, is set). With `maxima`, reads only the blocks
// whose max reaches the threshold (the row was checked by the pass that found them).
size_t list_scaled_at_least(const void* src, DType dtype, size_t n, float t, float threshold,
                            SortScratch scratch, const ParallelFor& parallel,
                            QuotientMaxima maxima = {}, bool* past_room = nullptr);

static_assert(BlockMaxima::kMaxBlocks == kMaxBlocks, "block maxima are the rows' blocks");

// The max of a caller's float32 view, the sum of exp(x - max) over it and its block maxima
// (blocks of block_size(n)), in one read by blocks, writing the row to out.dst and its group
// maxima to groups.max (groups that divide the blocks) on the way if asked; false on a NaN /
// +inf (or one made by out's repetition) or a vocabulary over 2^20. `parallel` may split the
// read (fixed vocab chunks: the same results).
bool caller_row_softmax(const void* src, DType dtype, int64_t n, float* max, double* total,
                        BlockMaxima* maxima, cpu::ConvertedRow out = {},
                        const ParallelFor& parallel = {}, cpu::GroupMaxima groups = {});
// The block maxima alone (blocks of block_size(n)), in one read that `parallel` may split (fixed
// vocab chunks: the same maxima); false on a NaN / +inf.
bool caller_row_block_maxima(const void* src, DType dtype, int64_t n, BlockMaxima* maxima,
                             const ParallelFor& parallel = {});

// The k-th largest quotient of src / t by group maxima (groups of 64 to 1024 entries, at least
// 4k of them): each group's max is an entry, so the k-th largest max m has k entries at or above
// it; those lie in the groups whose max reaches m (about k of them; ties can make it up to the
// whole row) and hold the k largest, listed in scratch (id order, *candidates of
// them) for the selection. nullopt when k is large for the row's groups, the row is over 2^20,
// or it holds NaN / +inf (or a quotient that overflows): then kth_largest's sampled threshold
// decides (and declines a bad row). When fewer than k quotients are finite (a masked row), the
// k-th is -inf and only the finite ones are listed, as kth_largest does. *listed_from, if asked:
// the threshold listed from (every quotient >= it is listed: the lowest float in that case).
// known_maxima, if given: the groups' maxima (its groups for n and k), not read again.
std::optional<float> kth_largest_by_groups(const void* src, DType dtype, size_t n, float t,
                                           int64_t k, SortScratch scratch, size_t* candidates,
                                           const ParallelFor& parallel,
                                           float* listed_from = nullptr,
                                           const float* known_maxima = nullptr);

// Backend::draw_from_input; `summary` (known false on entry) as it says.
TokenId draw_from_caller_row(const void* src, DType dtype, int64_t n, const DrawParams& params,
                             double u, SortScratch scratch, const ParallelFor& parallel,
                             RawRowSummary* summary);
// The `listed` entries of a caller's row in scratch (id order) as steps 6 and 7b leave them:
// lowered through row.lower, then divided by t, *bound divided with them (the same quotients as
// the steps'); *lowered_max, if asked, the largest lowered entry before the division. False when
// a quotient overflows to +inf (the steps report it).
bool lower_and_divide(const PenalisedRow& row, SortScratch scratch, size_t listed, float t,
                      float* bound, float* lowered_max = nullptr);
// Top-p alone over a penalised row whose raw summary is known (penalised_top_p.cpp): the token
// draw_from_caller_row gives over the working row, or kNoInputDraw.
TokenId draw_top_p_from_penalised_row(const PenalisedRow& row, size_t n, const DrawParams& params,
                                      double u, SortScratch scratch, const RawRowSummary& summary,
                                      const ParallelFor& parallel, QuotientMaxima groups = {});
// Backend::draw_from_penalised_input: min_p alone, top-k (then top-p) with a list of 2k
// candidates at least among its groups, or top-p alone by the raw summary (learned when not
// asked for; the rest declined unread), as draw_from_caller_row decides them over the working
// row.
TokenId draw_from_penalised_blocks(const PenalisedRow& row, int64_t n, const DrawParams& params,
                                   double u, SortScratch scratch, RawRowSummary* summary,
                                   const ParallelFor& parallel);

// The pieces the draws share, a file each: input_passes.cpp (the passes over the row),
// input_min_p.cpp, input_top_p.cpp and input_top_k.cpp (a kind of draw each); input_draw.cpp
// picks among them.

// Entries converted and weighted at a time on the stack.
inline constexpr size_t kChunk = 256;

// src[from, from + count) / t into dst; the first NaN / +inf, or -1.
inline int64_t load_scaled(const void* src, DType dtype, size_t from, size_t count, float t,
                           float* dst) {
  return cpu::load_row(entry_at(src, dtype, from), dtype, dst, count, t);
}

// Groups whose maxima bound a row of n for top-k and min-p: at most kMaxGroups of a power-of-two
// size from 64 entries up, which divide row_chunks' blocks; 0 for a row over 2^20.
inline constexpr size_t kMaxGroups = 1024;
inline size_t group_size(size_t n) {
  if (n > (size_t{1} << 20)) return 0;
  size_t group = 64;
  while (n > group * kMaxGroups) group *= 2;
  return group;
}

// The oracle's walk over the caller's row src / t from entry `start` on, kChunk entries at a time
// converted and weighted with the vector exp (the weights the block sums were made of), until the
// cumulative sum passes target: the token it passes at.
TokenId walk_from(const void* src, DType dtype, size_t n, float t, float max, size_t start,
                  double cumulative, double target);
// The oracle's walk over `listed` entries (ids, values in id order, max their largest) whose list
// is long, by blocks as walk_from does with the vector exp: one sum pass locates the block
// holding u * total, then its chunks are weighted again. std::exp entry by entry, twice over the
// list, took 1.3 ms of a 128k N(0, 1) row with min_p 0.001 (it keeps 99% of the row).
inline constexpr size_t kLongList = 4096;  // lists up to it keep the oracle's walk (draw_over_list)
TokenId draw_over_long_list(size_t listed, const int32_t* ids, const float* values, float max,
                            double u);

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
                 cpu::ValueBand* band = nullptr, cpu::GroupMaxima groups = {});
// A draw's statistics of a caller's row at t = 1 are caller_row_softmax's (the same blocks; with
// a near list or a band, the same sums to the bit): what summarise_while_converting would learn,
// into `summary` when asked for.
void learn_raw_summary(const RowSoftmax& row, float t, RawRowSummary* summary);
// The maxima of the quotients src / t by blocks of `block` entries, in one read split over the
// row's chunks: division by t > 0 is monotone, so a block's largest quotient is its max divided.
// False on a NaN / +inf, or a quotient that overflows to +inf.
bool quotient_block_maxima(const void* src, DType dtype, size_t n, float t, size_t block,
                           float* maxima, const ParallelFor& parallel);

// Temperature only, or min_p (input_min_p.cpp).
TokenId draw_by_softmax(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                        SortScratch scratch, const ParallelFor& parallel, RawRowSummary* summary);
// Whether min_p may decide a row of n entries by its blocks' maxima (input_min_p.cpp).
bool min_p_by_maxima_fits(size_t n, float min_p);
// min_p alone over a penalised row (min_p_by_maxima_fits), the caller's row read block by block;
// summary: its raw summary, if learned (input_min_p.cpp).
TokenId draw_min_p_from_penalised_blocks(const PenalisedRow& row, size_t n,
                                         const DrawParams& params, double u, SortScratch scratch,
                                         const RawRowSummary* summary, const ParallelFor& parallel);
// Top-p alone (input_top_p.cpp).
TokenId draw_top_p(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                   SortScratch scratch, const ParallelFor& parallel, RawRowSummary* summary);
// Top-k's groups: at least 4k of them, else 0 (input_top_k.cpp).
size_t top_k_group_size(size_t n, int64_t k);
// Top-k, then top-p on the survivors (input_top_k.cpp).
TokenId draw_top_k(const void* src, DType dtype, int64_t n, const DrawParams& params, double u,
                   SortScratch scratch, const ParallelFor& parallel);
// Top-k (then top-p) over a penalised row, from the caller's row and a list of 2k candidates;
// group_maxima, if known: the caller's row's, for 2k (input_top_k.cpp).
TokenId draw_top_k_from_penalised_row(const PenalisedRow& row, size_t n, const DrawParams& params,
                                      double u, SortScratch scratch, const ParallelFor& parallel,
                                      const float* group_maxima);

}  // namespace lastmile::detail::cpu_selection
