// Every backend's row kernels (src/backend.hpp): the scalar reference and the Highway CPU backend,
// at awkward sizes (vocab 1, 7, 111, 32001 hit every vector tail). Expected values are computed
// independently here, in double.
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
namespace {

using lastmile::detail::Backend;
using lastmile::detail::SortScratch;
using lastmile::detail::TokenCount;

using KernelParam = std::tuple<std::string, int64_t>;  // backend name, vocab

class BackendKernels : public ::testing::TestWithParam<KernelParam> {
 protected:
  const Backend& backend() const {
    return std::get<0>(GetParam()) == "cpu" ? lastmile::detail::cpu_backend()
                                            : lastmile::detail::reference_backend();
  }
  int64_t n() const { return std::get<1>(GetParam()); }
  std::vector<float> logits(uint64_t seed) const {
    return lcg_logits(static_cast<size_t>(n()), seed);
  }
  // Pairwise distinct logits in [-4, 4) (an evenly spaced grid, shuffled): no ties anywhere.
  std::vector<float> distinct_logits(uint64_t seed) const {
    std::vector<float> x(static_cast<size_t>(n()));
    for (int64_t i = 0; i < n(); ++i)
      x[i] = -4.0f + 8.0f * static_cast<float>(i) / static_cast<float>(n());
    std::shuffle(x.begin(), x.end(), std::mt19937_64(seed));
    return x;
  }
  // A row for the fused conversions: fp32 logits, 16-bit patterns (finite, both signs) for
  // bf16 / fp16, and a seen-token bitmap with empty words, full words and mixed ones.
  struct RepeatedRow {
    std::vector<float> wide;
    std::vector<uint16_t> halves;
    std::vector<uint64_t> seen;
  };
  RepeatedRow repeated_row(uint64_t seed) const {
    std::mt19937_64 rng(seed);
    RepeatedRow row{logits(seed + 1), std::vector<uint16_t>(static_cast<size_t>(n())),
                    std::vector<uint64_t>(lastmile::detail::seen_words(n()))};
    for (uint16_t& b : row.halves) b = static_cast<uint16_t>(rng() & 0xbfffu);
    for (size_t w = 0; w < row.seen.size(); ++w)
      row.seen[w] = w % 3 == 0 ? 0 : w % 3 == 1 ? ~0ull : rng();
    return row;
  }
  // BlockMaximaAreEachBlocksLargestEntry's checks on one row.
  void expect_block_maxima_of(const RepeatedRow& row);
  // A worker's: lists of up to the backend's list_room(n) entries, exactly.
  SortScratch scratch() {
    const size_t room = backend().list_room(n());
    ids_.assign(room + lastmile::detail::kSortSlack, 0);
    values_.assign(room + lastmile::detail::kSortSlack, 0.0f);
    // A worker's, holding what earlier rows left (NaN's bits as doubles): no kernel may rely on it.
    keys_.assign(lastmile::detail::key_storage_size(static_cast<size_t>(n())), ~uint64_t{0});
    return SortScratch::over(ids_, values_, keys_, static_cast<size_t>(n()), room);
  }
  // For u over (0, 1): the draw given apply_top_k_top_p's `listed` (with its scratch s) is the
  // draw over the whole row.
  void expect_listed_draws_equal_full_draws(const std::vector<float>& x, SortScratch s,
                                            size_t listed) {
    const std::vector<int32_t> ids(s.ids.begin(), s.ids.end());
    const std::vector<float> values(s.values.begin(), s.values.end());
    for (double u = 0.005; u < 1.0; u += 0.01) {
      const TokenId full = backend().draw(x.data(), n(), u, scratch());  // reuses the storage
      std::copy(ids.begin(), ids.end(), s.ids.begin());
      std::copy(values.begin(), values.end(), s.values.begin());
      EXPECT_EQ(backend().draw(x.data(), n(), u, s, listed), full) << "u " << u;
    }
  }

 private:
  std::vector<int32_t> ids_;
  std::vector<float> values_;
  std::vector<uint64_t> keys_;
};

// Token ids by descending value, ties by ascending id.
std::vector<int32_t> descending_order(const std::vector<float>& x) {
  std::vector<int32_t> order(x.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return x[a] > x[b]; });
  return order;
}

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

TEST_P(BackendKernels, MinPKeepsTokensWithRatioAtLeastMinP) {
  std::vector<float> x = logits(5);
  const float max = *std::max_element(x.begin(), x.end());
  const float min_p = 0.3f;
  std::vector<float> out = x;
  backend().apply_min_p(out.data(), n(), min_p);
  for (int64_t i = 0; i < n(); ++i) {
    const double ratio = std::exp(static_cast<double>(x[i]) - max);  // p_i / p_max
    if (std::abs(ratio - min_p) < 1e-5) continue;                    // within rounding of the cut
    EXPECT_EQ(out[i], ratio < min_p ? -kInf : x[i]) << "token " << i;
  }
}

TEST_P(BackendKernels, TopKKeepsTheKLargest) {
  for (const std::vector<float>& x : {distinct_logits(6), logits(6)}) {  // the second may hold ties
    const std::vector<int32_t> order = descending_order(x);
    for (int64_t k : {int64_t{1}, int64_t{5}, n() / 2, n() - 1, n()}) {
      if (k < 1 || k > n()) continue;
      const float threshold = x[order[k - 1]];  // every value tied with the k-th survives
      std::vector<float> out = x;
      backend().apply_top_k_top_p(out.data(), n(), k, false, 1.0f, scratch());
      for (int64_t i = 0; i < n(); ++i)
        EXPECT_EQ(out[i], x[i] >= threshold ? x[i] : -kInf) << "k " << k << " token " << i;
    }
  }
}

TEST_P(BackendKernels, TopKKeepsTiesAtTheKthValue) {
  std::vector<float> x(static_cast<size_t>(n()), 0.0f);
  for (int64_t i = 0; i < n(); ++i) x[i] = static_cast<float>(i % 3);  // values 0, 1, 2
  const int64_t twos = n() / 3;
  std::vector<float> out = x;
  // k = 1: every 2 (or every 1 / 0 when the row is shorter) is tied at the threshold.
  backend().apply_top_k_top_p(out.data(), n(), 1, false, 1.0f, scratch());
  const float max = *std::max_element(x.begin(), x.end());
  for (int64_t i = 0; i < n(); ++i) EXPECT_EQ(out[i], x[i] == max ? x[i] : -kInf) << i;
  if (twos > 0) {
    EXPECT_EQ(std::count(out.begin(), out.end(), 2.0f), twos);
  }
}

TEST_P(BackendKernels, TopPKeepsTheSmallestHeadReachingP) {
  const std::vector<float> x = distinct_logits(7);
  const std::vector<int32_t> order = descending_order(x);
  std::vector<double> prob(static_cast<size_t>(n()));
  double sum = 0;
  for (int64_t i = 0; i < n(); ++i)
    sum += prob[i] = std::exp(static_cast<double>(x[i]) - x[order[0]]);
  for (double& p : prob) p /= sum;
  // A token survives iff the mass strictly above it is < p. Put p halfway through the j-th
  // largest token's own mass, far from any rounding: exactly ranks 0..j survive.
  for (int64_t j : {int64_t{0}, int64_t{2}, int64_t{9}}) {
    if (j >= n()) continue;
    double above = 0;
    for (int64_t r = 0; r < j; ++r) above += prob[order[r]];
    const auto top_p = static_cast<float>(above + prob[order[j]] / 2);
    std::vector<float> out = x;
    backend().apply_top_k_top_p(out.data(), n(), n(), true, top_p, scratch());
    for (int64_t rank = 0; rank < n(); ++rank) {
      const int32_t id = order[rank];
      EXPECT_EQ(out[id], rank <= j ? x[id] : -kInf) << "j " << j << " rank " << rank;
    }
  }
}

TEST_P(BackendKernels, TopPIsAppliedAfterTopKRenormalisation) {
  const std::vector<float> x = distinct_logits(8);
  const std::vector<int32_t> order = descending_order(x);
  if (n() < 7) {  // too short for a top-6: top_k 1 then any p keeps the maximum only
    std::vector<float> out = x;
    backend().apply_top_k_top_p(out.data(), n(), 1, true, 0.5f, scratch());
    for (int64_t i = 0; i < n(); ++i) EXPECT_EQ(out[i], i == order[0] ? x[i] : -kInf) << i;
    return;
  }
  const int64_t k = 6;
  std::vector<double> prob(static_cast<size_t>(k));
  double sum = 0;
  for (int64_t r = 0; r < k; ++r)
    sum += prob[r] = std::exp(static_cast<double>(x[order[r]]) - x[order[0]]);
  for (double& p : prob) p /= sum;
  // Keep the top 3 of the renormalised top 6: p between mass above rank 2 and mass above rank 3.
  const double above2 = prob[0] + prob[1];
  const auto top_p = static_cast<float>(above2 + prob[2] / 2);
  std::vector<float> out = x;
  backend().apply_top_k_top_p(out.data(), n(), k, true, top_p, scratch());
  for (int64_t rank = 0; rank < n(); ++rank) {
    const int32_t id = order[rank];
    EXPECT_EQ(out[id], rank < 3 ? x[id] : -kInf) << "rank " << rank;
  }
}

// A draw over the survivor list apply_top_k_top_p returns picks the token the full-row draw
// picks, for every u (the cpu backend lists survivors; the oracle lists none).
TEST_P(BackendKernels, DrawOverListedSurvivorsEqualsTheFullDraw) {
  const std::vector<float> x = logits(11);
  for (const auto& [k, top_p] : {std::pair<int64_t, float>{5, 0.8f}, {40, 0.95f}, {1, 1.0f}}) {
    std::vector<float> out = x;
    SortScratch s = scratch();
    const size_t listed =
        backend().apply_top_k_top_p(out.data(), n(), std::min(k, n()), true, top_p, s);
    if (std::min(k, n()) < n() && std::get<0>(GetParam()) == "cpu") {
      EXPECT_NE(listed, lastmile::detail::kNotListed);
    }
    expect_listed_draws_equal_full_draws(out, s, listed);
  }
}

// Top-p alone on a peaked row (a head of strong tokens over a broad body): the cpu backend lists
// the survivors from its probability band when it is short; the draw over that list is the full
// draw.
TEST_P(BackendKernels, TopPAloneListedSurvivorsDrawAsTheFullRow) {
  std::vector<float> x = logits(12);
  for (size_t i = 0; i < x.size(); i += 97) x[i] += 9.0f;
  for (const float top_p : {0.5f, 0.9f, 0.99f}) {
    std::vector<float> out = x;
    SortScratch s = scratch();
    const size_t listed = backend().apply_top_k_top_p(out.data(), n(), n(), true, top_p, s);
    if (n() > 8 * 512 && top_p < 0.95f && std::get<0>(GetParam()) == "cpu") {
      EXPECT_NE(listed, lastmile::detail::kNotListed) << "p " << top_p;  // p 0.99: > n / 8
    }
    expect_listed_draws_equal_full_draws(out, s, listed);
  }
}

TEST_P(BackendKernels, TopPOneMasksOnlyUnderflowedTokens) {
  std::vector<float> x = logits(9);
  x[0] = 50.0f;
  if (n() > 1) x[n() - 1] = -100.0f;  // exp(-150) underflows in float32
  std::vector<float> out = x;
  backend().apply_top_k_top_p(out.data(), n(), n(), true, 1.0f, scratch());
  std::vector<float> expected = x;
  for (int64_t i = 1; i < n(); ++i)
    if (std::exp(x[i] - 50.0f) == 0.0f) expected[i] = -kInf;
  if (n() > 1) {
    EXPECT_EQ(expected[n() - 1], -kInf);
  }
  EXPECT_EQ(out, expected);
}

TEST_P(BackendKernels, TopKTopPDisabledIsAnIdentity) {
  const std::vector<float> x = logits(10);
  std::vector<float> out = x;
  backend().apply_top_k_top_p(out.data(), n(), n(), false, 1.0f, scratch());
  EXPECT_EQ(out, x);
}

TEST_P(BackendKernels, DrawIsTheInverseCdf) {
  // Uniform row: u in ((k) / n, (k + 1) / n) selects token k.
  const std::vector<float> flat(static_cast<size_t>(n()), 0.25f);
  for (int64_t k : {int64_t{0}, n() / 2, n() - 1}) {
    const double u = (static_cast<double>(k) + 0.5) / static_cast<double>(n());
    EXPECT_EQ(backend().draw(flat.data(), n(), u, scratch()), k) << "k " << k;
  }
  EXPECT_EQ(backend().draw(flat.data(), n(), 1e-12, scratch()), 0);
  EXPECT_EQ(backend().draw(flat.data(), n(), 1.0 - 1e-12, scratch()), n() - 1);
}

TEST_P(BackendKernels, DrawSkipsMaskedTokens) {
  // Only every third token is finite (equal weight): the k-th kept token covers ((k)/m, (k+1)/m).
  std::vector<float> x(static_cast<size_t>(n()), -kInf);
  std::vector<int64_t> kept_ids;
  for (int64_t i = n() - 1; i >= 0; i -= 3) kept_ids.insert(kept_ids.begin(), i);
  for (int64_t i : kept_ids) x[i] = 1.0f;
  const auto m = static_cast<double>(kept_ids.size());
  for (size_t k = 0; k < kept_ids.size(); k += std::max<size_t>(1, kept_ids.size() / 5)) {
    EXPECT_EQ(backend().draw(x.data(), n(), (static_cast<double>(k) + 0.5) / m, scratch()),
              kept_ids[k])
        << k;
  }
  EXPECT_EQ(backend().draw(x.data(), n(), 1e-12, scratch()), kept_ids.front());
  EXPECT_EQ(backend().draw(x.data(), n(), 1.0 - 1e-12, scratch()), kept_ids.back());
}

TEST_P(BackendKernels, DrawFollowsTheCumulativeProbabilities) {
  const std::vector<float> x = logits(11);
  std::vector<double> cdf(static_cast<size_t>(n()));
  const float max = *std::max_element(x.begin(), x.end());
  double sum = 0;
  for (int64_t i = 0; i < n(); ++i) cdf[i] = sum += std::exp(static_cast<double>(x[i]) - max);
  for (double& c : cdf) c /= sum;
  // The middle of token i's interval [cdf[i-1], cdf[i]) draws i when the interval is not tiny.
  int checked = 0;
  for (int64_t i = 0; i < n(); i += std::max<int64_t>(1, n() / 50)) {
    const double lo = i ? cdf[i - 1] : 0.0;
    if (cdf[i] - lo < 1e-6) continue;  // float32 weights move the bounds by ~1e-7 at most
    EXPECT_EQ(backend().draw(x.data(), n(), (lo + cdf[i]) / 2, scratch()), i) << "token " << i;
    ++checked;
  }
  EXPECT_GT(checked, 0);
}

TEST_P(BackendKernels, DrawOfAnAllNegativeInfinityRowIsZero) {
  const std::vector<float> x(static_cast<size_t>(n()), -kInf);
  EXPECT_EQ(backend().draw(x.data(), n(), 0.7, scratch()), 0);
}

TEST_P(BackendKernels, PenaltiesTouchOnlyCountedTokens) {
  std::vector<float> x = logits(12);
  x[0] = 3.0f;
  std::vector<TokenCount> counts = {{0, 2, true}};
  if (n() > 5) counts.push_back({5, 0, true});
  if (n() > 6) counts.push_back({static_cast<TokenId>(n() - 1), 3, false});
  std::vector<float> expected = x;
  expected[0] = 3.0f * (1.0f / 1.5f) - 0.5f * 2.0f - 0.25f;
  if (n() > 5) expected[5] = x[5] > 0 ? x[5] * (1.0f / 1.5f) : x[5] * 1.5f;
  if (n() > 6) {
    float& l = expected[n() - 1];
    l = l > 0 ? l * (1.0f / 1.5f) : l * 1.5f;
    l = l - 0.5f * 3.0f;
    l = l - 0.25f;
  }
  backend().apply_penalties(x.data(), counts, 1.5f, 0.5f, 0.25f);
  EXPECT_EQ(x, expected);
}

TEST_P(BackendKernels, RankCountsEntriesAtLeastTheToken) {
  const std::vector<float> x = logits(13);
  for (TokenId t : {TokenId{0}, static_cast<TokenId>(n() / 2), static_cast<TokenId>(n() - 1)}) {
    const auto expected = std::count_if(x.begin(), x.end(), [&](float v) { return v >= x[t]; });
    EXPECT_EQ(backend().rank_of(x.data(), n(), t), expected);
  }
  std::vector<float> tied(static_cast<size_t>(n()), 1.0f);
  EXPECT_EQ(backend().rank_of(tied.data(), n(), 0), n());
}

TEST_P(BackendKernels, TopNIsDescendingWithTiesInIdOrder) {
  std::vector<float> x = logits(14);  // random: may hold ties, ordered by ascending id
  if (n() > 4) x[3] = x[1] = 9.0f;    // a tie at the top: id 1 before id 3
  const std::vector<int32_t> order = descending_order(x);
  for (int64_t k : {int64_t{0}, std::min<int64_t>(n(), 3), n()}) {
    std::vector<TokenId> ids(static_cast<size_t>(k), -1);
    std::vector<float> values(static_cast<size_t>(k), 0.0f);
    backend().top_n(x.data(), n(), k, ids.data(), values.data(), scratch());
    for (int64_t r = 0; r < k; ++r) {
      EXPECT_EQ(ids[r], order[r]) << "k " << k << " rank " << r;
      EXPECT_EQ(values[r], x[order[r]]);
    }
  }
}

// Raw modes rank and order by the mapped values, not by the logits: (x - max) - log_sum rounds
// 32 neighbouring logits near -0.2 (one float step apart, larger ids larger) to one value, so the
// second to fifth largest values are the lowest ids of that group, not the largest logits, and
// the group's members share one rank. raw_logits (the identity) orders by logit.
TEST_P(BackendKernels, RawValuesRankAndOrderByValueThenId) {
  if (n() < 64) GTEST_SKIP() << "needs 60 tokens";
  std::vector<float> x(static_cast<size_t>(n()), -30.0f);
  x[0] = 0.0f;
  float v = -0.2f;
  for (size_t i = 1; i < 60; ++i, v = std::nextafter(v, 0.0f)) x[i] = v;
  double sum = 0;
  for (float e : x) sum += std::exp(static_cast<double>(e));
  for (const bool log_softmax : {true, false}) {
    const int64_t k = 5;
    for (TokenId t : {1, 30, 59, static_cast<TokenId>(n() - 1)}) {
      std::vector<TokenId> ids(k, -1);
      std::vector<float> out(k, 0.0f);
      const lastmile::detail::RawLogprobs raw =
          backend().input_raw_logprobs(x.data(), lastmile::DType::f32, n(), log_softmax, t, k,
                                       ids.data(), out.data(), scratch());
      EXPECT_EQ(raw.values.max, 0.0f);
      EXPECT_NEAR(raw.values.log_sum, log_softmax ? std::log(sum) : 0.0, 1e-6);
      std::vector<float> values(x.size());
      for (size_t i = 0; i < x.size(); ++i) values[i] = raw.values(x[i]);
      const std::vector<int32_t> order = descending_order(values);
      EXPECT_EQ(order[1] == 59, !log_softmax);  // rounding merged the top of the group
      for (int64_t r = 0; r < k; ++r) {
        EXPECT_EQ(ids[r], order[r]) << "log_softmax " << log_softmax << " rank " << r;
        EXPECT_EQ(out[r], values[order[r]]);
      }
      EXPECT_EQ(raw.rank, std::count_if(values.begin(), values.end(),
                                        [&](float e) { return e >= values[t]; }))
          << "log_softmax " << log_softmax << " token " << t;
    }
  }
}

// A probability is at most 1: the max's own term is exp(0) = 1, so log_sum >= 0 and the max's
// log_softmax value is at most 0, even where a sum's arithmetic rounds that term below 1 (the cpu
// backend's statistics at t = 1 sum exp(x) and scale by exp(-max) after: on AVX-512, at a max of
// 10 or 79.81 the term comes out 1.3e-7 and 4.6e-7 under 1; elsewhere over 1, by up to 4.6e-7).
// A lone max, every other entry far below it.
TEST_P(BackendKernels, RawLogprobOfALoneMaxIsZero) {
  for (const float max : {10.0f, 79.81f, 1.0f, 0.0f, -3.25f}) {
    std::vector<float> x(static_cast<size_t>(n()), max - 200.0f);
    const TokenId at = static_cast<TokenId>(n() / 2);
    x[static_cast<size_t>(at)] = max;
    TokenId id = -1;
    float value = 1.0f;
    const lastmile::detail::RawLogprobs raw = backend().input_raw_logprobs(
        x.data(), lastmile::DType::f32, n(), true, at, 1, &id, &value, scratch());
    EXPECT_GE(raw.values.log_sum, 0.0f) << "max " << max;
    EXPECT_LE(raw.values.log_sum, 4.6e-7f) << "max " << max;
    EXPECT_EQ(id, at);
    EXPECT_LE(value, 0.0f) << "max " << max;
    EXPECT_EQ(value, raw.values(max));
    EXPECT_EQ(raw.rank, 1);
  }
}

// A top-N answer can lie below every entry a fast path reads first: the k-th largest logit a
// and a' one float step below it (token 7, a lower id) map to one value under log_softmax's
// rounding, so the k-th largest value goes to a', by id. The k - 1 larger logits and a sit
// `stride` tokens apart, a' below them all: the cpu backend lists the blocks (or, with fewer
// blocks than k, the groups of 64) whose max reaches the k-th largest max, a, and a' is in one
// below it.
void expect_rounding_tie_found(const lastmile::detail::Backend& backend, int64_t n, int64_t k,
                               TokenId stride, lastmile::detail::SortScratch scratch) {
  const TokenId below = 7;
  const TokenId kth_at = static_cast<TokenId>(k) * stride + 5;
  float a = -1.5f;
  for (int attempt = 0; attempt < 64; ++attempt, a = std::nextafter(a, -2.0f)) {
    std::vector<float> x(static_cast<size_t>(n), -30.0f);
    std::vector<TokenId> expected;
    for (int64_t r = 1; r < k; ++r) {  // 0, -1 / k, ..., above -1
      const TokenId at = static_cast<TokenId>(r) * stride + 5;
      x[static_cast<size_t>(at)] = -static_cast<float>(r - 1) / static_cast<float>(k);
      expected.push_back(at);
    }
    expected.push_back(below);
    x[static_cast<size_t>(kth_at)] = a;
    x[below] = std::nextafter(a, -2.0f);
    std::vector<TokenId> ids(static_cast<size_t>(k), -1);
    std::vector<float> out(static_cast<size_t>(k), 0.0f);
    const lastmile::detail::RawLogprobs raw = backend.input_raw_logprobs(
        x.data(), lastmile::DType::f32, n, true, kth_at, k, ids.data(), out.data(), scratch);
    if (raw.values(x[below]) != raw.values(a)) continue;  // this a's pair did not merge
    EXPECT_EQ(ids, expected) << "k " << k;
    EXPECT_EQ(out.back(), raw.values(a)) << "k " << k;
    EXPECT_EQ(raw.rank, k + 1) << "k " << k;
    return;
  }
  FAIL() << "no logit pair merged by rounding (k " << k << ")";
}

TEST_P(BackendKernels, RawTopNFindsARoundingTieBelowTheBlocksReadFirst) {
  if (n() < 4 * 2048) GTEST_SKIP() << "needs four blocks of 2048 tokens";
  expect_rounding_tie_found(backend(), n(), 3, 2048, scratch());
}

// The same with more logprobs than the row has blocks (32001 tokens: 16 blocks, 20 logprobs).
TEST_P(BackendKernels, RawTopNFindsARoundingTieBelowTheGroupsReadFirst) {
  if (n() < 22 * 64 || n() >= 20 * 2048) GTEST_SKIP() << "needs 22 groups and under 20 blocks";
  expect_rounding_tie_found(backend(), n(), 20, 64, scratch());
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
