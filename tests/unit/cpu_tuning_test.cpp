// The tuning choices (cpu/tuning.cpp), read from CPUID: software prefetch everywhere but AMD family
// 19h, the vector divide only there. The kernel's own account, /proc/cpuinfo, is the independent
// witness where there is one.
#include <gtest/gtest.h>

#include <fstream>
#include <optional>
#include <string>

#include "cpu/tuning.hpp"

namespace lastmile_test {
namespace {

#if defined(__x86_64__) || defined(__i386__)
// The value of the first "key : value" line of /proc/cpuinfo with that key; empty if none.
std::string cpuinfo_field(const std::string& key) {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(key, 0) != 0) continue;
    const size_t colon = line.find(':');
    if (colon == std::string::npos) continue;
    const size_t start = line.find_first_not_of(' ', colon + 1);
    return start == std::string::npos ? "" : line.substr(start);
  }
  return "";
}
#endif

// Whether this CPU is an AMD family 19h part (Zen 3, Zen 4) as the library would see it: on x86,
// as /proc/cpuinfo names it (nullopt without the file); elsewhere false, since the library reads
// no CPUID there, whatever the file says (qemu-user shows an AArch64 build the x86 host's).
std::optional<bool> amd_family_19h() {
#if defined(__x86_64__) || defined(__i386__)
  const std::string vendor = cpuinfo_field("vendor_id");
  const std::string family = cpuinfo_field("cpu family");
  if (vendor.empty() || family.empty()) return std::nullopt;
  return vendor == "AuthenticAMD" && std::stoi(family) == 0x19;
#else
  return false;
#endif
}

TEST(CpuTuning, PrefetchPaysEverywhereButAmdFamily19h) {
  const std::optional<bool> zen3_or_zen4 = amd_family_19h();
  if (!zen3_or_zen4) GTEST_SKIP() << "no /proc/cpuinfo here";
  EXPECT_EQ(lastmile::cpu::software_prefetch_pays(), !*zen3_or_zen4);
}

TEST(CpuTuning, VectorDividePaysOnlyOnAmdFamily19h) {
  const std::optional<bool> zen3_or_zen4 = amd_family_19h();
  if (!zen3_or_zen4) GTEST_SKIP() << "no /proc/cpuinfo here";
  EXPECT_EQ(lastmile::cpu::vector_divide_pays(), *zen3_or_zen4);
}

}  // namespace
}  // namespace lastmile_test
