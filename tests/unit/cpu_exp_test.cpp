// The CPU backend's vector exp (cpu/exp-inl.hpp ExpFlushToZero), read through
// cpu::exp_with_block_sums with max 0: within 4.1e-7 of exp relative (5.5 ULP; 2.74 ULP above
// -20), exact at 0, monotone, and 0 below its flush point. Every float in [-86.9, 0] was checked
// once offline for both ways it is computed (1.1e9 values; the polynomial: worst 4.017e-7, 5.007
// ULP at -86.245, 2.7305 ULP above -20; AVX-512's table: 3.513e-7, 5.48 ULP at -86.68, 2.32 ULP
// above -20); here a dense sweep of 2^21 evenly spaced float patterns keeps it honest. On
// targets with FMA its bits are those of one scalar transcription: the table's on AVX-512, the
// polynomial's on the others (every negative float was checked once offline, on AVX3).
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <string_view>
#include <vector>

#include "cpu/kernels.hpp"

namespace lastmile_test {
namespace {

constexpr float kFlushBelow = -86.9f;

std::vector<float> exp_of(const std::vector<float>& x) {
  std::vector<float> w(x.size());
  double sum = 0;
  lastmile::cpu::exp_with_block_sums(x.data(), w.data(), x.size(), 0.0f, x.size() + 64, &sum);
  return w;
}

// Every 512th float pattern from -0 down to -86.9, descending inputs.
std::vector<float> sweep() {
  std::vector<float> x;
  for (uint32_t bits = 0x80000000u; bits <= std::bit_cast<uint32_t>(kFlushBelow); bits += 512)
    x.push_back(std::bit_cast<float>(bits));
  return x;
}

TEST(CpuExp, IsWithinItsErrorBoundOfExp) {
  const std::vector<float> x = sweep();
  const std::vector<float> w = exp_of(x);
  double worst_ulp = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double exact = std::exp(static_cast<double>(x[i]));
    const auto rounded = static_cast<float>(exact);
    const double ulp = std::nextafter(rounded, 2.0f) - rounded;
    const double error = std::abs(w[i] - exact);
    worst_ulp = std::max(worst_ulp, error / ulp);
    ASSERT_LE(error, 4.1e-7 * exact) << "x " << x[i];
    ASSERT_LE(error, (x[i] >= -20.0f ? 2.74 : 5.5) * ulp) << "x " << x[i];
  }
  EXPECT_GT(worst_ulp, 2.0);  // not std::exp in disguise: the sweep reaches the reduction's error
}

TEST(CpuExp, IsMonotone) {
  const std::vector<float> x = sweep();
  const std::vector<float> w = exp_of(x);
  for (size_t i = 1; i < x.size(); ++i) ASSERT_LE(w[i], w[i - 1]) << "x " << x[i];
}

// ExpFlushToZero's arithmetic on FMA targets below AVX-512, one float at a time.
float polynomial_exp(float x) {
  const float t = std::fma(x, 1.44269504088896341f, 12582912.0f);
  const float r = std::fma(t - 12582912.0f, -0.693147182464599609375f, x);
  float p = 8.312525089e-03f;
  p = std::fma(p, r, 4.189011361e-02f);
  p = std::fma(p, r, 1.666711446e-01f);
  p = std::fma(p, r, 4.999923179e-01f);
  const float y = std::fma(p, r * r, r) + 1.0f;
  const uint32_t scaled = std::bit_cast<uint32_t>(y) + (std::bit_cast<uint32_t>(t) << 23);
  return x < kFlushBelow ? 0.0f : std::bit_cast<float>(scaled);
}

// 2^(j/32) rounded down to float.
float table_entry(int32_t j) {
  const double exact = std::exp2(j / 32.0);
  const auto entry = static_cast<float>(exact);
  return entry > exact ? std::nextafter(entry, 0.0f) : entry;
}

// ExpFlushToZero's arithmetic on AVX-512, one float at a time: 2^(j/32) rounded down to float
// (here from std::exp2, not the kernel's table), scaled by 2^k, times a quadratic in r.
float table_exp(float x) {
  if (x < kFlushBelow) return 0.0f;
  const float t = std::fma(x, 0x1.715476p+5f, 12582912.0f);
  const float n = t - 12582912.0f;
  const float r = std::fma(n, -0x1.62e43p-6f, x);
  const int32_t n_int = static_cast<int32_t>(n);
  const int32_t j = n_int & 31, k = (n_int - j) / 32;
  const float scale = std::ldexp(table_entry(j), k);
  const float quadratic = std::fma(r, 0.5f, 0x1.0000fp+0f);
  return std::fma(scale * r, quadratic, scale);
}

TEST(CpuExp, HasTheBitsOfItsScalarArithmeticOnFmaTargets) {
  const std::string_view target = lastmile::cpu::dispatch_target_name();
  if (!target.starts_with("AVX")) GTEST_SKIP() << target << ": ln 2 in two parts, no FMA";
  std::vector<float> x = sweep();
  for (uint32_t bits = std::bit_cast<uint32_t>(kFlushBelow) - 4096;
       bits <= std::bit_cast<uint32_t>(-104.0f); bits += 7)  // across the flush point
    x.push_back(std::bit_cast<float>(bits));
  x.push_back(kFlushBelow);  // the lowest value kept, and the next one flushed
  x.push_back(std::nextafter(kFlushBelow, -std::numeric_limits<float>::infinity()));
  x.push_back(-std::numeric_limits<float>::infinity());
  const std::vector<float> w = exp_of(x);
  const bool avx512 = target.starts_with("AVX3") || target.starts_with("AVX10");  // HWY_AVX3 and up
  const auto scalar_exp = avx512 ? table_exp : polynomial_exp;
  for (size_t i = 0; i < x.size(); ++i)
    ASSERT_EQ(std::bit_cast<uint32_t>(w[i]), std::bit_cast<uint32_t>(scalar_exp(x[i])))
        << "x " << x[i] << " on " << target;
}

TEST(CpuExp, IsExactAtZeroAndFlushesBelowItsRange) {
  constexpr float kInf = std::numeric_limits<float>::infinity();
  const std::vector<float> x = {0.0f,   -0.0f,   kFlushBelow, std::nextafter(kFlushBelow, -kInf),
                                -87.5f, -103.0f, -1e30f,      -kInf,
                                0.0f,   -1.0f,   0.0f};  // 11: a tail
  const std::vector<float> w = exp_of(x);
  EXPECT_EQ(w[0], 1.0f);
  EXPECT_EQ(w[1], 1.0f);
  EXPECT_GT(w[2], std::numeric_limits<float>::min());  // still a normal float
  for (size_t i = 3; i < 8; ++i) EXPECT_EQ(w[i], 0.0f) << "x " << x[i];
  EXPECT_EQ(w[8], 1.0f);
  EXPECT_NEAR(w[9], std::exp(-1.0), 1e-7);
}

TEST(CpuExp, BlockSumsDoNotDependOnStoringTheRow) {
  std::vector<float> x(10000);
  for (size_t i = 0; i < x.size(); ++i) x[i] = -static_cast<float>(i % 977) / 37.0f;
  std::vector<float> w(x.size());
  std::vector<double> stored(8), bare(8);
  const double a =
      lastmile::cpu::exp_with_block_sums(x.data(), w.data(), x.size(), 0.0f, 2048, stored.data());
  const double b = lastmile::cpu::exp_block_sums(x.data(), x.size(), 0.0f, 2048, bare.data());
  EXPECT_EQ(a, b);
  EXPECT_EQ(stored, bare);
}

}  // namespace
}  // namespace lastmile_test
