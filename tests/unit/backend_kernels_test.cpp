// Every backend's row kernels (src/backend.hpp): the scalar reference and the Highway CPU backend,
// at awkward sizes (vocab 1, 7, 111, 32001 hit every vector tail). Expected values are computed
// independently here, in double. This file: conversion (plain, divided, with repetition,
// summarised), argmax, log_softmax, division and block maxima, and the suite's instantiation;
// selection and the draw in backend_selection_kernels_test.cpp, rank and top-N in
// backend_top_n_kernels_test.cpp (fixture: backend_kernels.hpp).
#include "unit/backend_kernels.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <tuple>

#include "backend.hpp"
#include "unit/backwards_chunks.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {

// BlockMaximaAreEachBlocksLargestEntry's checks on one row: a member of the fixture, so outside
// the anonymous namespace.
void BackendKernels::expect_block_maxima_of(const RepeatedRow& row) {
  for (const auto dtype : {lastmile::DType::f32, lastmile::DType::bf16, lastmile::DType::f16}) {
    SCOPED_TRACE(dtype == lastmile::DType::f32    ? "f32"
                 : dtype == lastmile::DType::bf16 ? "bf16"
                                                  : "f16");
    const bool wide = dtype == lastmile::DType::f32;
    const void* src = wide ? static_cast<const void*>(row.wide.data())
                           : static_cast<const void*>(row.halves.data());
    std::vector<float> widened(row.wide.size());
    lastmile::detail::reference_backend().convert_row(src, dtype, widened.data(), n());
    lastmile::detail::RawRowSummary summary;
    const bool summarised = backend().summarise_row(src, dtype, n(), &summary, {});
    for (const lastmile::detail::ParallelFor& split :
         {lastmile::detail::ParallelFor{}, kBackwards}) {
      lastmile::detail::BlockMaxima maxima;
      const bool found = backend().block_maxima(src, dtype, n(), &maxima, split);
      ASSERT_EQ(found, summarised);
      if (!found) continue;
      ASSERT_EQ(maxima.block, summary.maxima.block);
      ASSERT_EQ(maxima.blocks, (static_cast<size_t>(n()) + maxima.block - 1) / maxima.block);
      for (size_t b = 0; b < maxima.blocks; ++b) {
        const auto start = static_cast<int64_t>(b * maxima.block);
        const int64_t end = std::min<int64_t>(n(), start + static_cast<int64_t>(maxima.block));
        EXPECT_EQ(maxima.max[b], *std::max_element(widened.begin() + start, widened.begin() + end))
            << "block " << b;  // == : -0 equals +0
      }
    }
    if (!summarised) continue;
    const uint16_t nan_bits = dtype == lastmile::DType::bf16 ? 0x7fc1 : 0x7e00;
    const uint16_t inf_bits = dtype == lastmile::DType::bf16 ? 0x7f80 : 0x7c00;
    for (const int64_t at : {int64_t{0}, n() / 2, n() - 1})
      for (const uint16_t sign : {uint16_t{0}, uint16_t{0x8000}})
        for (const bool nan : {true, false}) {
          if (!nan && sign != 0) continue;  // -inf is a logit
          RepeatedRow bad = row;
          auto set = [&](int64_t i, float value, uint16_t bits) {
            if (i >= n()) return;
            if (wide)
              bad.wide[static_cast<size_t>(i)] = value;
            else
              bad.halves[static_cast<size_t>(i)] = bits;
          };
          const float nan_value = sign != 0 ? -std::nanf("") : std::nanf("");
          set(at, nan ? nan_value : kInf,
              static_cast<uint16_t>((nan ? nan_bits : inf_bits) | sign));
          set(at + 16, -kInf, static_cast<uint16_t>(inf_bits | 0x8000));
          const void* bad_src = wide ? static_cast<const void*>(bad.wide.data())
                                     : static_cast<const void*>(bad.halves.data());
          lastmile::detail::BlockMaxima maxima;
          EXPECT_FALSE(backend().block_maxima(bad_src, dtype, n(), &maxima, {}))
              << (nan ? "NaN" : "+inf") << " sign " << sign << " at " << at;
        }
  }
}

namespace {

TEST_P(BackendKernels, ConvertRowCopiesFloat32AndFindsTheFirstBadValue) {
  std::vector<float> x = logits(1);
  std::vector<float> out(x.size(), 99.0f);
  EXPECT_EQ(backend().convert_row(x.data(), lastmile::DType::f32, out.data(), n()), -1);
  EXPECT_EQ(out, x);
  x[0] = -kInf;
  EXPECT_EQ(backend().convert_row(x.data(), lastmile::DType::f32, out.data(), n()), -1);
  x[n() - 1] = kInf;
  EXPECT_EQ(backend().convert_row(x.data(), lastmile::DType::f32, out.data(), n()), n() - 1);
  x[n() / 2] = std::nanf("");
  EXPECT_EQ(backend().convert_row(x.data(), lastmile::DType::f32, out.data(), n()), n() / 2);
}

TEST_P(BackendKernels, ConvertRowWidensHalfPrecisionExactlyAndFindsBadValues) {
  std::mt19937_64 rng(5);
  std::vector<uint16_t> bits(static_cast<size_t>(n()));
  for (uint16_t& b : bits) {
    do b = static_cast<uint16_t>(rng());
    while ((b & 0x7f80u) == 0x7f80u || (b & 0x7c00u) == 0x7c00u);  // no inf / NaN in either
  }
  std::vector<float> out(bits.size());
  EXPECT_EQ(backend().convert_row(bits.data(), lastmile::DType::bf16, out.data(), n()), -1);
  for (size_t i = 0; i < bits.size(); ++i) {
    const uint32_t widened = uint32_t{bits[i]} << 16;  // bf16 is the top half of a float32
    float expected;
    std::memcpy(&expected, &widened, 4);
    ASSERT_EQ(std::memcmp(&out[i], &expected, 4), 0) << "bf16 " << bits[i];
  }
  EXPECT_EQ(backend().convert_row(bits.data(), lastmile::DType::f16, out.data(), n()), -1);
  bits[static_cast<size_t>(n() - 1)] = 0x7f80u;  // bf16 +inf
  EXPECT_EQ(backend().convert_row(bits.data(), lastmile::DType::bf16, out.data(), n()), n() - 1);
  bits[0] = 0x7fc1u;  // bf16 NaN comes first
  EXPECT_EQ(backend().convert_row(bits.data(), lastmile::DType::bf16, out.data(), n()), 0);
}

TEST_P(BackendKernels, ArgmaxIsTheLowestIndexOfTheMaximum) {
  std::vector<float> x = logits(2);
  x[n() - 1] = 10.0f;
  EXPECT_EQ(backend().row_argmax(x.data(), n()), n() - 1);
  EXPECT_EQ(backend().row_max(x.data(), n()), 10.0f);
  x[n() / 3] = 10.0f;
  EXPECT_EQ(backend().row_argmax(x.data(), n()), n() / 3);
  std::vector<float> flat(static_cast<size_t>(n()), -kInf);
  EXPECT_EQ(backend().row_argmax(flat.data(), n()), 0);
  EXPECT_EQ(backend().row_max(flat.data(), n()), -kInf);
}

// The one-read greedy path: the same argmax as row_argmax for every position of the maximum and
// of ties, and the first NaN / +inf reported wherever it sits (vector body, scalar tail, another
// chunk of a split read), whether the chunks run in order or last to first.
TEST_P(BackendKernels, ArgmaxCheckedMatchesArgmaxAndFindsTheFirstBadValue) {
  int64_t bad = 7;
  auto argmax_checked = [&](const std::vector<float>& y) {
    int64_t bad_backwards = 7;
    const TokenId at = backend().argmax_checked(y.data(), n(), &bad, {});
    EXPECT_EQ(backend().argmax_checked(y.data(), n(), &bad_backwards, kBackwards), at);
    EXPECT_EQ(bad_backwards, bad);
    return at;
  };
  std::vector<float> x = logits(21);
  for (int64_t at : {int64_t{0}, n() / 2, n() - 1}) {
    std::vector<float> y = x;
    y[at] = 10.0f;
    if (at + 17 < n()) y[at + 17] = 10.0f;  // a later tie loses,
    y[n() - 1] = 10.0f;                     // in the last chunk too
    EXPECT_EQ(argmax_checked(y), at);
    EXPECT_EQ(bad, -1);
    EXPECT_EQ(backend().row_argmax(y.data(), n()), at);
  }
  std::vector<float> flat(static_cast<size_t>(n()), -kInf);
  EXPECT_EQ(argmax_checked(flat), 0);
  EXPECT_EQ(bad, -1);
  for (int64_t at : {int64_t{0}, n() / 2, n() - 1}) {
    std::vector<float> y = x;
    y[at] = at % 2 ? kInf : std::nanf("");
    if (at + 1 < n()) y[n() - 1] = std::nanf("");  // a later bad value is not the first
    argmax_checked(y);
    EXPECT_EQ(bad, at);
  }
}

// The dense repetition pass over a bitmap equals the sparse penalty on the same tokens, bit for
// bit, wherever the set bits fall (skipped words, vector body, tail), and reports a +inf it makes.
TEST_P(BackendKernels, DenseRepetitionEqualsSparse) {
  std::vector<float> x = logits(23);
  if (n() > 3) x[3] = -kInf;
  std::vector<uint64_t> seen(static_cast<size_t>((n() + 63) / 64), 0);
  std::vector<lastmile::detail::TokenCount> counts;
  std::mt19937_64 rng(5);
  for (int64_t t = 0; t < n(); ++t)
    if (rng() % 3 == 0 && !(t >= 128 && t < 256)) {  // tokens 128-255: a word left empty
      seen[static_cast<size_t>(t / 64)] |= uint64_t{1} << (t % 64);
      counts.push_back({static_cast<lastmile::TokenId>(t), 0, true});
    }
  for (float penalty : {1.3f, 0.7f}) {
    std::vector<float> dense = x, sparse = x;
    EXPECT_EQ(backend().apply_repetition_dense(dense.data(), n(), seen.data(), penalty), -1);
    backend().apply_penalties(sparse.data(), counts, penalty, 0.0f, 0.0f);
    for (int64_t i = 0; i < n(); ++i)
      ASSERT_EQ(std::bit_cast<uint32_t>(dense[i]), std::bit_cast<uint32_t>(sparse[i])) << i;
  }
  if (counts.empty()) return;
  const lastmile::TokenId last = counts.back().token_id;
  x[last] = 3e38f;
  EXPECT_EQ(backend().apply_repetition_dense(x.data(), n(), seen.data(), 0.5f), last);
}

TEST_P(BackendKernels, LogSoftmaxMatchesDouble) {
  std::vector<float> x = logits(3);
  if (n() > 2) x[1] = -kInf;
  const std::vector<double> expected = log_softmax_double(x);
  backend().log_softmax(x.data(), n());
  expect_near_row(x, expected, 4e-6);
}

// One peak over a long flat tail: the float partial sum holding the peak's 1 takes the tail's
// terms (exp(-15.5), 1.6 of 1's ULP each) one rounding at a time. Summed row-long, that drifted
// the cpu backend's log-sum 5e-5 at 32001 entries (4e-4 at 256000); per block, the most such
// roundings are a block's share of one lane, which the peak at a block's start meets (README's
// 1e-5 bound).
TEST_P(BackendKernels, LogSoftmaxOfAPeakOverAFlatTailMatchesDouble) {
  for (const size_t peak : {size_t{0}, static_cast<size_t>(n()) / 2}) {
    std::vector<float> x(static_cast<size_t>(n()), -15.5f);
    x[peak] = 0.0f;
    const std::vector<double> expected = log_softmax_double(x);
    backend().log_softmax(x.data(), n());
    expect_near_row(x, expected, 1e-5);
  }
}

TEST_P(BackendKernels, LogSoftmaxKeepsAnAllNegativeInfinityRow) {
  std::vector<float> x(static_cast<size_t>(n()), -kInf);
  backend().log_softmax(x.data(), n());
  EXPECT_EQ(x, std::vector<float>(static_cast<size_t>(n()), -kInf));
}

TEST_P(BackendKernels, DivideIsFloat32Division) {
  std::vector<float> x = logits(4);
  std::vector<float> expected = x;
  for (float& v : expected) v = v / 0.7f;
  backend().divide(x.data(), n(), 0.7f);
  EXPECT_EQ(x, expected);
}

// Bit-exact, every dtype: the fused pass is convert_row then divide (the oracle's scalar loop).
TEST_P(BackendKernels, ConvertRowDividedIsConvertThenDivide) {
  std::mt19937_64 rng(6);
  std::vector<uint16_t> halves(static_cast<size_t>(n()));
  for (uint16_t& b : halves) b = static_cast<uint16_t>(rng() & 0x3fffu);  // finite in both
  const std::vector<float> wide = logits(8);
  for (const float t : {0.7f, 1.3f, 3e-5f}) {
    for (const auto dtype : {lastmile::DType::f32, lastmile::DType::bf16, lastmile::DType::f16}) {
      const void* src = dtype == lastmile::DType::f32 ? static_cast<const void*>(wide.data())
                                                      : static_cast<const void*>(halves.data());
      std::vector<float> fused(wide.size()), apart(wide.size());
      EXPECT_EQ(backend().convert_row_divided(src, dtype, fused.data(), n(), t), -1);
      lastmile::detail::reference_backend().convert_row(src, dtype, apart.data(), n());
      for (float& v : apart) v /= t;
      ASSERT_EQ(fused, apart) << "t " << t;
    }
  }
}

TEST_P(BackendKernels, ConvertRowDividedFindsInputAndOverflowedValues) {
  std::vector<float> x = logits(9);
  std::vector<float> out(x.size());
  x[static_cast<size_t>(n() - 1)] = 3e38f;  // finite, +inf once divided by 0.5
  EXPECT_EQ(backend().convert_row_divided(x.data(), lastmile::DType::f32, out.data(), n(), 0.5f),
            n() - 1);
  EXPECT_EQ(backend().convert_row(x.data(), lastmile::DType::f32, out.data(), n()), -1);
  x[0] = std::nanf("");
  EXPECT_EQ(backend().convert_row_divided(x.data(), lastmile::DType::f32, out.data(), n(), 0.5f),
            0);
}

// Bit-exact, every dtype: the fused pass is convert_row then the repetition factor where the
// bitmap is set (the oracle's scalar loop), on bitmaps with empty words, full words and mixed.
TEST_P(BackendKernels, ConvertRowRepeatedIsConvertThenRepetition) {
  const RepeatedRow row = repeated_row(10);
  const std::vector<float>& wide = row.wide;
  const std::vector<uint16_t>& halves = row.halves;
  const std::vector<uint64_t>& seen = row.seen;
  for (const float r : {1.3f, 0.7f}) {
    for (const auto dtype : {lastmile::DType::f32, lastmile::DType::bf16, lastmile::DType::f16}) {
      const void* src = dtype == lastmile::DType::f32 ? static_cast<const void*>(wide.data())
                                                      : static_cast<const void*>(halves.data());
      std::vector<float> fused(wide.size()), apart(wide.size());
      EXPECT_EQ(backend().convert_row_repeated(src, dtype, fused.data(), n(), seen.data(), r), -1);
      lastmile::detail::reference_backend().convert_row(src, dtype, apart.data(), n());
      for (int64_t i = 0; i < n(); ++i)
        if (seen[i / 64] >> (i % 64) & 1) apart[i] *= apart[i] > 0 ? 1.0f / r : r;
      ASSERT_EQ(fused, apart) << "r " << r;
    }
  }
}

TEST_P(BackendKernels, ConvertRowRepeatedFindsInputAndOverflowedValues) {
  std::vector<float> x = logits(12);
  std::vector<float> out(x.size());
  std::vector<uint64_t> seen(lastmile::detail::seen_words(n()), ~0ull);
  for (const int64_t at : {int64_t{0}, n() / 2, n() - 1}) {
    std::vector<float> y = x;
    y[static_cast<size_t>(at)] = 3e38f;  // finite, +inf once scaled by 1 / 0.5
    EXPECT_EQ(backend().convert_row_repeated(y.data(), lastmile::DType::f32, out.data(), n(),
                                             seen.data(), 0.5f),
              at);
    y[static_cast<size_t>(at)] = std::nanf("");
    EXPECT_EQ(backend().convert_row_repeated(y.data(), lastmile::DType::f32, out.data(), n(),
                                             seen.data(), 1.5f),
              at);
  }
  std::fill(seen.begin(), seen.end(), 0);  // only the entry that overflows seen
  for (const int64_t at : {int64_t{0}, n() / 2, n() - 1}) {
    std::vector<float> y = x;
    y[static_cast<size_t>(at)] = 3e38f;
    lastmile::detail::mark_seen(seen, static_cast<TokenId>(at));
    EXPECT_EQ(backend().convert_row_repeated(y.data(), lastmile::DType::f32, out.data(), n(),
                                             seen.data(), 0.5f),
              at);
    std::fill(seen.begin(), seen.end(), 0);
  }
  // nothing seen: the overflow never happens
  x[static_cast<size_t>(n() - 1)] = 3e38f;
  EXPECT_EQ(backend().convert_row_repeated(x.data(), lastmile::DType::f32, out.data(), n(),
                                           seen.data(), 0.5f),
            -1);
}

// Converting with a summary changes nothing: the row is convert_row's (repeated where seen), and
// the raw logprobs answered from the summary are those read from the caller's row, to the bit.
// Seen bitmaps both dense (half the tokens) and sparse (one in 97, as a short history marks a
// large vocabulary).
TEST_P(BackendKernels, ConvertRowSummarisedIsConvertAndTheRawLogprobsOfTheRow) {
  const RepeatedRow row = repeated_row(13);
  const std::vector<float>& wide = row.wide;
  const std::vector<uint16_t>& halves = row.halves;
  std::vector<uint64_t> sparse(row.seen.size(), 0);
  for (int64_t i = 3; i < n(); i += 97)
    lastmile::detail::mark_seen(sparse, static_cast<TokenId>(i));
  const int64_t k = std::min<int64_t>(n(), 5);
  const std::vector<uint64_t>* const bitmaps[] = {&row.seen, &sparse};
  for (const std::vector<uint64_t>* seen_bits : bitmaps)
    for (const bool repeated : {false, true}) {
      const std::vector<uint64_t>& seen = *seen_bits;
      for (const auto dtype : {lastmile::DType::f32, lastmile::DType::bf16, lastmile::DType::f16}) {
        const void* src = dtype == lastmile::DType::f32 ? static_cast<const void*>(wide.data())
                                                        : static_cast<const void*>(halves.data());
        const uint64_t* bits = repeated ? seen.data() : nullptr;
        std::vector<float> summarised(wide.size()), plain(wide.size());
        lastmile::detail::RawRowSummary summary;
        EXPECT_EQ(backend().convert_row_summarised(src, dtype, summarised.data(), n(), bits, 0.7f,
                                                   &summary),
                  -1);
        if (repeated)
          backend().convert_row_repeated(src, dtype, plain.data(), n(), bits, 0.7f);
        else
          backend().convert_row(src, dtype, plain.data(), n());
        ASSERT_EQ(summarised, plain) << "repeated " << repeated;
        for (const TokenId token :
             {0, static_cast<TokenId>(n() / 2), static_cast<TokenId>(n() - 1)}) {
          std::vector<TokenId> ids_known(k), ids_read(k);
          std::vector<float> out_known(k), out_read(k);
          const auto known =
              backend().input_raw_logprobs(src, dtype, n(), true, token, k, ids_known.data(),
                                           out_known.data(), scratch(), &summary);
          const auto read = backend().input_raw_logprobs(
              src, dtype, n(), true, token, k, ids_read.data(), out_read.data(), scratch());
          EXPECT_EQ(known.values.max, read.values.max);
          EXPECT_EQ(known.values.log_sum, read.values.log_sum);
          EXPECT_EQ(known.rank, read.rank) << "token " << token;
          EXPECT_EQ(ids_known, ids_read);
          EXPECT_EQ(out_known, out_read);
        }
      }
    }
}

// The block maxima alone: each block's largest widened entry, in the summary's blocks, found
// by the backends that summarise (split backwards as well), on rows of both signs, of negative
// entries only (bf16's bits order them the other way), and of zeros of both signs (equal: either
// may come out); false on NaN (of either sign) or +inf anywhere, also when the same lane of the
// next vector holds -inf (a lane's running max may drop the NaN).
TEST_P(BackendKernels, BlockMaximaAreEachBlocksLargestEntry) {
  for (int variant = 0; variant < 3; ++variant) {
    RepeatedRow row = repeated_row(17 + static_cast<uint64_t>(variant));
    if (variant == 1) {  // negative only
      for (float& v : row.wide) v = -std::fabs(v);
      for (uint16_t& b : row.halves) b |= 0x8000;
    } else if (variant == 2) {  // +-0, and a -inf
      for (size_t i = 0; i < row.wide.size(); ++i) {
        row.wide[i] = i % 3 == 0 ? 0.0f : -0.0f;
        row.halves[i] = i % 3 == 0 ? 0x0000 : 0x8000;
      }
      row.wide[0] = -kInf;
      row.halves[0] = 0xfc00;  // f16's -inf, bf16's -2^121
    }
    SCOPED_TRACE("variant " + std::to_string(variant));
    expect_block_maxima_of(row);
  }
}

// NaN or +inf, the input's or the repetition's, anywhere: the index convert_row_repeated gives,
// and nothing known.
TEST_P(BackendKernels, ConvertRowSummarisedFindsInputAndOverflowedValues) {
  const std::vector<float> x = logits(15);
  std::vector<float> out(x.size());
  const std::vector<uint64_t> seen(lastmile::detail::seen_words(n()), ~0ull);
  for (const int64_t at : {int64_t{0}, n() / 2, n() - 1}) {
    std::vector<float> y = x;
    lastmile::detail::RawRowSummary summary;
    y[static_cast<size_t>(at)] = 3e38f;  // finite, +inf once scaled by 1 / 0.5
    EXPECT_EQ(backend().convert_row_summarised(y.data(), lastmile::DType::f32, out.data(), n(),
                                               seen.data(), 0.5f, &summary),
              at);
    EXPECT_FALSE(summary.known);
    std::vector<uint64_t> only(seen.size(), 0);  // sparse: the entry that overflows alone
    lastmile::detail::mark_seen(only, static_cast<TokenId>(at));
    EXPECT_EQ(backend().convert_row_summarised(y.data(), lastmile::DType::f32, out.data(), n(),
                                               only.data(), 0.5f, &summary),
              at);
    EXPECT_FALSE(summary.known);
    EXPECT_EQ(backend().convert_row_summarised(y.data(), lastmile::DType::f32, out.data(), n(),
                                               nullptr, 0.5f, &summary),
              -1);  // no repetition: finite
    y[static_cast<size_t>(at)] = std::nanf("");
    EXPECT_EQ(backend().convert_row_summarised(y.data(), lastmile::DType::f32, out.data(), n(),
                                               nullptr, 1.0f, &summary),
              at);
    EXPECT_FALSE(summary.known);
  }
}

INSTANTIATE_TEST_SUITE_P(AwkwardSizes, BackendKernels,
                         ::testing::Combine(::testing::Values("reference", "cpu"),
                                            ::testing::Values(1, 7, 111, 32001)),
                         [](const ::testing::TestParamInfo<KernelParam>& param_info) {
                           return std::get<0>(param_info.param) + "_vocab" +
                                  std::to_string(std::get<1>(param_info.param));
                         });

}  // namespace
}  // namespace lastmile_test
