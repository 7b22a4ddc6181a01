// lastmile — what the row kernels share lane by lane: the NaN / +inf checks that ride along a
// pass (BadLanes, first_bad), float partial sums whose order is fixed at any vector width
// (PartialSums, LanesInDouble) and padded tails (LoadTail, StoreTail). Re-included once per
// Highway target, as Highway's own -inl headers are.
#if defined(LASTMILE_CPU_LANES_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_LANES_INL_HPP_
#undef LASTMILE_CPU_LANES_INL_HPP_
#else
#define LASTMILE_CPU_LANES_INL_HPP_
#endif

#include <hwy/highway.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

constexpr float kInf = std::numeric_limits<float>::infinity();

// The first index in [from, n) holding NaN or +inf, or -1. The vector loops flag whether any
// full vector held one: if none did, only the scalar tail is scanned. Out of line, as it was when
// the kernels shared one file: inlined, it changed the register allocation of the hot loops.
HWY_NOINLINE inline int64_t first_bad(const float* x, size_t from, size_t n) {
  for (size_t j = from; j < n; ++j)
    if (std::isnan(x[j]) || x[j] == kInf) return static_cast<int64_t>(j);
  return -1;
}

// Lanes holding NaN or +inf: what the checked passes accumulate, first_bad's rule per lane. One
// compare: exactly those lanes are not below +inf.
template <class D, class V>
HWY_INLINE auto NaNOrPositiveInf(D d, V v) {
  return hn::Not(hn::Lt(v, hn::Set(d, kInf)));
}

// Lanes that ever held NaN or +inf, kept in a vector: OR-ing mask registers made a dependency
// chain that slowed the checked passes up to 3x on Zen 4. It keeps the lanes that stayed below
// +inf, AND-ed: a check is then a compare and an AND, where NaNOrPositiveInf's negation took a
// third instruction on every vector of every checked pass.
template <class D>
struct BadLanes {
  hn::Vec<D> below_inf;  // all ones in a lane until it holds NaN or +inf
  explicit BadLanes(D d) : below_inf(hn::VecFromMask(d, hn::FirstN(d, hn::Lanes(d)))) {}
  void Note(D d, hn::Mask<D> bad) { below_inf = hn::AndNot(hn::VecFromMask(d, bad), below_inf); }
  void Check(D d, hn::Vec<D> v) {
    below_inf = hn::And(below_inf, hn::VecFromMask(d, hn::Lt(v, hn::Set(d, kInf))));
  }
  bool Any(D d) const { return !hn::AllTrue(d, hn::MaskFromVec(below_inf)); }
};

// A vector's stored lanes added in lane order, in double: every kernel's partial sums end here,
// so kernels that sum the same lanes agree to the bit.
template <class D>
HWY_INLINE double LanesInDouble(D d, const float* lanes) {
  double sum = 0;
  for (size_t l = 0; l < hn::Lanes(d); ++l) sum += lanes[l];
  return sum;
}

// Float partial sums over at least kMinLanes lanes whatever the vector width: a narrow target
// (4 lanes, 1 for scalar) keeps kMinLanes / lanes accumulators, taking vectors in turn, so each
// float partial sums as few entries as on a 16-lane target (one accumulator summed 16x more
// entries: log-sums drifted 1e-5 from the oracle's). Total: each accumulator's LanesInDouble,
// accumulators in order; with one accumulator, LanesInDouble itself.
//
// The accumulators rotate instead of being indexed by a counter: the k-th Add goes to the k-th
// accumulator (mod kCount) as before, but every index is a constant, so they stay in registers
// (indexed by a counter GCC kept them on the stack, a store and reload per vector: the AVX2 exp
// pass took 43.7 us per cached 128k row instead of 41.6).
template <class D, size_t kMinLanes = 16>
struct PartialSums {
#if HWY_HAVE_SCALABLE
  static constexpr size_t kCount = 1;  // no arrays of sizeless vectors
#else
  static constexpr size_t kCount =
      hn::MaxLanes(D()) >= kMinLanes ? 1 : kMinLanes / hn::MaxLanes(D());
#endif
  hn::Vec<D> sums[kCount];  // sums[0] takes the next vector
  size_t added = 0;
  explicit PartialSums(D d) {
    for (auto& sum : sums) sum = hn::Zero(d);
  }
  HWY_INLINE void Add(hn::Vec<D> v) { Take(hn::Add(sums[0], v)); }
  // Add(ExpFlushToZero(x)) (in the lanes of `where`) as ExpTermOf(x) adds: the same order,
  // other bits.
  template <class Term, class... Where>
  HWY_INLINE void AddExp(const Term& term, Where... where) {
    Take(term.AddTo(sums[0], where...));
  }
  HWY_INLINE void Take(hn::Vec<D> first) {  // sums[0] plus the next vector
    for (size_t k = 0; k + 1 < kCount; ++k) sums[k] = sums[k + 1];
    sums[kCount - 1] = first;
    ++added;
  }
  double Total(D d) const {
    // Accumulator j (the one vectors j, j + kCount, ... went to) is sums[(j - added) mod kCount].
    HWY_ALIGN float lanes[kCount * hn::MaxLanes(d)];
    for (size_t k = 0; k < kCount; ++k) hn::Store(sums[k], d, lanes + k * hn::Lanes(d));
    const size_t shift = added % kCount;
    auto accumulator = [&](size_t j) {
      return LanesInDouble(d, lanes + (j + kCount - shift) % kCount * hn::Lanes(d));
    };
    double total = accumulator(0);
    for (size_t j = 1; j < kCount; ++j) total += accumulator(j);
    return total;
  }
};

// x[i, i + count) for count < a vector's lanes, the rest of the vector `fill`: tails go through
// the vector code, so every entry sees the same arithmetic (ExpFlushToZero is not std::exp).
template <class D>
HWY_INLINE hn::Vec<D> LoadTail(D d, const float* HWY_RESTRICT x, size_t count, float fill) {
  HWY_ALIGN float padded[hn::MaxLanes(d)];
  std::fill(padded, padded + hn::MaxLanes(d), fill);
  std::memcpy(padded, x, count * sizeof(float));
  return hn::Load(d, padded);
}
template <class D>
HWY_INLINE void StoreTail(D d, hn::Vec<D> v, float* HWY_RESTRICT x, size_t count) {
  HWY_ALIGN float padded[hn::MaxLanes(d)];
  hn::Store(v, d, padded);
  std::memcpy(x, padded, count * sizeof(float));
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_LANES_INL_HPP_
