// lastmile bench — the full-sort baseline (see the header).
#include "full_sort_baseline.hpp"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>

#include "reference/float16.hpp"

namespace lastmile::bench {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void load_row(const LogitsView& logits, int64_t row, float* out) {
  const int64_t stride = logits.row_stride ? logits.row_stride : logits.vocab_size;
  for (int64_t v = 0; v < logits.vocab_size; ++v) {
    const int64_t at = row * stride + v;
    switch (logits.dtype) {
      case DType::f32:
        out[v] = static_cast<const float*>(logits.data)[at];
        break;
      case DType::f16:
        out[v] = detail::f16_to_f32(static_cast<const uint16_t*>(logits.data)[at]);
        break;
      case DType::bf16:
        out[v] = detail::bf16_to_f32(static_cast<const uint16_t*>(logits.data)[at]);
        break;
    }
  }
}

// vLLM's apply_penalties: dense [V] bincounts of prompt and output, then three dense passes.
void penalties(const BatchRequest& request, BaselineScratch& s, int64_t vocab) {
  const RequestParams& p = request.params;
  if (p.repetition_penalty == 1.0f && p.frequency_penalty == 0.0f && p.presence_penalty == 0.0f)
    return;
  std::fill(s.counts.begin(), s.counts.end(), 0);
  std::fill(s.in_prompt.begin(), s.in_prompt.end(), uint8_t{0});
  for (TokenId t : request.prompt_token_ids) s.in_prompt[t] = 1;
  for (TokenId t : request.output_token_ids) ++s.counts[t];
  for (int64_t v = 0; v < vocab; ++v) {
    float& l = s.row[v];
    if (s.in_prompt[v] || s.counts[v])
      l *= l > 0 ? 1.0f / p.repetition_penalty : p.repetition_penalty;
    l -= p.frequency_penalty * static_cast<float>(s.counts[v]);
    l -= p.presence_penalty * (s.counts[v] > 0 ? 1.0f : 0.0f);
  }
}

void softmax(const float* x, float* probs, int64_t n) {
  const float max = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += probs[i] = std::exp(x[i] - max);
  const float inv = static_cast<float>(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) probs[i] *= inv;
}

// apply_top_k_top_p_pytorch: sort ascending, mask below the k-th, cumulative softmax <= 1 - p.
void top_k_top_p(BaselineScratch& s, int64_t n, int64_t k, float p) {
  std::iota(s.order.begin(), s.order.end(), 0);
  std::sort(s.order.begin(), s.order.end(),
            [&](int32_t a, int32_t b) { return s.row[a] < s.row[b]; });
  for (int64_t i = 0; i < n; ++i) s.sorted[i] = s.row[s.order[i]];
  if (k < n) {
    const float threshold = s.sorted[n - k];
    for (int64_t i = 0; i < n; ++i)
      if (s.sorted[i] < threshold) s.sorted[i] = kNegInf;
  }
  if (p < 1.0f) {
    std::vector<float>& probs = s.row;  // free until the scatter below
    softmax(s.sorted.data(), probs.data(), n);
    double cumulative = 0;
    for (int64_t i = 0; i + 1 < n; ++i) {
      cumulative += probs[i];
      if (static_cast<float>(cumulative) <= 1.0f - p) s.sorted[i] = kNegInf;
    }
  }
  for (int64_t i = 0; i < n; ++i) s.row[s.order[i]] = s.sorted[i];
}

}  // namespace

int32_t baseline_sample_row(const LogitsView& logits, int64_t row, const BatchRequest& request,
                            int num_logprobs, uint64_t seed, BaselineScratch& s) {
  const int64_t n = logits.vocab_size;
  for (auto* v : {&s.row, &s.sorted}) v->resize(n);
  s.order.resize(n);
  s.counts.resize(n);
  s.in_prompt.resize(n);
  s.noise.resize(n);
  load_row(logits, row, s.row.data());
  penalties(request, s, n);
  const RequestParams& p = request.params;
  int32_t token =
      static_cast<int32_t>(std::max_element(s.row.begin(), s.row.end()) - s.row.begin());
  if (!p.is_greedy()) {
    for (float& l : s.row) l /= p.temperature;
    if (p.min_p > 0) {
      softmax(s.row.data(), s.sorted.data(), n);
      const float threshold = p.min_p * *std::max_element(s.sorted.begin(), s.sorted.end());
      for (int64_t v = 0; v < n; ++v)
        if (s.sorted[v] < threshold) s.row[v] = kNegInf;
    }
    const int64_t k = p.top_k > 0 && p.top_k < n ? p.top_k : n;
    if (k < n || p.top_p < 1.0f) top_k_top_p(s, n, k, p.top_p);
    softmax(s.row.data(), s.sorted.data(), n);  // probs
    std::mt19937_64 rng(seed);
    std::exponential_distribution<double> exp1(1.0);
    double best = -1;
    for (int64_t v = 0; v < n; ++v) {  // exponential race over every token, as vLLM
      const double score = s.sorted[v] / exp1(rng);
      if (score > best) {
        best = score;
        token = static_cast<int32_t>(v);
      }
    }
  }
  if (num_logprobs >= 0) {  // raw_logprobs: log_softmax of the input row, top-N, rank
    load_row(logits, row, s.row.data());
    const float max = *std::max_element(s.row.begin(), s.row.end());
    double sum = 0;
    for (float l : s.row) sum += std::exp(l - max);
    const float log_sum = static_cast<float>(std::log(sum));
    for (float& l : s.row) l = (l - max) - log_sum;
    std::iota(s.order.begin(), s.order.end(), 0);
    std::partial_sort(s.order.begin(), s.order.begin() + num_logprobs, s.order.end(),
                      [&](int32_t a, int32_t b) { return s.row[a] > s.row[b]; });
    const float chosen = s.row[token];
    volatile int64_t rank =
        std::count_if(s.row.begin(), s.row.end(), [&](float l) { return l >= chosen; });
    (void)rank;
  }
  return token;
}

}  // namespace lastmile::bench
