// lastmile tests — small shared helpers: rows with owned histories, a one-call runner, and the
// independent double-precision arithmetic the tests compare against. Header-only.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "lastmile/lastmile.hpp"

namespace lastmile_test {

using lastmile::Batch;
using lastmile::BatchRequest;
using lastmile::LogitsView;
using lastmile::LogprobsMode;
using lastmile::RequestParams;
using lastmile::Sampler;
using lastmile::SamplerConfig;
using lastmile::SamplerOutput;
using lastmile::TokenId;

inline constexpr float kInf = std::numeric_limits<float>::infinity();

// One logits row's request with the histories it points at (BatchRequest only holds spans).
struct Row {
  RequestParams params;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;
  std::vector<TokenId> spec;
  std::optional<uint64_t> step;
};

// a * b rounded to float32 on its own, as torch rounds each product: a volatile store, which no
// compiler fuses with what follows into an FMA, whatever -ffp-contract says.
inline float rounded_product(float a, float b) {
  volatile float product = a * b;
  return product;
}

inline RequestParams greedy_params() {
  RequestParams p;
  p.temperature = 0.0f;
  return p;
}

inline RequestParams random_params(uint64_t seed, float temperature = 1.0f) {
  RequestParams p;
  p.temperature = temperature;
  p.seed = seed;
  return p;
}

inline Row row_with(const RequestParams& params) {
  Row r;
  r.params = params;
  return r;
}

// Builds a Batch whose spans view `rows` (which must outlive the batch).
inline Batch make_batch(const std::vector<Row>& rows,
                        std::optional<int32_t> num_logprobs = std::nullopt,
                        bool predict_bonus_token = false) {
  Batch batch;
  for (const Row& r : rows) {
    BatchRequest& b = batch.requests.emplace_back();
    b.params = r.params;
    b.prompt_token_ids = r.prompt;
    b.output_token_ids = r.output;
    b.spec_token_ids = r.spec;
    b.step = r.step;
  }
  batch.num_logprobs = num_logprobs;
  batch.predict_bonus_token = predict_bonus_token;
  return batch;
}

inline SamplerConfig make_config(int64_t vocab_size, int64_t max_batch,
                                 LogprobsMode mode = LogprobsMode::raw_logprobs, int threads = 1) {
  SamplerConfig config;
  config.vocab_size = vocab_size;
  config.max_batch = max_batch;
  config.logprobs_mode = mode;
  config.threads = threads;
  return config;
}

// One call's output on `backend`: the full [rows, vocab] matrix of `mode` (num_logprobs = -1,
// or none when mode is unset) and the sampled tokens, for row-major f32 logits.
struct CallResult {
  std::vector<float> matrix;
  std::vector<TokenId> tokens;
};
inline CallResult call_on(lastmile::BackendKind backend, int64_t vocab_size,
                          const std::vector<float>& logits, const std::vector<Row>& rows,
                          std::optional<LogprobsMode> mode, bool predict_bonus_token) {
  const auto num_rows = static_cast<int64_t>(rows.size());
  SamplerConfig config =
      make_config(vocab_size, num_rows, mode.value_or(LogprobsMode::raw_logprobs));
  config.backend = backend;
  Sampler sampler(config);
  const Batch batch =
      make_batch(rows, mode ? std::optional<int32_t>(-1) : std::nullopt, predict_bonus_token);
  const SamplerOutput& out =
      sampler.sample(LogitsView::f32(logits.data(), num_rows, vocab_size), batch);
  return {{out.full_logprobs.begin(), out.full_logprobs.end()},
          {out.sampled_token_ids.begin(), out.sampled_token_ids.end()}};
}

// The call on the cpu backend, after checking that the reference backend (the oracle the
// property tests judge cpu by) gives the same: the spec's examples then hold the oracle too.
// Logits modes agree to the bit, logprobs within 1e-5 (README "Backends"), tokens exactly.
inline CallResult call_on_both(int64_t vocab_size, const std::vector<float>& logits,
                               const std::vector<Row>& rows, std::optional<LogprobsMode> mode,
                               bool predict_bonus_token) {
  CallResult cpu =
      call_on(lastmile::BackendKind::cpu, vocab_size, logits, rows, mode, predict_bonus_token);
  const CallResult oracle = call_on(lastmile::BackendKind::reference, vocab_size, logits, rows,
                                    mode, predict_bonus_token);
  EXPECT_EQ(cpu.tokens, oracle.tokens) << "sampled tokens: cpu vs reference";
  const bool values_are_logits =
      mode == LogprobsMode::raw_logits || mode == LogprobsMode::processed_logits;
  EXPECT_EQ(cpu.matrix.size(), oracle.matrix.size());
  for (size_t i = 0; i < std::min(cpu.matrix.size(), oracle.matrix.size()); ++i) {
    const float c = cpu.matrix[i], o = oracle.matrix[i];
    if (values_are_logits || std::isinf(c) || std::isinf(o))
      EXPECT_EQ(std::bit_cast<uint32_t>(c), std::bit_cast<uint32_t>(o))
          << "entry " << i << ": cpu " << c << ", reference " << o;
    else
      EXPECT_NEAR(c, o, 1e-5) << "entry " << i;
  }
  return cpu;
}

// The full [rows, vocab] matrix of `mode` (num_logprobs = -1) for row-major f32 logits, the same
// on both backends.
inline std::vector<float> full_matrix(int64_t vocab_size, const std::vector<float>& logits,
                                      const std::vector<Row>& rows, LogprobsMode mode,
                                      bool predict_bonus_token = false) {
  return call_on_both(vocab_size, logits, rows, mode, predict_bonus_token).matrix;
}

// The processed_logits row of a one-row batch, the same on both backends.
inline std::vector<float> processed_logits(const std::vector<float>& logits, const Row& row,
                                           bool predict_bonus_token = false) {
  return full_matrix(static_cast<int64_t>(logits.size()), logits, {row},
                     LogprobsMode::processed_logits, predict_bonus_token);
}

// Sampled tokens of one call, the same on both backends.
inline std::vector<TokenId> sample_tokens(int64_t vocab_size, const std::vector<float>& logits,
                                          const std::vector<Row>& rows,
                                          bool predict_bonus_token = false) {
  return call_on_both(vocab_size, logits, rows, std::nullopt, predict_bonus_token).tokens;
}

inline std::vector<float> slice(std::span<const float> values, int64_t row, int64_t width) {
  return {values.begin() + row * width, values.begin() + (row + 1) * width};
}

// log_softmax in double; -inf entries stay -inf, an all -inf row stays all -inf.
inline std::vector<double> log_softmax_double(std::span<const float> x) {
  double max = -std::numeric_limits<double>::infinity();
  for (float v : x) max = std::max(max, static_cast<double>(v));
  std::vector<double> out(x.size(), -std::numeric_limits<double>::infinity());
  if (std::isinf(max)) return out;
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - max);
  const double log_sum = std::log(sum);
  for (size_t i = 0; i < x.size(); ++i) out[i] = (static_cast<double>(x[i]) - max) - log_sum;
  return out;
}

inline std::vector<double> softmax_double(std::span<const double> x) {
  double max = -std::numeric_limits<double>::infinity();
  for (double v : x) max = std::max(max, v);
  std::vector<double> out(x.size(), 0.0);
  double sum = 0;
  for (size_t i = 0; i < x.size(); ++i) sum += out[i] = std::exp(x[i] - max);
  for (double& v : out) v /= sum;
  return out;
}

// Expects actual ≈ expected elementwise: equal infinities, else |a - e| <= tolerance.
inline void expect_near_row(std::span<const float> actual, const std::vector<double>& expected,
                            double tolerance) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    if (std::isinf(expected[i])) {
      EXPECT_EQ(static_cast<double>(actual[i]), expected[i]) << "at token " << i;
    } else {
      EXPECT_NEAR(actual[i], expected[i], tolerance) << "at token " << i;
    }
  }
}

// A float32 logit x with std::exp(x) == ratio exactly (ratio in (0, 1]), so that softmax ratios to
// a max logit of 0 are exactly the given floats (the tests' way to get exact probabilities).
inline float exact_log(float ratio) {
  float x = static_cast<float>(std::log(static_cast<double>(ratio)));
  for (int i = 0; i < 8 && std::exp(x) != ratio; ++i)
    x = std::nextafter(x, std::exp(x) < ratio ? 1.0f : -1.0f);
  EXPECT_EQ(std::exp(x), ratio) << "test construction: no exact log for " << ratio;
  return x;
}

// float32 to float16 bits, rounded to nearest even as a cast rounds; the tests' own, since
// clang 14 has no _Float16 on x86. Beyond f16's range gives ±inf, NaN a quiet NaN.
inline uint16_t f16_bits(float f) {
  const auto sign = static_cast<uint16_t>(std::bit_cast<uint32_t>(f) >> 16 & 0x8000u);
  const float a = std::fabs(f);
  if (std::isnan(f)) return sign | 0x7e00u;
  if (a >= 65520.0f) return sign | 0x7c00u;  // halfway past 65504 and beyond round to inf
  if (a < 0x1p-14f)  // subnormal or zero: a count of 2^-24, the scaling exact
    return sign | static_cast<uint16_t>(std::nearbyint(a * 0x1p24f));
  const uint32_t bits = std::bit_cast<uint32_t>(a);
  uint32_t half = (bits >> 13) - (uint32_t{127 - 15} << 10);  // rebiased exponent, 10-bit mantissa
  const uint32_t rest = bits & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (half & 1u) != 0)) ++half;  // a carry is right too
  return sign | static_cast<uint16_t>(half);
}

// Deterministic pseudo-random logits in [lo, hi) (a 64-bit LCG: no library dependency).
inline std::vector<float> lcg_logits(size_t n, uint64_t seed, float lo = -4.0f, float hi = 4.0f) {
  std::vector<float> out(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (float& v : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const double u = static_cast<double>(s >> 11) * 0x1.0p-53;
    v = static_cast<float>(lo + (hi - lo) * u);
  }
  return out;
}

}  // namespace lastmile_test
