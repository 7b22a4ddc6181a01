// lastmile — software prefetch for the streaming passes: ReadAhead requests a read's lines a
// fixed distance ahead of it, LineByLine the next block's while a loop over this one runs; none
// where software_prefetch_pays() says not (cpu/tuning.hpp). Re-included once per Highway
// target, as Highway's own -inl headers are.
#if defined(LASTMILE_CPU_READ_AHEAD_INL_HPP_) == defined(HWY_TARGET_TOGGLE)
#ifdef LASTMILE_CPU_READ_AHEAD_INL_HPP_
#undef LASTMILE_CPU_READ_AHEAD_INL_HPP_
#else
#define LASTMILE_CPU_READ_AHEAD_INL_HPP_
#endif

#include <hwy/cache_control.h>
#include <hwy/highway.h>

#include <algorithm>
#include <cstdint>

#include "cpu/tuning.hpp"

HWY_BEFORE_NAMESPACE();
namespace lastmile::cpu::HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Prefetches a streaming read's lines a fixed distance ahead of it, up to the end of what it
// reads. A batch past the cache comes from memory, where the block max passes (a reduction and a
// store every group of 64) fell behind row_max's plain read, the hardware prefetcher alone
// keeping too few lines in flight: 256 top-k/top-p rows of 128k (131 MB, one thread) took
// 47-55 us a row against row_max's 38-43; with the lines requested 4 KB ahead, 41-50 (min-p
// 50 -> 46). Rows in cache ran as before. None where software_prefetch_pays() says not.
class ReadAhead {
 public:
  static constexpr uintptr_t kDistance = 4096, kLine = 64;
  ReadAhead(uintptr_t begin, uintptr_t end)
      : next_(software_prefetch_pays() ? begin + kDistance : end), end_(end) {}
  // The read has reached `at`: request the lines up to kDistance past it.
  HWY_INLINE void Reached(uintptr_t at) {
    const uintptr_t to = std::min(at + kDistance, end_);
    for (; next_ < to; next_ += kLine) hwy::Prefetch(reinterpret_cast<const char*>(next_));
  }

 private:
  uintptr_t next_, end_;
};

// Prefetches [begin, end) a line a step while a loop over something else runs: a block's Exp
// requests the next block's lines, one a vector, so that its read finds them in cache (else the
// read and the arithmetic took turns: 70 vs 44 us per 128k row, from memory vs from cache). The
// default range is empty: nothing requested; so is every range where software_prefetch_pays()
// says not.
class LineByLine {
 public:
  LineByLine() = default;
  LineByLine(uintptr_t begin, uintptr_t end)
      : next_(begin), end_(software_prefetch_pays() ? end : begin) {}
  HWY_INLINE void Step() {
    if (next_ < end_) hwy::Prefetch(reinterpret_cast<const char*>(next_));
    next_ += ReadAhead::kLine;
  }

 private:
  uintptr_t next_ = 0, end_ = 0;
};

}  // namespace lastmile::cpu::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // LASTMILE_CPU_READ_AHEAD_INL_HPP_
