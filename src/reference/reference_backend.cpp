// lastmile — the scalar reference backend: the plainest code that meets each kernel's contract in
// backend.hpp, and the oracle every fast path is tested against. Float32 arithmetic follows
// torch's CPU kernels step for step wherever a rounding can change a token.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "backend.hpp"
#include "reference/float16.hpp"

namespace lastmile::detail {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kInf = std::numeric_limits<float>::infinity();

bool is_nan_or_pos_inf(float v) {
  return std::isnan(v) || v == std::numeric_limits<float>::infinity();
}

// Sum of exp(x - max) in double: exact enough that float32 rounding decides nothing.
double sum_exp(const float* x, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(x[i] - max);
  return sum;
}

// Entry i of a caller's row, widened to float32 (exact).
float widened(const void* src, DType dtype, int64_t i) {
  switch (dtype) {
    case DType::f16:
      return f16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::bf16:
      return bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
    case DType::f32:
      break;
  }
  return static_cast<const float*>(src)[i];
}

// The raw-mode pieces over a caller's row: log_softmax's terms, rank_of and top_n of the values.
RawValues input_log_softmax(const void* src, DType dtype, int64_t n) {
  float max = kNegInf;
  for (int64_t i = 0; i < n; ++i) max = std::max(max, widened(src, dtype, i));
  if (max == kNegInf) return {kNegInf, 0.0f};
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += std::exp(widened(src, dtype, i) - max);
  return {max, static_cast<float>(std::log(sum))};
}

int64_t input_rank_of(const void* src, DType dtype, int64_t n, RawValues values, TokenId token_id) {
  const float v = values(widened(src, dtype, token_id));
  int64_t count = 0;
  for (int64_t i = 0; i < n; ++i) count += values(widened(src, dtype, i)) >= v;
  return count;
}

void input_top_n(const void* src, DType dtype, int64_t n, RawValues values, int64_t k, TokenId* ids,
                 float* out, SortScratch scratch) {
  auto value = [&](int32_t i) { return values(widened(src, dtype, i)); };
  int32_t* order = scratch.ids.data();
  std::iota(order, order + n, 0);
  std::partial_sort(order, order + k, order + n, [&](int32_t a, int32_t b) {
    return value(a) > value(b) || (value(a) == value(b) && a < b);
  });
  for (int64_t i = 0; i < k; ++i) {
    ids[i] = order[i];
    out[i] = value(order[i]);
  }
}

class ReferenceBackend final : public Backend {
 public:
  std::string_view name() const override { return "reference"; }
  std::string_view description() const override { return "scalar C++"; }
  size_t list_room(int64_t n) const override { return static_cast<size_t>(n); }  // full sorts

  int64_t convert_row_divided(const void* src, DType dtype, float* dst, int64_t n,
                              float t) const override {
    convert_row(src, dtype, dst, n);
    return divide(dst, n, t);  // NaN / t and +inf / t stay NaN and +inf: divide sees them too
  }

  int64_t convert_row_repeated(const void* src, DType dtype, float* dst, int64_t n,
                               const uint64_t* seen, float repetition_penalty) const override {
    convert_row(src, dtype, dst, n);
    return apply_repetition_dense(dst, n, seen, repetition_penalty);  // finds the input's too
  }

  // No summary: input_raw_logprobs reads the row again.
  int64_t convert_row_summarised(const void* src, DType dtype, float* dst, int64_t n,
                                 const uint64_t* seen, float repetition_penalty,
                                 RawRowSummary* summary) const override {
    summary->known = false;
    return seen != nullptr ? convert_row_repeated(src, dtype, dst, n, seen, repetition_penalty)
                           : convert_row(src, dtype, dst, n);
  }

  bool summarise_row(const void*, DType, int64_t, RawRowSummary* summary,
                     const ParallelFor&) const override {
    summary->known = false;  // the oracle converts and runs every step
    return false;
  }

  bool block_maxima(const void*, DType, int64_t, BlockMaxima*, const ParallelFor&) const override {
    return false;  // as summarise_row
  }

  int64_t convert_row(const void* src, DType dtype, float* dst, int64_t n) const override {
    int64_t bad = -1;
    for (int64_t i = 0; i < n; ++i) {
      dst[i] = widened(src, dtype, i);
      if (bad < 0 && is_nan_or_pos_inf(dst[i])) bad = i;
    }
    return bad;
  }

  TokenId row_argmax(const float* x, int64_t n) const override {
    int64_t best = 0;
    for (int64_t i = 1; i < n; ++i)
      if (x[i] > x[best]) best = i;
    return static_cast<TokenId>(best);
  }

  TokenId argmax_checked(const float* x, int64_t n, int64_t* first_bad,
                         const ParallelFor&) const override {
    *first_bad = find_nan_or_inf(x, n);
    return *first_bad >= 0 ? 0 : row_argmax(x, n);
  }

  float row_max(const float* x, int64_t n) const override { return *std::max_element(x, x + n); }

  void log_softmax(float* x, int64_t n) const override {
    const float max = row_max(x, n);
    if (max == kNegInf) return;
    const float log_sum = static_cast<float>(std::log(sum_exp(x, n, max)));
    for (int64_t i = 0; i < n; ++i) x[i] = (x[i] - max) - log_sum;
  }

  int64_t divide(float* x, int64_t n, float t) const override {
    for (int64_t i = 0; i < n; ++i) x[i] /= t;
    return find_nan_or_inf(x, n);
  }

  int64_t find_nan_or_inf(const float* x, int64_t n) const override {
    for (int64_t i = 0; i < n; ++i)
      if (std::isnan(x[i]) || x[i] == kInf) return i;
    return -1;
  }

  void apply_min_p(float* x, int64_t n, float min_p) const override {
    const float max = row_max(x, n);
    if (max == kNegInf) return;
    // torch's softmax: exp(x - max) times the float32 reciprocal of the sum.
    const float inv_sum = static_cast<float>(1.0 / sum_exp(x, n, max));
    const float threshold = min_p * inv_sum;  // min_p * the largest probability, exp(0) * inv_sum
    for (int64_t i = 0; i < n; ++i)
      if (std::exp(x[i] - max) * inv_sum < threshold) x[i] = kNegInf;  // strict: ties survive
  }

  size_t apply_top_k_top_p(float* x, int64_t n, int64_t top_k, bool apply_top_p, float top_p,
                           SortScratch scratch) const override {
    int32_t* order = scratch.ids.data();
    std::iota(order, order + n, 0);
    // Ascending by value; among equal values the larger id first, so lower ids rank as larger.
    std::sort(order, order + n,
              [x](int32_t a, int32_t b) { return x[a] < x[b] || (x[a] == x[b] && a > b); });
    float* sorted = scratch.values.data();
    for (int64_t i = 0; i < n; ++i) sorted[i] = x[order[i]];
    if (top_k < n) {
      const float threshold = sorted[n - top_k];  // the k-th largest, duplicates counted
      for (int64_t i = 0; i < n; ++i)
        if (sorted[i] < threshold) sorted[i] = kNegInf;
    }
    if (apply_top_p) {
      const float max = sorted[n - 1];
      if (max != kNegInf) {
        const float inv_sum = static_cast<float>(1.0 / sum_exp(sorted, n, max));
        const float cut = 1.0f - top_p;  // float32 on purpose: vLLM's rounding decides the cut
        double cumulative = 0.0;         // torch's CPU cumsum: double accumulator, float32 result
        for (int64_t i = 0; i + 1 < n; ++i) {
          cumulative += std::exp(sorted[i] - max) * inv_sum;
          if (static_cast<float>(cumulative) <= cut) sorted[i] = kNegInf;
        }
      }
    }
    for (int64_t i = 0; i < n; ++i) x[order[i]] = sorted[i];
    return kNotListed;
  }

  // The oracle runs the steps.
  TokenId draw_from_input(const void*, DType, int64_t, const DrawParams&, double, SortScratch,
                          const ParallelFor&, RawRowSummary* summary) const override {
    if (summary != nullptr) summary->known = false;
    return kNoInputDraw;
  }

  TokenId draw_from_penalised_input(const PenalisedRow&, int64_t, const DrawParams&, double,
                                    SortScratch, RawRowSummary* summary,
                                    const ParallelFor&) const override {
    if (summary != nullptr) summary->known = false;
    return kNoInputDraw;
  }

  TokenId draw(const float* x, int64_t n, double u, SortScratch, size_t) const override {
    const float max = row_max(x, n);
    if (max == kNegInf) return 0;
    const double target = u * sum_exp(x, n, max);
    double cumulative = 0.0;
    int64_t last_kept = 0;
    for (int64_t i = 0; i < n; ++i) {
      const float weight = std::exp(x[i] - max);
      if (weight == 0.0f) continue;  // masked or underflowed: never drawn
      cumulative += weight;          // the same terms in the same order as the total
      last_kept = i;
      if (cumulative > target) return static_cast<TokenId>(i);
    }
    return static_cast<TokenId>(last_kept);  // u * total rounded up to total
  }

  void apply_penalties(float* x, std::span<const TokenCount> counts, float repetition_penalty,
                       float frequency_penalty, float presence_penalty) const override {
    // torch's fallback multiplies positive logits by the float32 reciprocal (spec §7.2).
    const float inverse_repetition = 1.0f / repetition_penalty;
    for (const TokenCount& c : counts) {
      float& l = x[c.token_id];
      if (c.in_prompt || c.output_count > 0) l *= l > 0 ? inverse_repetition : repetition_penalty;
      l -= frequency_penalty * static_cast<float>(c.output_count);
      l -= presence_penalty * (c.output_count > 0 ? 1.0f : 0.0f);
    }
  }

  int64_t apply_repetition_dense(float* x, int64_t n, const uint64_t* seen,
                                 float repetition_penalty) const override {
    const float inverse_repetition = 1.0f / repetition_penalty;
    for (int64_t i = 0; i < n; ++i)
      if (seen[i / 64] >> (i % 64) & 1) x[i] *= x[i] > 0 ? inverse_repetition : repetition_penalty;
    return find_nan_or_inf(x, n);
  }

  // What log_softmax, rank_of and top_n give on a snapshot of the row.
  RawLogprobs input_raw_logprobs(const void* src, DType dtype, int64_t n, bool log_softmax,
                                 TokenId token_id, int64_t k, TokenId* ids, float* out,
                                 SortScratch scratch, const RawRowSummary*,
                                 const ParallelFor&) const override {
    const RawValues values = log_softmax ? input_log_softmax(src, dtype, n) : RawValues{};
    if (k > 0) input_top_n(src, dtype, n, values, k, ids, out, scratch);
    return {values, input_rank_of(src, dtype, n, values, token_id)};
  }

  int64_t rank_of(const float* x, int64_t n, TokenId token_id) const override {
    const float v = x[token_id];
    return std::count_if(x, x + n, [v](float e) { return e >= v; });
  }

  void top_n(const float* x, int64_t n, int64_t k, TokenId* ids, float* values,
             SortScratch scratch) const override {
    int32_t* order = scratch.ids.data();
    std::iota(order, order + n, 0);
    std::partial_sort(order, order + k, order + n,
                      [x](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
    for (int64_t i = 0; i < k; ++i) {
      ids[i] = order[i];
      values[i] = x[order[i]];
    }
  }
};

}  // namespace

const Backend& reference_backend() {
  static const ReferenceBackend backend;  // stateless, immutable
  return backend;
}

}  // namespace lastmile::detail
