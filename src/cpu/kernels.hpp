// lastmile — CPU kernels (Highway, runtime dispatch). Plain functions, no vector types here:
// reductions (reduce.cpp, also the bench's read roofline) and row passes (one file a family,
// named in each section below).
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "cpu/tuning.hpp"
#include "lastmile/logits_view.hpp"

namespace lastmile::cpu {

using lastmile::DType;

// The longest block the softmax statistics take (block_softmax_stats, and its callers' buffers of
// a block): block_size for vocabularies up to 2^20. Larger rows take other paths.
inline constexpr size_t kStatisticsBlock = 2048;

// Largest value of x[0, n). Requires n > 0 and NaN-free input. Exact on every target: the
// maximum does not depend on evaluation order. One streaming read: the memory roofline.
float row_max(const float* x, size_t n);
float finite_min(const float* x, size_t n);  // the smallest entry above -inf; +inf if none
// The k-th largest of x[0, n), 1 <= k <= n, duplicates counted, NaN-free (-0 counts as +0, and
// +0 is returned). A min / max pass, then up to 32 counting passes over x (one a bit of the
// answer, below the bits its range fixes, ending at a pass that counts exactly k), no branch an
// entry: std::nth_element's partitions mispredicted about a branch an entry, which on 50 of 150
// top-k group maxima cost a tenth of a 32k row.
float kth_largest_value(const float* x, size_t n, size_t k);

// Largest 16-bit pattern of x[0, n) (unsigned): the same streaming read over fp16 / bf16 rows.
uint16_t row_max_bits16(const uint16_t* x, size_t n);

// keys[0, n) sorted ascending (sort_keys.cpp: Highway's vqsort, or its networks' runs merged).
// Distinct keys give the one order std::sort gives; equal keys are equal bits, so any order of
// them is the same array.
void sort_keys(uint64_t* keys, size_t n);

// The Highway target dispatch picks on this machine, e.g. "AVX3".
const char* dispatch_target_name();

// Row passes. n may be 0 unless said; none allocates.

// Conversion and edits in place (convert.cpp).
// dst = the float32 row of an fp32 / bf16 / fp16 src (exact), divided by t unless t is 1 (IEEE
// division); returns the first index of dst holding NaN or +inf, or -1.
int64_t load_row(const void* src, DType dtype, float* dst, size_t n, float t);
// load_row (t = 1) and apply_repetition_dense (below) in one pass; the first NaN / +inf, or -1.
int64_t load_row_repeated(const void* src, DType dtype, float* dst, size_t n, const uint64_t* seen,
                          float r);
// x /= t, exact IEEE division, the way `how` says (cpu/tuning.hpp); the first NaN / +inf, or -1.
int64_t divide(float* x, size_t n, float t, Division how = Division::fastest);
// Whether the dispatched target divides by t the reciprocal's way when asked `how` (else by the
// vector divide): what the tests check the ways by, as both give the same bits.
bool divides_by_reciprocal(float t, Division how);
int64_t find_nan_or_inf(const float* x, size_t n);  // first NaN / +inf, or -1
// x[i] *= x[i] > 0 ? 1 / r : r where bit i of seen is set; first +inf left, or -1. Exact.
int64_t apply_repetition_dense(float* x, size_t n, const uint64_t* seen, float r);
void subtract_two(float* x, size_t n, float max, float log_sum);  // (x - max) - log_sum
void mask_below(float* x, size_t n, float threshold);             // exact

// The argmax (argmax.cpp).
int64_t row_argmax(const float* x, size_t n);  // n > 0, NaN-free; one pass
// row_argmax of an unchecked row: the first NaN / +inf index in *first_bad_index (else -1).
int64_t argmax_checked(const float* x, size_t n, int64_t* first_bad_index);

// Block maxima and counts (block_max.cpp).
int64_t count_at_least(const float* x, size_t n, float v);                       // exact
int64_t count_source_at_least(const void* src, DType dtype, size_t n, float v);  // widened
// Each block's max of a caller's row, blocks of `block` entries (the last may be shorter); false if
// the row holds NaN or +inf.
bool source_block_max(const void* src, DType dtype, size_t n, size_t block, float* block_max);

// Softmax statistics (softmax_stats.cpp).
// Entries near a row's max, listed by block_softmax_stats on the way (ids null: none listed).
struct NearMax {
  float below_max = 0;  // list entries >= max + below_max (below_max <= 0)
  int32_t* ids = nullptr;
  float* values = nullptr;
  size_t count = 0;        // listed so far; more than room once the listing stopped there
  size_t room = SIZE_MAX;  // ids / values hold room + kCompressSlack entries
  // At most the row's max, known before the pass (min_p's group maxima): the listing starts from
  // it rather than from each block's running max, which lists most of a flat row's first blocks.
  float max_at_least = -std::numeric_limits<float>::infinity();
};
// A value band marked by block_softmax_stats on the way (bits null: none): bit i % 8 of bits[i / 8]
// set where from <= x[i] <= to (in blocks of -inf only, none), and in below_sums[b] each block's
// sum of exp(x - block_max[b]) over its entries x < from, summed as block_sums is (top-p on a flat
// row, the band guessed from samples). bits: room for (n + 7) / 8 bytes; none past them is
// written. A bitmap costs a few instructions a vector where compressing (id, value) pairs of the
// 40% of vectors a flat row's band touches cost 22.
struct ValueBand {
  float from = 0, to = 0;
  uint8_t* bits = nullptr;
  double* below_sums = nullptr;
};
// Where block_softmax_stats also writes the float32 row it reads (dst null: nowhere), with
// apply_repetition_dense's factor r where bit i of `seen` is set (null: nowhere).
struct ConvertedRow {
  float* dst = nullptr;
  const uint64_t* seen = nullptr;
  float r = 1.0f;
};
// The maxima of a row by groups of `group` entries (a multiple of 64 that divides the block),
// which block_softmax_stats also writes on the way (max null: none): max[g] for each group g.
struct GroupMaxima {
  size_t group = 0;
  float* max = nullptr;
};
// Softmax statistics of a caller's row divided by t, read in place, by blocks of `block`
// entries: block_max[b] and the sum of exp(x - block_max[b]) in block_sums[b]. buffer: room for
// one block and a vector (64 floats). Lists in *near a superset of the entries >= max +
// near->below_max (id order), and marks *band (band null or band->bits null: none). With out.dst (t
// = 1 only; not overlapping src, which an undivided float32 row's Exp reads again after out.dst is
// written), writes the row there on the way (the statistics stay those of the caller's row), and
// with groups.max the quotients' group maxima (top-k's, read with the Exp's vectors instead of in
// a pass of their own). False if the row (or a quotient, or a repeated entry) holds NaN or +inf.
// At t = 1 the sums are the caller's row's own arithmetic (exp(x), scaled after: see the exp
// kernels below), the same bits with or without a near list or band.
bool block_softmax_stats(const void* src, DType dtype, size_t n, float t, size_t block,
                         float* buffer, float* block_max, double* block_sums, NearMax* near,
                         ConvertedRow out = {}, ValueBand* band = nullptr, GroupMaxima groups = {});
// The sum of exp(x a - reference) over the entries x < below of a caller's row (a > 0; checked:
// no NaN or +inf), x a - reference by MulAdd (rounded once with FMA, twice without) and the vector
// exp (flushed below -86.9), in float partial sums by blocks of 2048, blocks added in double:
// within 2e-5 of the exact sum of those rounded terms, relative.
double sum_exp_scaled_below(const void* src, DType dtype, size_t n, float a, float below,
                            float reference);

// Lists of a row's entries (listing.cpp).
// Compressing kernels store whole vectors past their count: outputs need this many spare entries.
inline constexpr size_t kCompressSlack = 64;
// (id, value) of entries >= threshold (> when strict), in id order; room for n + kCompressSlack.
// Stops once more than `limit` entries passed (then returns a count > limit; nothing is written
// past limit + kCompressSlack).
size_t compress_at_least(const float* x, size_t n, float threshold, bool strict, int32_t* ids,
                         float* values, size_t limit = SIZE_MAX);
// compress_at_least (above) over a caller's row, read in place and widened; *bad: whether it
// held NaN or +inf (then the list means nothing). Stops once more than `limit` entries passed
// (returning a count > limit; *bad then covers what was read): ids and values need room for
// min(n, limit) + kCompressSlack.
size_t compress_source(const void* src, DType dtype, size_t n, float threshold, int32_t* ids,
                       float* values, bool* bad, size_t limit = SIZE_MAX);
// compress_source over the groups of `group` entries of src[0, n) listed in groups (count
// ascending group indices), in one call, ids indexing src: top-k lists some 50 groups of 64 from
// a 32k row, and a call for each run of them cost more than their compress.
// few_each: the groups hold one or two passing entries each (top-k's), appended one by one; else
// compressed a vector at a time. The limit as compress_source's.
size_t compress_source_groups(const void* src, DType dtype, size_t n, size_t group,
                              const int32_t* groups, size_t count, float threshold, bool few_each,
                              int32_t* ids, float* values, bool* bad, size_t limit = SIZE_MAX);
// The indices i of the entries lo <= x[i] < hi, in order; stops once more than `limit` passed
// (then returns a count > limit). at: room for limit + kCompressSlack.
size_t list_between(const float* x, size_t n, float lo, float hi, uint32_t* at, size_t limit);
// The smallest and largest of the entries lo <= x[i] < hi into *min and *max (+inf and -inf when
// there are none).
void min_max_between(const float* x, size_t n, float lo, float hi, float* min, float* max);
// (id, src[id] / t) of the entries marked in bits (bit i % 8 of bits[i / 8], as ValueBand marks
// them; bits past n ignored, no byte past (n + 7) / 8 read), in id order: the division's bits are
// scalar division's, unless t is 1. ids and values: room for min(count, limit) +
// kCompressSlack; stops (a count > limit) before a 64-entry word whose marks could pass limit.
size_t list_marked(const void* src, DType dtype, size_t n, float t, const uint8_t* bits,
                   int32_t* ids, float* values, size_t limit = SIZE_MAX);

// Exp weights and probabilities (probabilities.cpp).
// The exp kernels compute exp(x - max) within 4.1e-7 relative (5.5 ULP), monotone, flushing
// results below e^-86.9 to 0. (block_softmax_stats at t = 1 sums exp(x) itself where a block's max
// lies in [-40, 80], each term within 4.6e-7, then scales the sum by exp(-max) in double.)
// w = exp(x - max); per-block sums (block a multiple of 64) into block_sums; returns the total.
double exp_with_block_sums(const float* x, float* w, size_t n, float max, size_t block,
                           double* block_sums);
// exp_with_block_sums without w: the same sums.
double exp_block_sums(const float* x, size_t n, float max, size_t block, double* block_sums);
// With q = w * inv_sum: lists the ids with lo <= q < hi (id order; room for n + kCompressSlack)
// and returns how many; adds the sum of the q < lo to *mass_below and of the q >= hi to
// *mass_above (calls over consecutive pieces of 1024 entries, or multiples, add up as one call
// over them).
size_t probability_band(const float* w, size_t n, float inv_sum, float lo, float hi, int32_t* ids,
                        double* mass_below, double* mass_above);
// x[i] = q = exp(x[i] - max) * inv_sum in place (the weights exp_with_block_sums gives, times
// inv_sum); returns the sum of the q, their smallest in *lo and largest in *hi. n > 0.
double probabilities(float* x, size_t n, float max, float inv_sum, float* lo, float* hi);
// The sum of the x[i] < threshold (lane-wise float partial sums, a fixed order), and their count.
double sum_below(const float* x, size_t n, float threshold, size_t* count);
// The sum of the x[i] >= threshold (lane-wise float partial sums, a fixed order); threshold >
// -inf (a partial vector is padded with -inf).
double sum_at_least(const float* x, size_t n, float threshold);

}  // namespace lastmile::cpu
