// lastmile — top-p alone drawn from a caller's row in place (input_draw.hpp): the band of
// probabilities the cut may fall in, listed after the statistics pass (or marked by it on a flat
// row), decided as the steps decide it, and the draw over the kept ones.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>

#include "cpu/input_draw.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail::cpu_selection {

namespace {

// The quotients src[from, from + count) / t: the caller's own entries for a float32 row at t = 1,
// else loaded into dst (checked by the statistics pass).
const float* quotients_at(const void* src, DType dtype, size_t from, float t, float* dst,
                          size_t count) {
  if (dtype == DType::f32 && t == 1.0f) return static_cast<const float*>(src) + from;
  load_scaled(src, dtype, from, count, t, dst);
  return dst;
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

// Calls f(b, from, to) for each statistics block b of the row, with ids[from, to) the entries of a
// band in id order (ids[0, listed)) that lie in it.
template <class F>
void for_each_block_of_band(const RowSoftmax& row, size_t n, const int32_t* ids, size_t listed,
                            F f) {
  for (size_t b = 0, i = 0; b < row.blocks; ++b) {
    const auto end = static_cast<int32_t>(std::min(n, (b + 1) * row.block));
    const size_t last = std::lower_bound(ids + i, ids + listed, end) - ids;
    f(b, i, last);
    i = last;
  }
}

// Spec §9.3 over a listed band: ids[0, listed) in id order, their q in qs (lo <= q <= hi, q =
// exp(x - max) * inv_sum), every entry below the band masked and adding up to `below`, every one
// above it kept. Masked entries get q < 0 and leave kept[b], block b's kept weight (in units of the
// row's exp sum; kept may be null). The band is narrowed by bisection on q, a sum pass over it a
// step, to [q_lo, q_hi) holding at most kNarrowed entries: the mass below q_lo keeps the
// cumulative sum <= cut (masked), the mass below q_hi passes it (kept from there), and mask_band
// decides between.
// mask_band over a whole band histogrammed thousands of entries one by one (a flat row's 8k), and
// masked them with a mispredicted branch each (a long-tailed row's 15k: a fifth of its time).
void mask_listed_band(const void* src, DType dtype, size_t n, float t, const RowSoftmax& row,
                      const int32_t* ids, float* qs, size_t listed, double below, float lo,
                      float hi, float inv_sum, float cut, TokenId top, SortScratch scratch,
                      double* kept) {
  auto mask_listed = [&](size_t i) {
    if (kept != nullptr) kept[static_cast<size_t>(ids[i]) / row.block] -= qs[i] / inv_sum;
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
    if (kept != nullptr) {  // masked below q_lo, block by block
      for_each_block_of_band(row, n, ids, listed, [&](size_t block, size_t from, size_t to) {
        size_t unused;
        kept[block] -= cpu::sum_below(qs + from, to - from, q_lo, &unused) / inv_sum;
      });
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
// and each block's mass above it. mask_listed_band decides in the band; each block's kept weight
// is then its mass above the band and its band's kept q, and the walk finds the block holding
// u * kept total and steps through it skipping q < lo and the band's masked ones. A block's kept
// weight as its mass less the masked mass lost a block's rounding (some 1e-6 of it) from the
// sliver a small p keeps: a review's draw moved by 1.5e-4 of the kept mass.
TokenId draw_top_p_dense(const void* src, DType dtype, size_t n, float t, const RowSoftmax& row,
                         float inv_sum, float cut, const BandGuess& guess, double u,
                         SortScratch scratch) {
  int32_t* const ids = scratch.ids.data();
  float* const qs = scratch.values.data();
  float values[cpu::kStatisticsBlock + cpu::kCompressSlack], weights[cpu::kStatisticsBlock];
  double kept[kMaxBlocks];  // each block's q above the band, then its kept weight
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
      kept[b] = 0;
      cpu::exp_with_block_sums(x, weights, count, row.max, count, &unused);
      const size_t listed = cpu::probability_band(weights, count, inv_sum, lo, hi, ids + band,
                                                  &block_below, &kept[b]);
      for (size_t i = band; i < band + listed; ++i) {  // q from the weights the pass computed
        const auto j = static_cast<size_t>(ids[i]);    // within the block
        band_mass += qs[i] = weights[j] * inv_sum;
        if (top < 0 && x[j] == row.max) top = static_cast<TokenId>(start + j);
        ids[i] += static_cast<int32_t>(start);
      }
      band += listed;
      below += block_below;
    }
    if (static_cast<float>(below) > cut) continue;  // a token below lo stays: crossing below
    if (hi <= 1.0f && static_cast<float>(below + band_mass) <= cut) continue;  // above hi
    break;
  }
  mask_listed_band(src, dtype, n, t, row, ids, qs, band, below, lo, hi, inv_sum, cut, top, scratch,
                   nullptr);
  for_each_block_of_band(row, n, ids, band, [&](size_t b, size_t from, size_t to) {
    kept[b] = (kept[b] + cpu::sum_at_least(qs + from, to - from, 0.0f)) / inv_sum;  // masked: q < 0
  });
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

}  // namespace

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

}  // namespace lastmile::detail::cpu_selection
