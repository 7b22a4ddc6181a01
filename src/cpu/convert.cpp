// lastmile — row passes that write a float32 row (Highway; STYLE §5): a caller's fp32 / bf16 /
// fp16 row converted, divided by the temperature or with the repetition factor folded in; and
// in place, the division, the repetition factor, the log-softmax's subtraction and a mask. Each
// is one streaming pass; those that can make NaN or +inf find it on the way.
#include <cstddef>
#include <cstdint>

#include "cpu/kernels.hpp"
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "cpu/convert.cpp"  // this file, re-included once per target
#include <hwy/foreach_target.h>               // must come before highway.h
#include <hwy/highway.h>
// Per-target helpers, after highway.h: re-included once per target.
#include "cpu/lanes-inl.hpp"
#include "cpu/quotient-inl.hpp"
#include "cpu/repetition-inl.hpp"
#include "cpu/sources-inl.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// dst = the float32 row of src, divided by t when kDivide (Quotient: the same bits as scalar
// division). Returns the first index of dst holding NaN or +inf, or -1: the check rides along
// the one pass.
template <bool kDivide, class Source>
int64_t convert_pass(Source src, float* HWY_RESTRICT dst, size_t n, float t) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Quotient quotient(d, t);
  BadLanes bad(d);
  auto finish = [&](hn::Vec<decltype(d)> v) {
    if constexpr (kDivide) v = quotient.Of(d, v);
    bad.Check(d, v);  // padded tail lanes hold 0: never flagged
    return v;
  };
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(finish(src.Whole(d, i)), d, dst + i);
  if (i < n) StoreTail(d, finish(src.Tail(d, i, n - i)), dst + i, n - i);
  return !bad.Any(d) ? -1 : first_bad(dst, 0, n);
}

template <class Source>
int64_t convert(Source src, float* HWY_RESTRICT dst, size_t n, float t) {
  return t == 1.0f ? convert_pass<false>(src, dst, n, t) : convert_pass<true>(src, dst, n, t);
}

int64_t load_row(const void* HWY_RESTRICT src, DType dtype, float* HWY_RESTRICT dst, size_t n,
                 float t) {
  return with_source(src, dtype, [&](auto source) { return convert(source, dst, n, t); });
}

// load_row, with the Repetition factor applied in the same pass. The first index of dst holding
// NaN or +inf, or -1.
template <class Source>
int64_t load_repeated_pass(Source src, float* HWY_RESTRICT dst, size_t n,
                           const uint64_t* HWY_RESTRICT seen, float r) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Repetition repetition(seen, r);
  BadLanes bad(d);
  size_t i = 0;
  if (Repetition::Vectorised(d)) {
    for (; i + 64 <= n; i += 64) {
      const bool any_seen = seen[i / 64] != 0;  // else convert only
      for (size_t j = i; j < i + 64; j += lanes) {
        auto v = src.Whole(d, j);
        if (any_seen) v = repetition.Where(d, j, v);
        bad.Check(d, v);
        hn::StoreU(v, d, dst + j);
      }
    }
  }
  const size_t tail = i;  // the rest converted, then scaled entry by entry
  for (; i + lanes <= n; i += lanes) {
    const auto v = src.Whole(d, i);
    bad.Check(d, v);
    hn::StoreU(v, d, dst + i);
  }
  if (i < n) {
    const auto v = src.Tail(d, i, n - i);  // padded with zeros: never flagged
    bad.Check(d, v);
    StoreTail(d, v, dst + i, n - i);
  }
  for (size_t j = tail; j < n; ++j)
    if (repetition.Seen(j)) dst[j] = repetition.Scaled(dst[j]);
  return first_bad(dst, !bad.Any(d) ? tail : 0, n);  // a scaled tail entry may be +inf
}

int64_t load_row_repeated(const void* HWY_RESTRICT src, DType dtype, float* HWY_RESTRICT dst,
                          size_t n, const uint64_t* HWY_RESTRICT seen, float r) {
  return with_source(src, dtype,
                     [&](auto source) { return load_repeated_pass(source, dst, n, seen, r); });
}

// x /= t with the bits of scalar division (Quotient, dividing as `how` says). Returns the first
// index holding NaN or +inf, or -1 (the check rides along the pass).
int64_t divide(float* HWY_RESTRICT x, size_t n, float t, Division how) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const Quotient quotient(d, t, how);
  BadLanes bad(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto q = quotient.Of(d, hn::LoadU(d, x + i));
    bad.Check(d, q);
    hn::StoreU(q, d, x + i);
  }
  for (; i < n; ++i) x[i] /= t;
  return first_bad(x, !bad.Any(d) ? n - n % lanes : 0, n);
}

bool divides_by_reciprocal(float t, Division how) {
  return Quotient(hn::ScalableTag<float>(), t, how).ByReciprocal();
}

// The Repetition factor over a float32 row in place (the reference's arithmetic, lane by lane).
// Words of 64 tokens with no bit set are skipped whole. Returns the first index left +inf, or -1.
int64_t apply_repetition_dense(float* HWY_RESTRICT x, size_t n, const uint64_t* HWY_RESTRICT seen,
                               float r) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto inf = hn::Set(d, kInf);
  const Repetition repetition(seen, r);
  BadLanes bad(d);
  size_t i = 0;
  if (Repetition::Vectorised(d)) {
    for (; i + 64 <= n; i += 64) {
      if (seen[i / 64] == 0) continue;
      for (size_t j = i; j < i + 64; j += lanes) {
        const auto out = repetition.Where(d, j, hn::LoadU(d, x + j));
        bad.Note(d, hn::Eq(out, inf));
        hn::StoreU(out, d, x + j);
      }
    }
  }
  const size_t tail = i;
  for (; i < n; ++i)
    if (repetition.Seen(i)) x[i] = repetition.Scaled(x[i]);
  // +inf came from a finite input (the row was checked): look only where one was flagged.
  return first_bad(x, !bad.Any(d) ? tail : 0, n);
}

// The first index holding NaN or +inf, or -1.
int64_t find_nan_or_inf(const float* HWY_RESTRICT x, size_t n) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  BadLanes bad(d);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    bad.Check(d, v);
  }
  return first_bad(x, !bad.Any(d) ? n - n % lanes : 0, n);
}

// x := (x - max) - log_sum.
void subtract_two(float* HWY_RESTRICT x, size_t n, float max, float log_sum) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vmax = hn::Set(d, max), vlog = hn::Set(d, log_sum);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(hn::Sub(hn::Sub(hn::LoadU(d, x + i), vmax), vlog), d, x + i);
  for (; i < n; ++i) x[i] = (x[i] - max) - log_sum;
}

// Masks every x < threshold. Exact.
void mask_below(float* HWY_RESTRICT x, size_t n, float threshold) {
  const hn::ScalableTag<float> d;
  const size_t lanes = hn::Lanes(d);
  const auto vthr = hn::Set(d, threshold), neg_inf = hn::Set(d, -kInf);
  size_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto v = hn::LoadU(d, x + i);
    hn::StoreU(hn::IfThenElse(hn::Lt(v, vthr), neg_inf, v), d, x + i);
  }
  for (; i < n; ++i)
    if (x[i] < threshold) x[i] = -kInf;
}

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
namespace lastmile::cpu {
HWY_EXPORT(load_row);
HWY_EXPORT(load_row_repeated);
HWY_EXPORT(divide);
HWY_EXPORT(divides_by_reciprocal);
HWY_EXPORT(find_nan_or_inf);
HWY_EXPORT(apply_repetition_dense);
HWY_EXPORT(subtract_two);
HWY_EXPORT(mask_below);

int64_t load_row(const void* src, DType dtype, float* dst, size_t n, float t) {
  return HWY_DYNAMIC_DISPATCH(load_row)(src, dtype, dst, n, t);
}
int64_t load_row_repeated(const void* src, DType dtype, float* dst, size_t n, const uint64_t* seen,
                          float r) {
  return HWY_DYNAMIC_DISPATCH(load_row_repeated)(src, dtype, dst, n, seen, r);
}
int64_t divide(float* x, size_t n, float t, Division how) {
  return HWY_DYNAMIC_DISPATCH(divide)(x, n, t, how);
}
bool divides_by_reciprocal(float t, Division how) {
  return HWY_DYNAMIC_DISPATCH(divides_by_reciprocal)(t, how);
}
int64_t find_nan_or_inf(const float* x, size_t n) {
  return HWY_DYNAMIC_DISPATCH(find_nan_or_inf)(x, n);
}
int64_t apply_repetition_dense(float* x, size_t n, const uint64_t* seen, float r) {
  return HWY_DYNAMIC_DISPATCH(apply_repetition_dense)(x, n, seen, r);
}
void subtract_two(float* x, size_t n, float max, float log_sum) {
  HWY_DYNAMIC_DISPATCH(subtract_two)(x, n, max, log_sum);
}
void mask_below(float* x, size_t n, float threshold) {
  HWY_DYNAMIC_DISPATCH(mask_below)(x, n, threshold);
}
}  // namespace lastmile::cpu
#endif
