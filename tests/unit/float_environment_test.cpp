// The sampler computes in IEEE's default floating-point environment whatever the calling thread
// set (src/float_environment.hpp). With DAZ, FTZ and rounding up on the caller (as PyTorch's
// set_flush_denormal(True) or a -ffast-math library leaves x86 threads, plus a rounding mode; on
// AArch64 FZ, default NaNs and rounding up), rows of subnormal logits decided on the row (a top-k
// past the lists' room, then top-p) give the same tokens and the same processed logits, bit for
// bit, as in the default environment, on one thread and on two (whose worker was made under the
// caller's environment); a custom processor finds the default environment on every row; and the
// caller's environment is back when the call returns.
#include <gtest/gtest.h>

#include <atomic>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "lastmile/lastmile.hpp"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>
#define LASTMILE_TEST_ENVIRONMENT 1
#elif defined(__aarch64__) && (defined(__GNUC__) || defined(__clang__))
#define LASTMILE_TEST_ENVIRONMENT 1
#endif

namespace lastmile_test {
namespace {

#ifdef LASTMILE_TEST_ENVIRONMENT
#if defined(__aarch64__)
// FPCR: FZ (24), DN (25), RMode 01 (towards +inf, bits 23:22); it holds no status flags.
using Environment = uint64_t;
constexpr Environment kDefaultEnvironment = 0, kStatusFlags = 0;
constexpr Environment kFlushAndRoundUp =
    (Environment{1} << 24) | (Environment{1} << 25) | (Environment{1} << 22);
Environment get_environment() {
  Environment bits;
  __asm__ __volatile__("mrs %0, fpcr" : "=r"(bits));
  return bits;
}
void set_environment(Environment bits) { __asm__ __volatile__("msr fpcr, %0" : : "r"(bits)); }
#else
// MXCSR: DAZ (0x40), FTZ (0x8000), rounding towards +inf (0x4000); status flags in the low 6 bits.
using Environment = unsigned;
constexpr Environment kDefaultEnvironment = 0x1f80, kStatusFlags = 0x3f;
constexpr Environment kFlushAndRoundUp = kDefaultEnvironment | 0x8000 | 0x0040 | 0x4000;
Environment get_environment() { return _mm_getcsr(); }
void set_environment(Environment bits) { _mm_setcsr(bits); }
#endif

struct Outcome {
  std::vector<lastmile::TokenId> tokens;
  std::vector<float> processed;
  Environment after = 0;  // the calling thread's environment once the call returned
};

// Rows of 40000: a review's (odd ids positive subnormals, even ids small negatives), the same
// with -0 / +0 and negative subnormals, and N(0, 3) logits with a cluster of subnormals.
std::vector<float> subnormal_rows(int64_t rows, int64_t n) {
  std::mt19937_64 rng(61);
  std::vector<float> x(static_cast<size_t>(rows * n));
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t i = 0; i < n; ++i) {
      float& v = x[static_cast<size_t>(r * n + i)];
      const auto subnormal = std::bit_cast<float>(static_cast<uint32_t>(1 + rng() % 100000));
      switch (r % 3) {
        case 0:
          v = i % 2 ? subnormal : -std::uniform_real_distribution<float>(0.0f, 0.01f)(rng);
          break;
        case 1:
          v = i % 3 == 0 ? (rng() % 2 ? 0.0f : -0.0f) : (i % 3 == 1 ? -subnormal : subnormal);
          break;
        default:
          v = i % 4 ? std::normal_distribution<float>(0.0f, 3.0f)(rng) : subnormal;
      }
    }
  }
  return x;
}

Outcome sample_under(Environment environment, int threads, const std::vector<float>& x,
                     int64_t rows, int64_t n) {
  const Environment before = get_environment();
  set_environment(environment);
  lastmile::SamplerConfig config;
  config.vocab_size = n;
  config.max_batch = rows;
  config.threads = threads;
  config.logprobs_mode = lastmile::LogprobsMode::processed_logits;
  lastmile::Sampler sampler(config);  // its worker made under that environment
  lastmile::Batch batch;
  batch.num_logprobs = -1;
  for (int64_t r = 0; r < rows; ++r) {
    lastmile::BatchRequest& request = batch.requests.emplace_back();
    request.params.top_k = static_cast<int32_t>(n - 1);  // past the lists' room: on the row
    request.params.top_p = 0.5f;
    request.params.seed = static_cast<uint64_t>(r);
  }
  const lastmile::SamplerOutput& out =
      sampler.sample(lastmile::LogitsView::f32(x.data(), rows, n), batch);
  Outcome outcome{{out.sampled_token_ids.begin(), out.sampled_token_ids.end()},
                  {out.full_logprobs.begin(), out.full_logprobs.end()},
                  get_environment()};
  set_environment(before);
  return outcome;
}
#endif

TEST(FloatEnvironment, CallersDazFtzAndRoundingChangeNoResult) {
#ifndef LASTMILE_TEST_ENVIRONMENT
  GTEST_SKIP() << "the environment is set on x86 and AArch64 only";
#else
  constexpr int64_t kRows = 6, kN = 40000;
  const std::vector<float> x = subnormal_rows(kRows, kN);
  const Outcome expected = sample_under(kDefaultEnvironment, 1, x, kRows, kN);
  int masked = 0;
  for (const float v : expected.processed) masked += v == -std::numeric_limits<float>::infinity();
  EXPECT_GT(masked, kRows * kN / 4);  // top-p masked a good part of each row
  for (const int threads : {1, 2}) {
    const Outcome got = sample_under(kFlushAndRoundUp, threads, x, kRows, kN);
    EXPECT_EQ(got.tokens, expected.tokens) << threads << " threads";
    ASSERT_EQ(got.processed.size(), expected.processed.size());
    int differ = 0;
    for (size_t i = 0; i < got.processed.size(); ++i)
      differ += std::bit_cast<uint32_t>(got.processed[i]) !=
                std::bit_cast<uint32_t>(expected.processed[i]);
    EXPECT_EQ(differ, 0) << threads << " threads";
    EXPECT_EQ(got.after & ~kStatusFlags, kFlushAndRoundUp) << threads << " threads";
  }
#endif
}

#ifdef LASTMILE_TEST_ENVIRONMENT
// What a custom processor reads of its thread's environment inside a call (a worker's on two
// threads, each row one task), made and called under the caller's flushing environment.
struct EnvironmentProbe : lastmile::LogitsProcessor {
  mutable std::atomic<int> rows_seen{0};
  mutable std::atomic<bool> all_default{true};
  bool is_argmax_invariant() const override { return false; }
  void apply(const lastmile::ProcessorRow&, std::span<float>) const override {
    if ((get_environment() & ~kStatusFlags) != kDefaultEnvironment) all_default = false;
    ++rows_seen;
  }
};
#endif

TEST(FloatEnvironment, RowsAreComputedInTheDefaultEnvironment) {
#ifndef LASTMILE_TEST_ENVIRONMENT
  GTEST_SKIP() << "the environment is set on x86 and AArch64 only";
#else
  constexpr int64_t kRows = 8, kN = 64;
  const std::vector<float> x(static_cast<size_t>(kRows * kN), 0.0f);
  for (const int threads : {1, 2}) {
    const Environment before = get_environment();
    set_environment(kFlushAndRoundUp);
    auto probe = std::make_shared<EnvironmentProbe>();
    lastmile::SamplerConfig config;
    config.vocab_size = kN;
    config.max_batch = kRows;
    config.threads = threads;
    config.logits_processors.push_back(probe);
    lastmile::Sampler sampler(config);
    lastmile::Batch batch;
    for (int64_t r = 0; r < kRows; ++r) batch.requests.emplace_back().params.temperature = 1.0f;
    sampler.sample(lastmile::LogitsView::f32(x.data(), kRows, kN), batch);
    const Environment after = get_environment();
    set_environment(before);
    EXPECT_EQ(probe->rows_seen.load(), kRows) << threads << " threads";
    EXPECT_TRUE(probe->all_default.load()) << threads << " threads";
    EXPECT_EQ(after & ~kStatusFlags, kFlushAndRoundUp) << threads << " threads";
  }
#endif
}

}  // namespace
}  // namespace lastmile_test
