// lastmile — the CPU backend: Highway row passes (kernels.hpp) and selection instead of sorting.
// Every kernel equals the reference oracle bit for bit except log_softmax and min_p, which use
// a vector exp within 4.6e-7 of std::exp, relative (logprobs within 1e-5). Top-k never sorts the
// row: the k-th largest value is found among candidates at or above the k-th largest of its
// groups' maxima (or a sampled threshold when k is large for the row), and top-p then runs on the
// few survivors with the oracle's exact arithmetic, so kept sets are identical.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "backend.hpp"
#include "cpu/input_draw.hpp"
#include "cpu/input_logprobs.hpp"
#include "cpu/kernels.hpp"
#include "cpu/selection.hpp"

namespace lastmile::detail {
namespace {

static_assert(cpu::kCompressSlack <= kSortSlack, "SortScratch must fit whole-vector stores");

using namespace cpu_selection;

// The k-th largest of a float32 row: by its groups' maxima when k is small for the row, else
// cpu_selection::kth_largest over the row itself (also for a row holding +inf, which the maxima
// pass declines). Neither lists -inf entries: with fewer than k entries above -inf, the k-th
// is -inf and those are the candidates. nullopt when the candidates would pass the lists' room
// (about 2k of them: k over about an eighth of the row, or ties): the caller decides on the row.
std::optional<float> kth_largest_of_row(const float* x, int64_t n, int64_t k, SortScratch scratch,
                                        size_t* candidates) {
  if (const std::optional<float> kth = kth_largest_by_groups(x, DType::f32, static_cast<size_t>(n),
                                                             1.0f, k, scratch, candidates, {}))
    return *kth;
  const size_t room = scratch.list_room();
  return kth_largest(
      n, k, scratch, candidates,
      [x](int64_t i) { return std::isnan(x[i]) ? kNegInf : x[i]; },  // an order for the samples
      [&](float threshold) {
        const size_t count =
            cpu::compress_at_least(x, static_cast<size_t>(n), threshold, false, scratch.ids.data(),
                                   scratch.values.data(), room);
        return count > room ? kNotListed : count;
      });
}

// The sum of exp(x - max) as the raw statistics and the dense draw add it: per block, lane-wise
// float partial sums, blocks in double. Float partial sums a row long drifted: the one
// holding a peak's 1 took each of a flat tail's terms with a rounding, 5e-5 off in the log-sum
// of a 32001-entry row.
double sum_exp(const float* x, size_t n, float max) {
  double block_sums[kMaxBlocks];
  return cpu::exp_block_sums(x, n, max, block_size(static_cast<int64_t>(n)), block_sums);
}

// exp(v - max) as the vector passes weigh an entry (not std::exp).
float vector_weight(float v, float max) {
  float in[cpu::kCompressSlack] = {v}, weight[cpu::kCompressSlack];
  double unused;
  cpu::exp_with_block_sums(in, weight, 1, max, cpu::kCompressSlack, &unused);
  return weight[0];
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string_view description() const override { return cpu::dispatch_target_name(); }
  size_t list_room(int64_t n) const override { return cpu_selection::list_room(n); }

  int64_t convert_row(const void* src, DType dtype, float* dst, int64_t n) const override {
    return convert_row_divided(src, dtype, dst, n, 1.0f);
  }

  int64_t convert_row_divided(const void* src, DType dtype, float* dst, int64_t n,
                              float t) const override {
    return cpu::load_row(src, dtype, dst, static_cast<size_t>(n), t);
  }

  int64_t convert_row_repeated(const void* src, DType dtype, float* dst, int64_t n,
                               const uint64_t* seen, float repetition_penalty) const override {
    return cpu::load_row_repeated(src, dtype, dst, static_cast<size_t>(n), seen,
                                  repetition_penalty);
  }

  int64_t convert_row_summarised(const void* src, DType dtype, float* dst, int64_t n,
                                 const uint64_t* seen, float repetition_penalty,
                                 RawRowSummary* summary) const override {
    summary->known =
        summarise_while_converting(src, dtype, n, dst, seen, repetition_penalty, summary);
    if (summary->known) return -1;
    return seen != nullptr ? convert_row_repeated(src, dtype, dst, n, seen, repetition_penalty)
                           : convert_row(src, dtype, dst, n);
  }

  bool summarise_row(const void* src, DType dtype, int64_t n, RawRowSummary* summary,
                     const ParallelFor& parallel) const override {
    summary->known =
        summarise_while_converting(src, dtype, n, nullptr, nullptr, 1.0f, summary, parallel);
    return summary->known;
  }

  bool block_maxima(const void* src, DType dtype, int64_t n, BlockMaxima* maxima,
                    const ParallelFor& parallel) const override {
    return caller_row_block_maxima(src, dtype, n, maxima, parallel);
  }

  TokenId row_argmax(const float* x, int64_t n) const override {
    return static_cast<TokenId>(cpu::row_argmax(x, static_cast<size_t>(n)));
  }

  // Read in the row's fixed chunks (row_chunks); their maxima merge in chunk order (an earlier
  // chunk wins a tie: the lowest index), as do first NaN / +inf.
  TokenId argmax_checked(const float* x, int64_t n, int64_t* first_bad,
                         const ParallelFor& parallel) const override {
    const RowChunks chunks = row_chunks(static_cast<size_t>(n), block_size(n));
    const size_t count = chunks.count;
    if (count <= 1)
      return static_cast<TokenId>(cpu::argmax_checked(x, static_cast<size_t>(n), first_bad));
    int64_t best[kRowChunks] = {}, bad[kRowChunks] = {};
    auto read_chunk = [&](int64_t c) {
      const size_t from = chunks.begin(static_cast<size_t>(c));
      best[c] = static_cast<int64_t>(from) +
                cpu::argmax_checked(x + from, chunks.end(static_cast<size_t>(c)) - from, &bad[c]);
      if (bad[c] >= 0) bad[c] += static_cast<int64_t>(from);
    };
    parallel(static_cast<int64_t>(count), read_chunk);
    int64_t at = best[0];
    *first_bad = -1;
    for (size_t c = 0; c < count && *first_bad < 0; ++c) *first_bad = bad[c];
    if (*first_bad >= 0) return 0;  // as the unsplit read
    for (size_t c = 1; c < count; ++c)
      if (x[best[c]] > x[at]) at = best[c];
    return static_cast<TokenId>(at);
  }

  float row_max(const float* x, int64_t n) const override {
    return cpu::row_max(x, static_cast<size_t>(n));
  }

  void log_softmax(float* x, int64_t n) const override {
    const float max = row_max(x, n);
    if (max == kNegInf) return;
    const auto log_sum = static_cast<float>(std::log(sum_exp(x, static_cast<size_t>(n), max)));
    cpu::subtract_two(x, static_cast<size_t>(n), max, log_sum);
  }

  int64_t divide(float* x, int64_t n, float t) const override {
    return cpu::divide(x, static_cast<size_t>(n), t);
  }

  int64_t find_nan_or_inf(const float* x, int64_t n) const override {
    return cpu::find_nan_or_inf(x, static_cast<size_t>(n));
  }

  void apply_min_p(float* x, int64_t n, float min_p) const override {
    const float max = row_max(x, n);
    if (max == kNegInf) return;
    const auto inv_sum = static_cast<float>(1.0 / sum_exp(x, static_cast<size_t>(n), max));
    cpu::mask_below(x, static_cast<size_t>(n), smallest_kept(max, inv_sum, min_p * inv_sum));
  }

  size_t apply_top_k_top_p(float* x, int64_t n, int64_t top_k, bool apply_top_p, float top_p,
                           SortScratch scratch) const override {
    if (top_k >= n) return top_p_without_sort(x, n, top_p, scratch);
    const auto size = static_cast<size_t>(n);
    size_t candidates = 0;
    if (const std::optional<float> kth = kth_largest_of_row(x, n, top_k, scratch, &candidates)) {
      const size_t kept = keep_at_least(scratch, candidates, *kth);
      cpu::mask_below(x, size, *kth);  // ties at the k-th value kept, spec §9.2
      return apply_top_p ? top_p_keep(kept, top_p, scratch, x) : kept;
    }
    // More candidates than the lists hold: the same decisions on the row. The k-th of all n is
    // -inf when fewer than k are finite: nothing is masked.
    cpu::mask_below(x, size, cpu::kth_largest_value(x, size, static_cast<size_t>(top_k)));
    if (apply_top_p) top_p_over_row(x, size, top_p, scratch);
    return kNotListed;
  }

  TokenId draw(const float* x, int64_t n, double u, SortScratch scratch,
               size_t listed) const override {
    if (listed != kNotListed) return draw_listed(x, u, scratch, listed);
    // Dense rows (over 1/8 alive) stop the compress early and draw by blocks.
    const size_t dense = static_cast<size_t>(n) / 8;
    const size_t alive = cpu::compress_at_least(x, static_cast<size_t>(n), kNegInf, true,
                                                scratch.ids.data(), scratch.values.data(), dense);
    if (alive > dense) return draw_dense(x, n, u, scratch);
    return draw_listed(x, u, scratch, alive);  // the finite entries, listed in id order
  }

  TokenId draw_from_input(const void* src, DType dtype, int64_t n, const DrawParams& params,
                          double u, SortScratch scratch, const ParallelFor& parallel,
                          RawRowSummary* summary) const override {
    if (summary != nullptr) summary->known = false;
    return draw_from_caller_row(src, dtype, n, params, u, scratch, parallel, summary);
  }

  TokenId draw_from_penalised_input(const PenalisedRow& row, int64_t n, const DrawParams& params,
                                    double u, SortScratch scratch, RawRowSummary* summary,
                                    const ParallelFor& parallel) const override {
    return draw_from_penalised_blocks(row, n, params, u, scratch, summary, parallel);
  }

  RawLogprobs input_raw_logprobs(const void* src, DType dtype, int64_t n, bool log_softmax,
                                 TokenId token_id, int64_t k, TokenId* ids, float* out,
                                 SortScratch scratch, const RawRowSummary* summary,
                                 const ParallelFor& parallel) const override {
    return raw_logprobs_of_caller_row(src, dtype, n, log_softmax, token_id, k, ids, out, scratch,
                                      summary, parallel);
  }

  // The oracle's arithmetic without its branches: a token left unseen is multiplied by 1 (the
  // same bits: no NaN reaches step 6), and the factors are picked by masks (GCC turned the
  // ternaries back into branches). The oracle's branch on the logit's sign, as random as the
  // logits, cost 10 ns a token: 6% of a penalised top-k/top-p row with a 1k-token history.
  void apply_penalties(float* x, std::span<const TokenCount> counts, float repetition_penalty,
                       float frequency_penalty, float presence_penalty) const override {
    const auto pick = [](bool first, float a, float b) {
      const uint32_t mask = 0u - static_cast<uint32_t>(first);
      return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) |
                                  (std::bit_cast<uint32_t>(b) & ~mask));
    };
    const float inverse_repetition = 1.0f / repetition_penalty;
    for (const TokenCount& c : counts) {
      float& l = x[c.token_id];
      const float by_sign = pick(l > 0, inverse_repetition, repetition_penalty);
      float v = l * pick(c.in_prompt || c.output_count > 0, by_sign, 1.0f);
      v -= frequency_penalty * static_cast<float>(c.output_count);
      v -= presence_penalty * pick(c.output_count > 0, 1.0f, 0.0f);
      l = v;
    }
  }

  int64_t apply_repetition_dense(float* x, int64_t n, const uint64_t* seen,
                                 float repetition_penalty) const override {
    return cpu::apply_repetition_dense(x, static_cast<size_t>(n), seen, repetition_penalty);
  }

  int64_t rank_of(const float* x, int64_t n, TokenId token_id) const override {
    return cpu::count_at_least(x, static_cast<size_t>(n), x[token_id]);
  }

  void top_n(const float* x, int64_t n, int64_t k, TokenId* ids, float* values,
             SortScratch scratch) const override {
    if (k <= 0) return;
    auto identity = [](float v) { return v; };
    size_t candidates = 0;
    const std::optional<float> kth = kth_largest_of_row(x, n, k, scratch, &candidates);
    if (!kth)  // more candidates than the lists hold
      return top_n_over_row(
          static_cast<size_t>(n), [x](size_t i) { return x[i]; }, identity, k, ids, values, scratch,
          x);
    const size_t shown = largest_listed(scratch, candidates, identity, *kth, k, ids);
    finish_top_n(
        shown, n, k, [x](TokenId i) { return x[i]; }, ids, values);
  }

 private:
  // The oracle's walk restricted to a list of ids in id order (apply_top_k_top_p's survivors, or
  // the finite entries): x at the listed ids, where -inf entries (top-p's masks) add exact zeros,
  // so the same terms as the full walk and the same token. An empty or all -inf list gives 0.
  static TokenId draw_listed(const float* x, double u, SortScratch scratch, size_t listed) {
    const int32_t* ids = scratch.ids.data();
    return draw_over_list(listed, ids, u, [x, ids](size_t i) { return x[ids[i]]; });
  }

  // The inverse CDF over every token, by blocks: one Exp pass sums each block (nothing stored:
  // the row stays the only one in cache); the walk skips whole blocks, then recomputes the block
  // holding u * total and steps through it token by token (on into the next block if rounding
  // left the target past its end).
  static TokenId draw_dense(const float* x, int64_t n, double u, SortScratch scratch) {
    const auto size = static_cast<size_t>(n);
    const float max = cpu::row_max(x, size);
    double sums[kMaxBlocks];
    const size_t block = block_size(n);
    const double target = u * cpu::exp_block_sums(x, size, max, block, sums);
    double cumulative = 0;
    size_t start = block_holding(sums, size, block, target, &cumulative);
    // A block of block_size fits the stack up to 2^20 entries; larger rows use the list's room.
    float computed[cpu::kStatisticsBlock];
    float* w = block <= cpu::kStatisticsBlock ? computed : scratch.values.data();
    TokenId last_kept = 0;
    for (; start < size; start += block) {
      const size_t end = std::min(size, start + block);
      double unused;
      cpu::exp_with_block_sums(x + start, w, end - start, max, block, &unused);
      for (size_t i = start; i < end; ++i) {
        const float weight = x[i] == kNegInf ? 0.0f : w[i - start];
        if (weight == 0.0f) continue;
        cumulative += weight;
        last_kept = static_cast<TokenId>(i);
        if (cumulative > target) return last_kept;
      }
    }
    return last_kept;  // rounding left u * total at the very end
  }

  // Spec §9.3 without a sort. A row at most 1/64 finite (after min_p, or a grammar's mask) takes
  // top-p on the list of its finite tokens with the oracle's arithmetic (exact), and returns the
  // list for the draw. Otherwise probabilities q use the vector exp, so a token within float
  // rounding of the cut may differ from the oracle (as vLLM's own kernels). The ascending
  // cumulative sum crosses 1 - p inside a band [lo, hi) of probabilities guessed from samples
  // (BandGuess) and checked with one pass that sums every q < lo and lists the band; the band
  // (a few thousand tokens, not the row) is histogrammed by the float bits of q, 32 buckets an
  // octave; buckets below the crossing one are masked, buckets above kept, and only the crossing
  // bucket's tokens are sorted and walked with the oracle's rule. No weights are kept (a row of
  // them would double the scratch): the band's pass weighs the row again, by pieces on the stack,
  // and q < lo is a logit threshold, the vector exp being monotone. When the band reaches the top
  // and is short (at most n / 8), it lists every survivor: returned for the draw (as
  // apply_top_k_top_p's list), which then skips its own pass over the row. A band longer than
  // the lists' room (ties by the thousand, or a third guess that still lists most of the row) is
  // decided on the row with the oracle's arithmetic (top_p_over_row).
  static size_t top_p_without_sort(float* x, int64_t n, float top_p, SortScratch scratch) {
    const auto size = static_cast<size_t>(n);
    // A row masked to a few tokens (by min_p before it, or by a grammar's mask): top-p on their
    // list, as after top-k, before any pass over the whole row; its Exp passes took 5x longer
    // (min_p 0.05 then top-p 0.9 on a 128k row). A dense row stops the compress within its first
    // few vectors. (An all -inf row lists nothing, which the draw takes as the oracle's token 0.)
    const size_t sparse = size / 64;
    if (top_p < 1.0f) {
      const size_t alive = cpu::compress_at_least(x, size, kNegInf, true, scratch.ids.data(),
                                                  scratch.values.data(), sparse);
      if (alive <= sparse) return top_p_keep(alive, top_p, scratch, x);
    }
    const TokenId top = static_cast<TokenId>(cpu::row_argmax(x, size));  // never masked
    const float max = x[top];
    if (max == kNegInf) return kNotListed;
    if (top_p == 1.0f) {
      mask_underflowed(x, size, max);
      return kNotListed;
    }
    const auto inv_sum = static_cast<float>(1.0 / sum_exp(x, size, max));
    const float cut = 1.0f - top_p;
    int32_t* const ids = scratch.ids.data();
    float* const qs = scratch.values.data();  // the band's q
    float lo = 0, hi = 2;  // hi above every probability: the band reaches the top
    double below = 0;
    size_t band = kNotListed;
    const BandGuess guess = sampled_band(x, size, max, inv_sum, cut);
    // Margins of 8 and 32 samples; then, as the last band told, everything above it (an LLM
    // row's head, which samples miss) or below it: the crossing lies there.
    bool crossing_above = false, found = false;
    for (int attempt = 0; attempt < 3 && !found; ++attempt) {
      if (attempt < 2) {
        guess.band(attempt == 0 ? 8 : 32, &lo, &hi);
      } else if (crossing_above) {
        lo = hi;
        hi = 2.0f;
      } else {
        hi = lo;
        lo = 0.0f;
      }
      // q = 0 goes below the band, whose mass it leaves as is: every such token is masked (its
      // cumulative sum is that of those below it). A masked row too long for the list path
      // above would, with lo = 0, make its -inf entries the band (a min_p row: 1.08 ms a 128k
      // row, 45 us after).
      lo = std::max(lo, std::numeric_limits<float>::denorm_min());
      band = list_probability_band(x, size, max, inv_sum, lo, hi, scratch, &below);
      if (band == kNotListed) break;  // past the room
      crossing_above = false;
      if (static_cast<float>(below) > cut) continue;  // a token below lo stays: crossing below
      double band_mass = 0;
      for (size_t i = 0; i < band; ++i) band_mass += qs[i];
      crossing_above = hi <= 1.0f && static_cast<float>(below + band_mass) <= cut;
      found = !crossing_above;
    }
    if (!found) {  // a band past the room (ties by the thousand), or a guess missed twice
      top_p_over_row(x, size, top_p, scratch);
      return kNotListed;
    }
    // q < lo, as a logit threshold: the smallest logit whose q reaches lo (the max's does: the
    // vector exp is only asked of v <= max, its domain in the passes).
    cpu::mask_below(
        x, size,
        smallest_passing(
            [&](float v) { return v >= max || !(vector_weight(v, max) * inv_sum < lo); },
            max + std::log(lo / inv_sum)));
    mask_band(
        ids, band, [&](size_t i) { return qs[i]; }, [&](size_t i) { return x[ids[i]]; }, below, lo,
        hi, cut, top, scratch, [&](size_t i) { x[ids[i]] = kNegInf; });
    return hi > 1.0f && band <= size / 8 ? band : kNotListed;
  }

  // BandGuess over the row's q = exp(x - max) * inv_sum, the vector exp's, its samples weighed in
  // one call.
  static BandGuess sampled_band(const float* x, size_t n, float max, float inv_sum, float cut) {
    constexpr size_t kSamples = BandGuess::kSamples;
    float samples[kSamples], weights[kSamples];
    if (BandGuess::sampled(n)) {
      for (size_t j = 0; j < kSamples; ++j) samples[j] = x[BandGuess::sample_at(n, j)];
      double unused;
      cpu::exp_with_block_sums(samples, weights, kSamples, max, kSamples, &unused);
    }
    size_t j = 0;  // BandGuess asks for the samples in order
    return BandGuess(n, cut, [&](size_t) { return weights[j++] * inv_sum; });
  }

  // probability_band over the row's q, weighed again by pieces on the stack: the band's ids in
  // scratch.ids and their q in scratch.values (id order), the mass below lo into *below (the
  // same sum as one call over the whole row's weights). kNotListed when the band might pass the
  // lists' room.
  static size_t list_probability_band(const float* x, size_t n, float max, float inv_sum, float lo,
                                      float hi, SortScratch scratch, double* below) {
    constexpr size_t kPiece = 2048;  // whole 64-vector sums, as probability_band adds them
    float weights[kPiece];
    int32_t* const ids = scratch.ids.data();
    float* const qs = scratch.values.data();
    size_t band = 0;
    *below = 0;
    for (size_t start = 0; start < n; start += kPiece) {
      const size_t count = std::min(kPiece, n - start);
      if (band + count > scratch.list_room()) return kNotListed;
      double unused, unused_above = 0;
      cpu::exp_with_block_sums(x + start, weights, count, max, kPiece, &unused);
      const size_t listed =
          cpu::probability_band(weights, count, inv_sum, lo, hi, ids + band, below, &unused_above);
      for (size_t i = band; i < band + listed; ++i) {
        qs[i] = weights[ids[i]] * inv_sum;
        ids[i] += static_cast<int32_t>(start);
      }
      band += listed;
    }
    return band;
  }

  // Spec §9.3 with p = 1: the cut is 0, so exactly the tokens whose float32 probability is 0
  // go. None can when every finite logit is within 80 of the max: exp(-80) / n stays above the
  // smallest denormal for any n < 2^31; the usual LLM row costs one min pass, no Exp.
  static void mask_underflowed(float* x, size_t n, float max) {
    constexpr float kNoUnderflowSpan = 80.0f;
    if (max - cpu::finite_min(x, n) < kNoUnderflowSpan) return;
    const auto inv_sum = static_cast<float>(1.0 / sum_exp(x, n, max));
    cpu::mask_below(x, n, smallest_kept(max, inv_sum, std::numeric_limits<float>::denorm_min()));
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;  // stateless, immutable
  return backend;
}

}  // namespace lastmile::detail
