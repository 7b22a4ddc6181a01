// lastmile — software_prefetch_pays: the CPU's vendor and family, read once.
#include "cpu/prefetch.hpp"

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#define LASTMILE_CPUID 1
#endif

namespace lastmile::cpu {
namespace {

bool measured_to_pay() {
#ifdef LASTMILE_CPUID
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (__get_cpuid(0, &eax, &ebx, &ecx, &edx) == 0) return true;
  // "AuthenticAMD" in ebx, edx, ecx.
  const bool amd = ebx == 0x68747541 && edx == 0x69746e65 && ecx == 0x444d4163;
  if (!amd || __get_cpuid(1, &eax, &ebx, &ecx, &edx) == 0) return true;
  const unsigned base = (eax >> 8) & 0xf;  // the extended family counts only past base 0xf
  const unsigned family = base == 0xf ? base + ((eax >> 20) & 0xff) : base;
  return family != 0x19;
#else
  return true;
#endif
}

}  // namespace

bool software_prefetch_pays() {
  static const bool pays = measured_to_pay();  // set once, thread-safely; constant after
  return pays;
}

}  // namespace lastmile::cpu
