// The sampler computes in IEEE's default floating-point environment whatever the calling thread
// set (src/float_environment.hpp): with DAZ, FTZ and rounding up on the caller (as PyTorch's
// set_flush_denormal(True) or a -ffast-math library leaves x86 threads, plus a rounding mode),
// rows of subnormal logits decided on the row (a top-k past the lists' room, then top-p) give the
// same tokens and the same processed logits, bit for bit, as in the default environment, on one
// thread and on two (whose worker was made under the caller's environment), and the caller's
// environment is back when the call returns.
#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "lastmile/lastmile.hpp"

#if defined(__x86_64__) || defined(_M_X64) || defined(__i386__) || defined(_M_IX86)
#include <xmmintrin.h>
#define LASTMILE_TEST_MXCSR 1
#endif

namespace lastmile_test {
namespace {

#ifdef LASTMILE_TEST_MXCSR
constexpr unsigned kDefaultCsr = 0x1f80;
constexpr unsigned kDazFtzRoundUp = kDefaultCsr | 0x8000 | 0x0040 | 0x4000;

struct Outcome {
  std::vector<lastmile::TokenId> tokens;
  std::vector<float> processed;
  unsigned csr_after = 0;  // the calling thread's environment once the call returned
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

Outcome sample_under(unsigned csr, int threads, const std::vector<float>& x, int64_t rows,
                     int64_t n) {
  const unsigned before = _mm_getcsr();
  _mm_setcsr(csr);
  lastmile::SamplerConfig config;
  config.vocab_size = n;
  config.max_batch = rows;
  config.threads = threads;
  config.logprobs_mode = lastmile::LogprobsMode::processed_logits;
  lastmile::Sampler sampler(config);  // its worker made under csr
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
                  _mm_getcsr()};
  _mm_setcsr(before);
  return outcome;
}
#endif

TEST(FloatEnvironment, CallersDazFtzAndRoundingChangeNoResult) {
#ifndef LASTMILE_TEST_MXCSR
  GTEST_SKIP() << "the environment is set on x86 only";
#else
  constexpr int64_t kRows = 6, kN = 40000;
  const std::vector<float> x = subnormal_rows(kRows, kN);
  const Outcome expected = sample_under(kDefaultCsr, 1, x, kRows, kN);
  int masked = 0;
  for (const float v : expected.processed) masked += v == -std::numeric_limits<float>::infinity();
  EXPECT_GT(masked, kRows * kN / 4);  // top-p masked a good part of each row
  for (const int threads : {1, 2}) {
    const Outcome got = sample_under(kDazFtzRoundUp, threads, x, kRows, kN);
    EXPECT_EQ(got.tokens, expected.tokens) << threads << " threads";
    ASSERT_EQ(got.processed.size(), expected.processed.size());
    int differ = 0;
    for (size_t i = 0; i < got.processed.size(); ++i)
      differ += std::bit_cast<uint32_t>(got.processed[i]) !=
                std::bit_cast<uint32_t>(expected.processed[i]);
    EXPECT_EQ(differ, 0) << threads << " threads";
    EXPECT_EQ(got.csr_after & ~0x3fu, kDazFtzRoundUp) << threads << " threads";
  }
#endif
}

}  // namespace
}  // namespace lastmile_test
