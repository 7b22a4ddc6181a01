// Step 2 — f16 and bf16 logits widen exactly to float32 (spec §2.1 step 2): hand-computed bit
// patterns (subnormals, ±0, ±inf, max finite), and f16 / bf16 input samples exactly as the
// equivalent f32 input.
#include <bit>

#include "backend.hpp"
#include "reference/float16.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

using lastmile::detail::bf16_to_f32;
using lastmile::detail::f16_to_f32;

// Independent decoders: sign * mantissa * 2^exponent in double (exact for both formats).
double f16_value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  if (exponent == 0x1f) return mantissa ? std::nan("") : (h & 0x8000) ? -HUGE_VAL : HUGE_VAL;
  double v = exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(mantissa + 1024, exponent - 25);
  return (h & 0x8000) ? -v : v;
}

double bf16_value(uint16_t b) {
  const int exponent = (b >> 7) & 0xff;
  const int mantissa = b & 0x7f;
  if (exponent == 0xff) return mantissa ? std::nan("") : (b & 0x8000) ? -HUGE_VAL : HUGE_VAL;
  double v =
      exponent == 0 ? std::ldexp(mantissa, -133) : std::ldexp(mantissa + 128, exponent - 134);
  return (b & 0x8000) ? -v : v;
}

TEST(Float16, NormalValues) {
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xbc00), -1.0f);
  EXPECT_EQ(f16_to_f32(0x4000), 2.0f);
  EXPECT_EQ(f16_to_f32(0x3555), 0.333251953125f);
  EXPECT_EQ(f16_to_f32(0x3bff), 0.99951171875f);
  EXPECT_EQ(f16_to_f32(0xc248), -3.140625f);
  EXPECT_EQ(f16_to_f32(0x0400), 6.103515625e-05f);  // smallest normal, 2^-14
}

TEST(Float16, MaxFinite) {
  EXPECT_EQ(f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(f16_to_f32(0xfbff), -65504.0f);
}

TEST(Float16, Subnormals) {
  EXPECT_EQ(f16_to_f32(0x0001), 5.9604644775390625e-08f);  // 2^-24
  EXPECT_EQ(f16_to_f32(0x8001), -5.9604644775390625e-08f);
  EXPECT_EQ(f16_to_f32(0x0002), 1.1920928955078125e-07f);     // 2^-23
  EXPECT_EQ(f16_to_f32(0x0200), 3.0517578125e-05f);           // 2^-15
  EXPECT_EQ(f16_to_f32(0x03ff), 6.0975551605224609375e-05f);  // 1023 * 2^-24, largest subnormal
  EXPECT_EQ(f16_to_f32(0x0155), 2.0325183868408203125e-05f);  // 341 * 2^-24
}

TEST(Float16, SignedZeros) {
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0x0000)), 0x00000000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(f16_to_f32(0x8000)), 0x80000000u);
}

TEST(Float16, InfinitiesAndNaN) {
  EXPECT_EQ(f16_to_f32(0x7c00), kInf);
  EXPECT_EQ(f16_to_f32(0xfc00), -kInf);
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7e00)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0x7c01)));
  EXPECT_TRUE(std::isnan(f16_to_f32(0xfe00)));
}

TEST(Float16, EveryPatternMatchesTheIndependentDecoder) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if (((h >> 10) & 0x1f) == 0x1f) continue;  // inf / NaN covered above
    const auto bits = static_cast<uint16_t>(h);
    ASSERT_EQ(static_cast<double>(f16_to_f32(bits)), f16_value(bits)) << std::hex << h;
    ASSERT_EQ(std::signbit(f16_to_f32(bits)), (h & 0x8000) != 0) << std::hex << h;
  }
}

// The tests' encoder: every finite pattern round-trips, and the float halfway between two
// neighbours (exact in float32) goes to the one with the even pattern, as a cast rounds.
TEST(Float16, TheTestsEncoderRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x7c00; ++h) {
    for (const uint32_t sign : {0u, 0x8000u}) {
      const auto bits = static_cast<uint16_t>(h | sign);
      ASSERT_EQ(f16_bits(f16_to_f32(bits)), bits) << std::hex << bits;
      const auto next = static_cast<uint16_t>(bits + 1);
      const float halfway = (f16_to_f32(bits) + f16_to_f32(next)) / 2;
      ASSERT_EQ(f16_bits(halfway), (h & 1) == 0 ? bits : next) << std::hex << bits;
    }
  }
  EXPECT_EQ(f16_bits(65519.0f), 0x7bff);
  EXPECT_EQ(f16_bits(-65520.0f), 0xfc00);
  EXPECT_EQ(f16_bits(1e-9f), 0x0000);
  EXPECT_EQ(f16_bits(1.0f / 3), 0x3555);
}

// The SIMD widening (F16C on x86) against the scalar decoder on every finite pattern, at an
// odd length so the padded tail runs too; then the first NaN / +inf is found wherever it sits.
TEST(Float16, CpuBackendWidensEveryPatternAsTheReference) {
  std::vector<uint16_t> bits;
  for (uint32_t h = 0; h < 0x10000; ++h)
    if ((h & 0x7c00) != 0x7c00) bits.push_back(static_cast<uint16_t>(h));
  bits.push_back(0x3c00);  // odd length
  std::vector<float> out(bits.size());
  const auto n = static_cast<int64_t>(bits.size());
  ASSERT_EQ(
      lastmile::detail::cpu_backend().convert_row(bits.data(), lastmile::DType::f16, out.data(), n),
      -1);
  for (size_t i = 0; i < bits.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(out[i]), std::bit_cast<uint32_t>(f16_to_f32(bits[i])))
        << std::hex << bits[i];
  for (int64_t at : {int64_t{5}, n - 1}) {
    std::vector<uint16_t> bad = bits;
    bad[static_cast<size_t>(at)] = at == 5 ? 0x7c00 : 0x7e00;  // +inf, NaN
    EXPECT_EQ(lastmile::detail::cpu_backend().convert_row(bad.data(), lastmile::DType::f16,
                                                          out.data(), n),
              at);
  }
}

TEST(BFloat16, HandComputedValues) {
  EXPECT_EQ(bf16_to_f32(0x3f80), 1.0f);
  EXPECT_EQ(bf16_to_f32(0xc049), -3.140625f);
  EXPECT_EQ(bf16_to_f32(0x7f7f), 3.38953139e38f);  // (2 - 2^-7) * 2^127, max finite
  EXPECT_EQ(bf16_to_f32(0xff7f), -3.38953139e38f);
  EXPECT_EQ(bf16_to_f32(0x0080), std::ldexp(1.0f, -126));    // smallest normal
  EXPECT_EQ(bf16_to_f32(0x0001), std::ldexp(1.0f, -133));    // smallest subnormal
  EXPECT_EQ(bf16_to_f32(0x007f), std::ldexp(127.0f, -133));  // largest subnormal
  EXPECT_EQ(bf16_to_f32(0x7f80), kInf);
  EXPECT_EQ(bf16_to_f32(0xff80), -kInf);
  EXPECT_TRUE(std::isnan(bf16_to_f32(0x7fc0)));
  EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(0x8000)), 0x80000000u);
  EXPECT_EQ(std::bit_cast<uint32_t>(bf16_to_f32(0x0000)), 0x00000000u);
}

TEST(BFloat16, EveryPatternMatchesTheIndependentDecoder) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    if (((b >> 7) & 0xff) == 0xff) continue;
    const auto bits = static_cast<uint16_t>(b);
    ASSERT_EQ(static_cast<double>(bf16_to_f32(bits)), bf16_value(bits)) << std::hex << b;
  }
}

// Random finite 16-bit patterns in a sane logit range (|x| <= 16) plus special values.
std::vector<uint16_t> f16_patterns(size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t s = seed;
  for (uint16_t& h : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const auto r = static_cast<uint16_t>(s >> 48);
    h = static_cast<uint16_t>((r & 0x8000) | (r % 0x4c00));  // exponent <= 18: |x| < 16
  }
  out[0] = 0x0001;  // subnormal
  out[1] = 0x8000;  // -0
  out[2] = 0xfc00;  // -inf
  out[3] = 0x4b00;  // 14.0
  return out;
}

std::vector<uint16_t> bf16_patterns(size_t n, uint64_t seed) {
  std::vector<uint16_t> out(n);
  uint64_t s = seed;
  for (uint16_t& b : out) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    const auto r = static_cast<uint16_t>(s >> 48);
    b = static_cast<uint16_t>((r & 0x8000) | (r % 0x4180));  // exponent <= 130: |x| < 16
  }
  out[0] = 0x0001;
  out[1] = 0x8000;
  out[2] = 0xff80;
  out[3] = 0x4160;  // 14.0
  return out;
}

std::vector<Row> mixed_rows(int n) {
  std::vector<Row> rows;
  for (int i = 0; i < n; ++i) {
    Row r = row_with(i % 3 == 0 ? greedy_params() : random_params(100 + i, 0.8f));
    r.params.top_k = i % 2 ? 20 : 0;
    r.params.top_p = i % 3 == 2 ? 0.9f : 1.0f;
    r.params.min_p = i % 4 == 1 ? 0.05f : 0.0f;
    r.output = {1, 2, 3};
    r.params.frequency_penalty = 0.5f;
    rows.push_back(r);
  }
  return rows;
}

void expect_same_as_f32(lastmile::DType dtype, const std::vector<uint16_t>& bits, int64_t vocab,
                        int64_t num_rows, LogprobsMode mode) {
  std::vector<float> widened(bits.size());
  for (size_t i = 0; i < bits.size(); ++i)
    widened[i] = static_cast<float>(dtype == lastmile::DType::f16 ? f16_value(bits[i])
                                                                  : bf16_value(bits[i]));
  const std::vector<Row> rows = mixed_rows(static_cast<int>(num_rows));
  const Batch batch = make_batch(rows, -1);
  Sampler a(make_config(vocab, num_rows, mode, 2));
  Sampler b(make_config(vocab, num_rows, mode, 2));
  const LogitsView half = dtype == lastmile::DType::f16
                              ? LogitsView::f16(bits.data(), num_rows, vocab)
                              : LogitsView::bf16(bits.data(), num_rows, vocab);
  const SamplerOutput& out16 = a.sample(half, batch);
  const SamplerOutput& out32 = b.sample(LogitsView::f32(widened.data(), num_rows, vocab), batch);
  EXPECT_EQ(std::vector<TokenId>(out16.sampled_token_ids.begin(), out16.sampled_token_ids.end()),
            std::vector<TokenId>(out32.sampled_token_ids.begin(), out32.sampled_token_ids.end()));
  ASSERT_EQ(out16.full_logprobs.size(), out32.full_logprobs.size());
  for (size_t i = 0; i < out16.full_logprobs.size(); ++i) {
    ASSERT_EQ(std::bit_cast<uint32_t>(out16.full_logprobs[i]),
              std::bit_cast<uint32_t>(out32.full_logprobs[i]))
        << "entry " << i;
  }
  if (mode == LogprobsMode::raw_logits) {
    for (size_t i = 0; i < widened.size(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(out16.full_logprobs[i]),
                std::bit_cast<uint32_t>(widened[i]))
          << i;
  }
}

TEST(Float16, SamplesExactlyAsTheEquivalentFloat32Input) {
  for (LogprobsMode mode :
       {LogprobsMode::raw_logits, LogprobsMode::raw_logprobs, LogprobsMode::processed_logprobs})
    expect_same_as_f32(lastmile::DType::f16, f16_patterns(12 * 111, 1), 111, 12, mode);
}

TEST(BFloat16, SamplesExactlyAsTheEquivalentFloat32Input) {
  for (LogprobsMode mode :
       {LogprobsMode::raw_logits, LogprobsMode::raw_logprobs, LogprobsMode::processed_logprobs})
    expect_same_as_f32(lastmile::DType::bf16, bf16_patterns(12 * 111, 2), 111, 12, mode);
}

TEST(Float16, StridedRowsAreReadFromTheirStride) {
  // Two rows of vocab 3 with stride 5; the padding holds NaN patterns that must never be read.
  const std::vector<uint16_t> bits = {0x3c00, 0x4000, 0x3800, 0x7e00, 0x7e00,
                                      0x4200, 0x3c00, 0xbc00, 0x7e00, 0x7e00};
  LogitsView view = LogitsView::f16(bits.data(), 2, 3);
  view.row_stride = 5;
  Sampler sampler(make_config(3, 2, LogprobsMode::raw_logits));
  const std::vector<Row> rows = {row_with(greedy_params()), row_with(greedy_params())};
  const SamplerOutput& out = sampler.sample(view, make_batch(rows, -1));
  EXPECT_EQ(std::vector<TokenId>(out.sampled_token_ids.begin(), out.sampled_token_ids.end()),
            (std::vector<TokenId>{1, 0}));
  EXPECT_EQ(std::vector<float>(out.full_logprobs.begin(), out.full_logprobs.end()),
            (std::vector<float>{1.0f, 2.0f, 0.5f, 3.0f, 1.0f, -1.0f}));
}

TEST(BFloat16, NaNAndPositiveInfinityAreReportedByRow) {
  std::vector<uint16_t> bits(2 * 8, 0x3f80);
  bits[8 + 6] = 0x7fc1;  // NaN in row 1 at token 6
  Sampler sampler(make_config(8, 2));
  const std::vector<Row> rows = {row_with(greedy_params()), row_with(greedy_params())};
  try {
    sampler.sample(LogitsView::bf16(bits.data(), 2, 8), make_batch(rows));
    FAIL() << "expected InvalidArgument";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "row 1: logits contain NaN at token_id 6");
    EXPECT_EQ(e.code(), lastmile::ErrorCode::invalid_logits);
  }
  bits[8 + 6] = 0x3f80;
  bits[2] = 0x7f80;  // +inf in row 0 at token 2
  try {
    sampler.sample(LogitsView::bf16(bits.data(), 2, 8), make_batch(rows));
    FAIL() << "expected InvalidArgument";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "row 0: logits contain +inf at token_id 2");
  }
}

TEST(Float16, NaNAndPositiveInfinityAreReportedByRow) {
  std::vector<uint16_t> bits(8, 0x3c00);
  bits[5] = 0x7c00;  // +inf
  bits[6] = 0x7e00;  // NaN after it: the first bad token is reported
  Sampler sampler(make_config(8, 1));
  const std::vector<Row> rows = {row_with(greedy_params())};
  try {
    sampler.sample(LogitsView::f16(bits.data(), 1, 8), make_batch(rows));
    FAIL() << "expected InvalidArgument";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "row 0: logits contain +inf at token_id 5");
  }
  bits[5] = 0xfc00;  // -inf is a valid logit; the NaN at 6 remains
  try {
    sampler.sample(LogitsView::f16(bits.data(), 1, 8), make_batch(rows));
    FAIL() << "expected InvalidArgument";
  } catch (const lastmile::InvalidArgument& e) {
    EXPECT_STREQ(e.what(), "row 0: logits contain NaN at token_id 6");
  }
}

}  // namespace
}  // namespace lastmile_test
