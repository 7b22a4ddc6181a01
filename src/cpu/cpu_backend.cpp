// lastmile — the CPU backend: Highway row passes (row_ops.cpp) and selection instead of sorting.
// Every kernel equals the reference oracle bit for bit except log_softmax and min_p, which use
// a vector exp within 1.01 ULP of std::exp (logprobs within 1e-5). Top-k never sorts the row: the
// k-th largest value is found among candidates above a sampled threshold, and top-p then runs on
// the few survivors with the oracle's exact arithmetic, so kept sets are identical.
#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>

#include "backend.hpp"
#include "cpu/kernels.hpp"

namespace lastmile::detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
static_assert(cpu::kCompressSlack <= kSortSlack, "SortScratch must fit whole-vector stores");

// Float bits mapped so that unsigned order is float order (-inf lowest); NaN-free input.
uint32_t orderable(float v) {
  const uint32_t bits = std::bit_cast<uint32_t>(v);
  return bits & 0x80000000u ? ~bits : bits | 0x80000000u;
}
float from_orderable(uint32_t key) {
  return std::bit_cast<float>(key & 0x80000000u ? key & 0x7fffffffu : ~key);
}

// The k-th largest value of x (duplicates counted), 1 <= k <= n, without sorting the row; the
// candidates (every entry >= it, and more) are left in scratch.ids / values[0, *candidates) in
// id order:
// the j-th largest of 256 evenly spaced samples gives a threshold expected to keep about 2k
// entries (plus a margin); the entries above it are compressed and the k-th found among them
// (the threshold drops until at least k entries pass; -inf keeps all). Selection, not sorting,
// on the samples too: a sort of them cost more than the compress pass.
float kth_largest(const float* x, int64_t n, int64_t k, SortScratch scratch, size_t* candidates) {
  constexpr int64_t kSamples = 256;
  float samples[kSamples];
  const int64_t m = std::min(n, kSamples);
  const int64_t stride = n / m;
  for (int64_t i = 0; i < m; ++i) samples[i] = x[i * stride];
  int64_t j = std::min<int64_t>(m - 1, 2 * k * m / n + 4);
  for (;;) {
    float threshold = kNegInf;
    if (j < m - 1) {
      std::nth_element(samples, samples + j, samples + m, std::greater<float>());
      threshold = samples[j];
    }
    const size_t count = cpu::compress_at_least(x, static_cast<size_t>(n), threshold, false,
                                                scratch.ids.data(), scratch.values.data());
    if (static_cast<int64_t>(count) >= k) {
      uint64_t* keys = scratch.keys.data();  // select on a copy: values stay with their ids
      for (size_t i = 0; i < count; ++i) keys[i] = orderable(scratch.values[i]);
      std::nth_element(keys, keys + k - 1, keys + count, std::greater<uint64_t>());
      *candidates = count;
      return from_orderable(static_cast<uint32_t>(keys[k - 1]));
    }
    j = j * 4 + 16;
  }
}

class CpuBackend final : public Backend {
 public:
  std::string_view name() const override { return "cpu"; }
  std::string_view description() const override { return cpu::dispatch_target_name(); }

  int64_t convert_row(const void* src, DType dtype, float* dst, int64_t n) const override {
    switch (dtype) {
      case DType::f32:
        return cpu::copy_checked(static_cast<const float*>(src), dst, static_cast<size_t>(n));
      case DType::bf16:
        return cpu::widen_bf16_checked(static_cast<const uint16_t*>(src), dst,
                                       static_cast<size_t>(n));
      case DType::f16:
        return cpu::widen_f16_checked(static_cast<const uint16_t*>(src), dst,
                                      static_cast<size_t>(n));
    }
    return reference_backend().convert_row(src, dtype, dst, n);
  }

  TokenId row_argmax(const float* x, int64_t n) const override {
    return static_cast<TokenId>(cpu::row_argmax(x, static_cast<size_t>(n)));
  }

  TokenId argmax_checked(const float* x, int64_t n, int64_t* first_bad) const override {
    return static_cast<TokenId>(cpu::argmax_checked(x, static_cast<size_t>(n), first_bad));
  }

  float row_max(const float* x, int64_t n) const override {
    return cpu::row_max(x, static_cast<size_t>(n));
  }

  void log_softmax(float* x, int64_t n) const override {
    const float max = row_max(x, n);
    if (max == kNegInf) return;
    const auto log_sum = static_cast<float>(std::log(cpu::sum_exp(x, static_cast<size_t>(n), max)));
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
    const auto inv_sum = static_cast<float>(1.0 / cpu::sum_exp(x, static_cast<size_t>(n), max));
    cpu::mask_below(x, static_cast<size_t>(n), smallest_kept(max, inv_sum, min_p * inv_sum));
  }

  size_t apply_top_k_top_p(float* x, int64_t n, int64_t top_k, bool apply_top_p, float top_p,
                           SortScratch scratch) const override {
    if (top_k >= n) {
      top_p_without_sort(x, n, top_p, scratch);
      return kNotListed;
    }
    size_t candidates = 0;
    const float kth = kth_largest(x, n, top_k, scratch, &candidates);
    size_t kept = 0;  // the candidates >= kth, still in id order
    for (size_t i = 0; i < candidates; ++i)
      if (scratch.values[i] >= kth) {
        scratch.ids[kept] = scratch.ids[i];
        scratch.values[kept++] = scratch.values[i];
      }
    cpu::mask_below(x, static_cast<size_t>(n), kth);  // ties at the k-th value kept, spec §9.2
    if (apply_top_p) top_p_on_survivors(x, kept, top_p, scratch);
    return kept;
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

  void apply_penalties(float* x, std::span<const TokenCount> counts, float repetition_penalty,
                       float frequency_penalty, float presence_penalty) const override {
    reference_backend().apply_penalties(x, counts, repetition_penalty, frequency_penalty,
                                        presence_penalty);
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
    size_t candidates = 0;
    const float kth = kth_largest(x, n, k, scratch, &candidates);
    // Descending value, ascending id: the oracle's order, as one unsigned key; the candidates
    // below the k-th value sort after it.
    uint64_t* keys = scratch.keys.data();
    size_t count = 0;
    for (size_t i = 0; i < candidates; ++i)
      if (scratch.values[i] >= kth)
        keys[count++] =
            (uint64_t{~orderable(scratch.values[i])} << 32) | static_cast<uint32_t>(scratch.ids[i]);
    std::partial_sort(keys, keys + k, keys + count);
    for (int64_t i = 0; i < k; ++i) {
      ids[i] = static_cast<TokenId>(keys[i] & 0xffffffffu);
      values[i] = from_orderable(~static_cast<uint32_t>(keys[i] >> 32));
    }
  }

 private:
  // The oracle's walk restricted to a list of ids in id order (apply_top_k_top_p's survivors, or
  // the finite entries): x at the listed ids, where -inf entries (top-p's masks) add exact zeros,
  // so the same terms as the full walk and the same token. An empty or all -inf list gives 0.
  static TokenId draw_listed(const float* x, double u, SortScratch scratch, size_t listed) {
    float max = kNegInf;
    for (size_t i = 0; i < listed; ++i) max = std::max(max, x[scratch.ids[i]]);
    if (max == kNegInf) return 0;
    double total = 0;
    for (size_t i = 0; i < listed; ++i) total += std::exp(x[scratch.ids[i]] - max);
    const double target = u * total;
    double cumulative = 0;
    TokenId last_kept = 0;
    for (size_t i = 0; i < listed; ++i) {
      const float weight = std::exp(x[scratch.ids[i]] - max);
      if (weight == 0.0f) continue;
      cumulative += weight;
      last_kept = scratch.ids[i];
      if (cumulative > target) return last_kept;
    }
    return last_kept;
  }

  // The oracle's probability test, std::exp(v - max) * inv_sum < threshold (min_p's strict rule;
  // top-p's "probability 0" at p = 1), is monotone in v, so it masks the logits below a threshold.
  // The smallest kept float is found by bisection on the float order between -inf (masked
  // unless threshold is 0) and max (kept when threshold <= inv_sum), with the oracle's own
  // arithmetic: one mask_below pass then keeps exactly the oracle's set, with no Exp per token.
  static float smallest_kept(float max, float inv_sum, float threshold) {
    auto masked = [&](uint32_t key) {
      return std::exp(from_orderable(key) - max) * inv_sum < threshold;
    };
    uint32_t lo = orderable(kNegInf), hi = orderable(max);
    if (!masked(lo)) return kNegInf;
    while (hi - lo > 1) {
      const uint32_t mid = lo + (hi - lo) / 2;
      (masked(mid) ? lo : hi) = mid;
    }
    return from_orderable(hi);
  }

  // Rows of any length are cut into at most kMaxBlocks blocks of a fixed size (a multiple of
  // every lane count) that depends only on n: sums and draws never depend on threads.
  static constexpr size_t kMaxBlocks = 512;
  static size_t block_size(int64_t n) {
    const auto per_block = (static_cast<size_t>(n) + kMaxBlocks - 1) / kMaxBlocks;
    return std::max<size_t>(2048, (per_block + 63) / 64 * 64);
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
    size_t start = 0;
    for (size_t b = 0; start + block < size && cumulative + sums[b] <= target; ++b, start += block)
      cumulative += sums[b];
    float* w = scratch.values.data();
    TokenId last_kept = 0;
    for (; start < size; start += block) {
      const size_t end = std::min(size, start + block);
      double unused;
      cpu::exp_with_block_sums(x + start, w, end - start, max, block, &unused);
      for (size_t i = start; i < end; ++i) {
        if (w[i - start] == 0.0f) continue;
        cumulative += w[i - start];
        last_kept = static_cast<TokenId>(i);
        if (cumulative > target) return last_kept;
      }
    }
    return last_kept;  // rounding left u * total at the very end
  }

  // Spec §9.3 without a sort: the probability mass is histogrammed by the float bits of each
  // probability (64 buckets an octave); buckets whose whole mass keeps the ascending cumulative
  // sum <= 1 - p are masked, buckets above the crossing one kept, and only the crossing bucket's
  // tokens are sorted and walked with the oracle's rule. Probabilities use the vector exp, so a
  // token within float rounding of the cut may differ from the oracle (as vLLM's own kernels).
  static void top_p_without_sort(float* x, int64_t n, float top_p, SortScratch scratch) {
    const auto size = static_cast<size_t>(n);
    const TokenId top = static_cast<TokenId>(cpu::row_argmax(x, size));  // never masked
    const float max = x[top];
    if (max == kNegInf) return;
    if (top_p == 1.0f) return mask_underflowed(x, size, max);
    float* w = scratch.values.data();
    double sums[kMaxBlocks];
    const double total = cpu::exp_with_block_sums(x, w, size, max, block_size(n), sums);
    const auto inv_sum = static_cast<float>(1.0 / total);
    constexpr int kShift = 17;  // probabilities are in [0, 1]: keys below 0x3f800001 >> 17
    constexpr size_t kBuckets = (0x3f800000u >> kShift) + 1;
    // Two interleaved histograms, merged after: neighbouring tokens often share a bucket, and
    // one histogram would chain each add on the previous store.
    static_assert(2 * kBuckets == kHistogramSize);
    double* const mass = scratch.histogram.data();
    double* const odd = mass + kBuckets;
    std::fill(mass, mass + kBuckets, 0.0);
    std::fill(odd, odd + kBuckets, 0.0);
    size_t i = 0;
    for (; i + 2 <= size; i += 2) {
      const float q0 = w[i] * inv_sum, q1 = w[i + 1] * inv_sum;
      mass[std::bit_cast<uint32_t>(q0) >> kShift] += q0;
      odd[std::bit_cast<uint32_t>(q1) >> kShift] += q1;
    }
    if (i < size) mass[std::bit_cast<uint32_t>(w[i] * inv_sum) >> kShift] += w[i] * inv_sum;
    for (size_t b = 0; b < kBuckets; ++b) mass[b] += odd[b];
    const float cut = 1.0f - top_p;
    double cumulative = 0;
    size_t key = 0;
    for (; key + 1 < kBuckets; ++key) {
      if (static_cast<float>(cumulative + mass[key]) > cut) break;
      cumulative += mass[key];
    }
    // Zero probabilities come first in the ascending order with a sum of 0 <= cut: masked.
    const float lo = key == 0 ? std::numeric_limits<float>::denorm_min()
                              : std::bit_cast<float>(static_cast<uint32_t>(key << kShift));
    const float hi = std::bit_cast<float>(static_cast<uint32_t>((key + 1) << kShift));
    const size_t band =
        cpu::mask_and_compress_band(x, w, size, inv_sum, lo, hi, scratch.ids.data());
    // A p so small that 1 - p rounds to about 1 can put the cut above every bucket, the top
    // token's included (rounded masses sum to just under 1): the largest is never masked, §9.3.
    x[top] = max;
    uint64_t* keys = scratch.keys.data();
    for (size_t i = 0; i < band; ++i) {
      const int32_t id = scratch.ids[i];
      keys[i] = (uint64_t{orderable(x[id])} << 32) | (0xffffffffu - static_cast<uint32_t>(id));
    }
    std::sort(keys, keys + band);
    for (size_t i = 0; i < band; ++i) {
      const auto id =
          static_cast<TokenId>(0xffffffffu - static_cast<uint32_t>(keys[i] & 0xffffffffu));
      cumulative += w[id] * inv_sum;
      if (static_cast<float>(cumulative) <= cut && id != top) x[id] = kNegInf;
    }
  }

  // Spec §9.3 with p = 1: the cut is 0, so exactly the tokens whose float32 probability is 0
  // go. None can when every finite logit is within 80 of the max: exp(-80) / n stays above the
  // smallest denormal for any n < 2^31; the usual LLM row costs one min pass, no Exp.
  static void mask_underflowed(float* x, size_t n, float max) {
    constexpr float kNoUnderflowSpan = 80.0f;
    if (max - cpu::finite_min(x, n) < kNoUnderflowSpan) return;
    const auto inv_sum = static_cast<float>(1.0 / cpu::sum_exp(x, n, max));
    cpu::mask_below(x, n, smallest_kept(max, inv_sum, std::numeric_limits<float>::denorm_min()));
  }

  // Spec §9.3 on the top-k survivors, with the oracle's arithmetic in the oracle's order
  // (ascending value, larger id first among equals): the masked entries it also visits add
  // exact zeros, so every decision is the same.
  static void top_p_on_survivors(float* x, size_t kept, float top_p, SortScratch scratch) {
    uint64_t* keys = scratch.keys.data();
    for (size_t i = 0; i < kept; ++i)
      keys[i] = (uint64_t{orderable(scratch.values[i])} << 32) |
                (0xffffffffu - static_cast<uint32_t>(scratch.ids[i]));
    std::sort(keys, keys + kept);
    auto value = [&](size_t i) { return from_orderable(static_cast<uint32_t>(keys[i] >> 32)); };
    auto id = [&](size_t i) { return 0xffffffffu - static_cast<uint32_t>(keys[i] & 0xffffffffu); };
    const float max = value(kept - 1);
    if (max == kNegInf) return;
    double sum = 0;
    for (size_t i = 0; i < kept; ++i) sum += std::exp(value(i) - max);
    const auto inv_sum = static_cast<float>(1.0 / sum);
    const float cut = 1.0f - top_p;
    double cumulative = 0;
    for (size_t i = 0; i + 1 < kept; ++i) {
      cumulative += std::exp(value(i) - max) * inv_sum;
      if (static_cast<float>(cumulative) <= cut) x[id(i)] = kNegInf;
    }
  }
};

}  // namespace

const Backend& cpu_backend() {
  static const CpuBackend backend;  // stateless, immutable
  return backend;
}

}  // namespace lastmile::detail
