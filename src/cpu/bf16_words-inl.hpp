// lastmile — a bf16 block's statistics at t = 1 read as 16-bit words (Bf16BlockByWords, AVX-512
// only): its max and the exp's flush check taken on the words as integers, for the pipelined
// statistics pass (softmax_stats.cpp); and, on every target, kMaxBlockGroups, the most groups of
// a block that pass and this read keep maxima for. Re-included once per Highway target, as
// Highway's own -inl headers are.
#if defined(LASTMILE_CPU_BF16_WORDS_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_BF16_WORDS_INL_HPP_
#undef LASTMILE_CPU_BF16_WORDS_INL_HPP_
#else
#define LASTMILE_CPU_BF16_WORDS_INL_HPP_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>

#include "cpu/exp-inl.hpp"
#include "cpu/kernels.hpp"
#include "cpu/read_ahead-inl.hpp"
#include "cpu/sources-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The most groups a block of block_softmax_stats_pipelined holds (groups of 64 at least).
constexpr size_t kMaxBlockGroups = kStatisticsBlock / 64;

#if HWY_TARGET <= HWY_AVX3
// The largest word of each of eight vectors of 32 (signed), out[g] vector g's: halves, quarters,
// then within 128 bits, eight vectors at once, some 25 operations for the eight where reducing
// each alone took some 15 (Bf16BlockByWords' groups of 256: the bench mix's top-k rows, bf16 152k,
// 32.8 -> 32.0 us; one thread, Zen 4, medians of six runs in turns).
HWY_INLINE void MaxWordsOfEight(const int16_t* vectors, int16_t* out) {  // out may overlap vectors
  __m512i v[8];
  for (size_t g = 0; g < 8; ++g) v[g] = _mm512_load_si512(vectors + g * 32);
  // [max of a's halves | max of b's halves], 16 words each.
  auto halves = [](__m512i a, __m512i b) {
    return _mm512_max_epi16(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
  };
  // 128-bit lane k: 8 words of vector k (a's two, then b's two).
  auto quarters = [](__m512i a, __m512i b) {
    return _mm512_max_epi16(_mm512_shuffle_i64x2(a, b, 0x88), _mm512_shuffle_i64x2(a, b, 0xDD));
  };
  const __m512i low = quarters(halves(v[0], v[1]), halves(v[2], v[3]));   // vectors 0-3
  const __m512i high = quarters(halves(v[4], v[5]), halves(v[6], v[7]));  // vectors 4-7
  // 128-bit lane k: 4 words of vector k, then 4 of vector k + 4; then 2 and 2; then word 0 and
  // word 4 hold their maxima.
  __m512i m = _mm512_max_epi16(_mm512_unpacklo_epi64(low, high), _mm512_unpackhi_epi64(low, high));
  m = _mm512_max_epi16(m, _mm512_shuffle_epi32(m, _MM_PERM_CDAB));
  m = _mm512_max_epi16(m, _mm512_srli_epi32(m, 16));
  HWY_ALIGN int16_t words[32];
  _mm512_store_si512(words, m);
  for (size_t k = 0; k < 4; ++k) {
    out[k] = words[8 * k];
    out[k + 4] = words[8 * k + 4];
  }
}

// A bf16 block's sum at t = 1 (AddExp, every lane kept) and its max (with kGroups, its groups'
// maxima too), read 32 words at a time: the max taken on the words as 16-bit integers, which
// order positive floats as floats, and their unsigned max showing whether any entry lies below the
// Exp's flush point (-inf and negative NaN included). Two integer operations for two vectors
// replace a float max and the flush compare on each; the statistics pass over a bf16 row is bound
// by its vector operations, and the bench's bf16 mix took 0.955x the time (one thread, four
// alternating runs, Zen 4; greedy rows 27.6 -> 26.2 us). False, having written nothing, where the
// words cannot tell: a block or group whose max is not above +0 (all entries negative, or -0
// beside +0, whose float max differs), one holding +inf or NaN, or an entry the Exp flushes; the
// float read then takes the block. Otherwise the same sum (the masked FMA with every lane kept)
// and the same maxima (positive floats' bits are their order) as that read.
template <bool kGroups, class Sums>
HWY_INLINE bool Bf16BlockByWords(const uint16_t* HWY_RESTRICT x, size_t size, size_t group,
                                 Sums& sum, float* block_max, float* group_max,
                                 LineByLine& prefetch) {
  const hn::Full512<float> d;
  const hn::Full512<int16_t> dw;
  constexpr uint16_t kFirstFlushed = 0xC2AE;  // -87: the bf16 words below -86.9 are these and up
  constexpr int16_t kInfinity = 0x7F80;
  const __m512i lower = WordsToTopHalves(0), upper = WordsToTopHalves(16);
  if (kGroups && (group % 32 != 0 || size % group != 0)) return false;  // whole loads a group
  const size_t groups = kGroups ? size / group : 1, words = kGroups ? group : size;
  HWY_ALIGN int16_t maxima[kGroups ? kMaxBlockGroups * 32 : 32];
  __m512i flushed = _mm512_setzero_si512();
  Sums block_sum(d);
  for (size_t g = 0; g < groups; ++g) {
    __m512i max = _mm512_set1_epi16(-32768);
    for (size_t i = g * words; i < (g + 1) * words; i += 32) {
      const __m512i w = _mm512_loadu_si512(x + i);
      max = _mm512_max_epi16(max, w);
      flushed = _mm512_max_epu16(flushed, w);
      prefetch.Step();
      block_sum.AddExp(UnflushedExpTermOf(
          d, hn::Vec512<float>{
                 _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, lower, w))}));
      prefetch.Step();
      block_sum.AddExp(UnflushedExpTermOf(
          d, hn::Vec512<float>{
                 _mm512_castsi512_ps(_mm512_maskz_permutexvar_epi16(0xAAAAAAAAu, upper, w))}));
    }
    _mm512_store_si512(maxima + g * 32, max);
  }
  if (hn::GetLane(hn::MaxOfLanes(hn::Full512<uint16_t>(), hn::Vec512<uint16_t>{flushed})) >=
      kFirstFlushed)
    return false;
  int16_t top = 0;
  size_t g = 0;
  for (; g + 8 <= groups; g += 8) MaxWordsOfEight(maxima + g * 32, maxima + g);
  for (; g < groups; ++g)
    maxima[g] = hn::GetLane(hn::MaxOfLanes(dw, hn::Load(dw, maxima + g * 32)));
  for (g = 0; g < groups; ++g) {
    if (maxima[g] <= 0 || maxima[g] >= kInfinity) return false;
    top = std::max(top, maxima[g]);
  }
  auto as_float = [](int16_t word) {
    return std::bit_cast<float>(static_cast<uint32_t>(static_cast<uint16_t>(word)) << 16);
  };
  if constexpr (kGroups)
    for (size_t g = 0; g < groups; ++g) group_max[g] = as_float(maxima[g]);
  *block_max = as_float(top);
  sum = block_sum;
  return true;
}
#endif

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_BF16_WORDS_INL_HPP_
