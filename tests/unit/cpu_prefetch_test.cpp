// software_prefetch_pays (cpu/prefetch.cpp): false exactly on AMD family 19h, read from CPUID.
// The kernel's own account, /proc/cpuinfo, is the independent witness where there is one.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "cpu/prefetch.hpp"

namespace lastmile_test {
namespace {

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

TEST(CpuPrefetch, PaysEverywhereButAmdFamily19h) {
  const std::string vendor = cpuinfo_field("vendor_id");
  const std::string family = cpuinfo_field("cpu family");
  if (vendor.empty() || family.empty()) GTEST_SKIP() << "no x86 /proc/cpuinfo here";
  const bool zen3_or_zen4 = vendor == "AuthenticAMD" && std::stoi(family) == 0x19;
  EXPECT_EQ(lastmile::cpu::software_prefetch_pays(), !zen3_or_zen4)
      << vendor << ", family " << family;
}

}  // namespace
}  // namespace lastmile_test
