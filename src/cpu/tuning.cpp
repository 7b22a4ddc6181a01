// lastmile — the tuning choices (cpu/tuning.hpp): the CPU's vendor and family, read once.
#include "cpu/tuning.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define LASTMILE_CPUID 1
#endif

namespace lastmile::cpu {
namespace {

// Whether CPUID says an AMD family 19h part (Zen 3, Zen 4).
bool amd_family_19h() {
#ifdef LASTMILE_CPUID
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return false;
  // "AuthenticAMD" in ebx, edx, ecx.
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;
  if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return false;
  const unsigned base = (eax >> 8) & 0xf;  // the extended family counts only past base 0xf
  const unsigned family = base == 0xf ? base + ((eax >> 20) & 0xff) : base;
  return family == 0x19;
#else
  return false;
#endif
}

// Read once, thread-safely; constant after.
bool amd_family_19h_once() {
  static const bool is = amd_family_19h();
  return is;
}

}  // namespace

bool software_prefetch_pays() { return !amd_family_19h_once(); }

bool vector_divide_pays() { return amd_family_19h_once(); }

}  // namespace lastmile::cpu
