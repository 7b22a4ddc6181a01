// The CPU backend's division by a temperature (cpu/quotient-inl.hpp: a multiply by a two-part 1 / t
// corrected with FMAs, the divide outside the range where that is exact; or the vector divide
// where it pays): the bits of scalar division, through each pass that divides (cpu::divide each
// way, cpu::load_row and block_softmax_stats the faster way), on every Highway target the unit
// tests run on. The long check is DISABLED_ here (minutes): run
// it with --gtest_also_run_disabled_tests --gtest_filter='CpuQuotient.DISABLED_*'.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "cpu/kernels.hpp"
#include "reference/float16.hpp"

namespace lastmile_test {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Temperatures: usual ones, significands of all ones and of one past a power of two, the
// smallest random temperature, the ends of the corrected range and just past them.
const std::vector<float> kTemperatures = {0.7f,           0.8f,           1.3f,     3.0f,
                                          2.0f,           1e-5f,          3e-5f,    0.999f,
                                          0x1.fffffep-1f, 0x1.000002p0f,  0x1p-24f, 0x1.fffffep-25f,
                                          0x1p24f,        0x1.000002p24f, 1e30f};

// Values of every class, placed among ordinary logits so that a vector mixes them: zeros,
// infinities, NaN, subnormals, the ends of the corrected range and past them, the largest floats.
std::vector<float> mixed_row(uint64_t seed) {
  const std::vector<float> special = {
      0.0f, -0.0f, kInf, -kInf, std::numeric_limits<float>::quiet_NaN(),
      std::numeric_limits<float>::denorm_min(), -std::numeric_limits<float>::denorm_min(),
      std::numeric_limits<float>::min(), 1e-30f, 0x1p-60f, -0x1.fffffep-61f, 0x1.fffffep99f,
      -0x1p100f, 3e38f, -std::numeric_limits<float>::max(),
      // Where x y + x y_lo alone rounds the other way (t = 0x1.fffffep-1): the correction's.
      1.0f, 2.0f, -4.0f,
      // Below 2^-60, where only the range check keeps them exact: the corrected product misses
      // each at one of the temperatures (0.7, 0.8, 1.3, 1e-5 in turn).
      0x1.0cb5aep-115f, -0x1.9a2012p-116f, 0x1.0e66c4p-111f, 0x1.108c46p-114f};
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> logit(0.0f, 8.0f);
  std::vector<float> x(4099);
  for (float& v : x) v = logit(rng);
  for (size_t i = 0; i < special.size(); ++i) x[37 * i + 5] = special[i];
  for (size_t i = 2048; i < 3072; ++i) x[i] = std::bit_cast<float>(static_cast<uint32_t>(rng()));
  return x;
}

using lastmile::cpu::Division;
// Every way cpu::divide can divide; whichever this CPU prefers is one of the other two.
constexpr Division kDivisions[] = {Division::fastest, Division::by_reciprocal,
                                   Division::by_instruction};

void expect_scalar_quotients(const std::vector<float>& x, const std::vector<float>& got, float t) {
  ASSERT_EQ(got.size(), x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float want = x[i] / t;
    if (std::isnan(want)) {
      ASSERT_TRUE(std::isnan(got[i])) << "x " << x[i] << " t " << t;
    } else {
      ASSERT_EQ(std::bit_cast<uint32_t>(got[i]), std::bit_cast<uint32_t>(want))
          << "x " << std::hexfloat << x[i] << " t " << t << ": " << got[i] << " for " << want;
    }
  }
}

TEST(CpuQuotient, DivideGivesScalarDivisionsBits) {
  for (const Division how : kDivisions) {
    for (const float t : kTemperatures) {
      const std::vector<float> x = mixed_row(1);
      std::vector<float> got = x;
      lastmile::cpu::divide(got.data(), got.size(), t, how);
      expect_scalar_quotients(x, got, t);
    }
  }
}

TEST(CpuQuotient, DividedConversionGivesScalarDivisionsBits) {
  for (const float t : kTemperatures) {
    const std::vector<float> x = mixed_row(2);
    std::vector<float> got(x.size());
    lastmile::cpu::load_row(x.data(), lastmile::DType::f32, got.data(), x.size(), t);
    expect_scalar_quotients(x, got, t);
  }
}

// bf16 and fp16 rows widen, then divide: every 16-bit pattern (zeros, subnormals, infinities, NaN).
TEST(CpuQuotient, DividedHalvesGiveScalarDivisionsOfTheirWidening) {
  std::vector<uint16_t> halves(1 << 16);
  for (size_t i = 0; i < halves.size(); ++i) halves[i] = static_cast<uint16_t>(i);
  for (const float t : kTemperatures) {
    for (const auto dtype : {lastmile::DType::bf16, lastmile::DType::f16}) {
      std::vector<float> wide(halves.size()), got(halves.size());
      for (size_t i = 0; i < halves.size(); ++i)
        wide[i] = dtype == lastmile::DType::bf16 ? lastmile::detail::bf16_to_f32(halves[i])
                                                 : lastmile::detail::f16_to_f32(halves[i]);
      lastmile::cpu::load_row(halves.data(), dtype, got.data(), halves.size(), t);
      expect_scalar_quotients(wide, got, t);
    }
  }
}

// Ordinary logits only, many of them, by the reciprocal (every lane corrected, none divided) and
// the fastest way: the path a temperature row takes, where one multiply alone would be an ulp off
// for 9% (t = 0.7) to 64% (t = 3e-5) of them.
TEST(CpuQuotient, CorrectedQuotientsOfLogitsAreScalarDivisions) {
  std::mt19937_64 rng(3);
  std::normal_distribution<float> logit(0.0f, 8.0f);
  std::vector<float> x(1 << 16);
  for (float& v : x) v = logit(rng);
  for (const Division how : {Division::fastest, Division::by_reciprocal}) {
    for (const float t : kTemperatures) {
      std::vector<float> got = x;
      lastmile::cpu::divide(got.data(), got.size(), t, how);
      expect_scalar_quotients(x, got, t);
    }
  }
}

// Both ways give the same bits, so only this tells which way a pass takes: the divide when asked
// or t is out of the reciprocal's range, the reciprocal when asked on a target with FMA (AVX2 and
// AVX-512 among the x86 ones), and by default the reciprocal but on AVX-512 where
// vector_divide_pays.
TEST(CpuQuotient, EachWayIsTheOneAskedFor) {
  using lastmile::cpu::divides_by_reciprocal;
  const std::string target = lastmile::cpu::dispatch_target_name();
  EXPECT_FALSE(divides_by_reciprocal(0.8f, Division::by_instruction)) << target;
  EXPECT_FALSE(divides_by_reciprocal(1e30f, Division::by_reciprocal)) << target;
  const bool fma = target.rfind("AVX", 0) == 0;  // AVX2, AVX3 and its kin
  if (!fma && target != "SSE4" && target != "SSSE3" && target != "SCALAR" && target != "EMU128")
    GTEST_SKIP() << "not an x86 target: " << target;
  const bool avx512 = target.rfind("AVX3", 0) == 0;
  EXPECT_EQ(divides_by_reciprocal(0.8f, Division::by_reciprocal), fma) << target;
  EXPECT_EQ(divides_by_reciprocal(0.8f, Division::fastest),
            fma && !(avx512 && lastmile::cpu::vector_divide_pays()))
      << target;
}

// The statistics pass divides on the way: its block maxima are the maxima of the quotients.
TEST(CpuQuotient, SoftmaxStatisticsSeeScalarQuotients) {
  std::mt19937_64 rng(4);
  std::normal_distribution<float> logit(0.0f, 8.0f);
  std::vector<float> x(3 * 2048 + 77);
  for (float& v : x) v = logit(rng);
  for (const float t : {0.7f, 0x1.fffffep-1f, 3e-5f}) {
    std::vector<float> buffer(2048 + 64), block_max(4);
    std::vector<double> block_sums(4);
    lastmile::cpu::NearMax none;
    ASSERT_TRUE(lastmile::cpu::block_softmax_stats(x.data(), lastmile::DType::f32, x.size(), t,
                                                   2048, buffer.data(), block_max.data(),
                                                   block_sums.data(), &none));
    for (size_t b = 0; b < 4; ++b) {
      float want = -kInf;
      for (size_t i = b * 2048; i < std::min(x.size(), (b + 1) * 2048); ++i)
        want = std::max(want, x[i] / t);
      EXPECT_EQ(block_max[b], want) << "block " << b << " t " << t;
    }
  }
}

// Every dividend significand in [1, 2) against the 64 divisor significands nearest 1 and 2 and
// 2,000 random ones (1.7e10 quotients through cpu::divide by the reciprocal, about two minutes).
// Offline, the same formula in scalar C went through 3,000 divisors (2.5e10 quotients) with no
// mismatch.
TEST(CpuQuotient, DISABLED_EveryDividendSignificandAgainstManyDivisors) {
  std::vector<float> x(size_t{1} << 23);
  for (uint32_t m = 0; m < x.size(); ++m) x[m] = std::bit_cast<float>(0x3f800000u | m);
  std::mt19937_64 rng(5);
  for (uint32_t i = 0; i < 2064; ++i) {
    const uint32_t significand = i < 32   ? 0x7fffffu - i
                                 : i < 64 ? i - 32
                                          : static_cast<uint32_t>(rng()) & 0x7fffffu;
    const float t = std::bit_cast<float>(0x3f800000u | significand);
    std::vector<float> got(x);
    lastmile::cpu::divide(got.data(), got.size(), t, Division::by_reciprocal);
    expect_scalar_quotients(x, got, t);
  }
}

}  // namespace
}  // namespace lastmile_test
