// lastmile tests — the unit tests on one Highway target instead of the best one. The cpu
// backend's kernels are dispatched at run time, so this machine runs only its best target unless
// told: with LASTMILE_TEST_HWY_TARGET naming another (AVX2, SSE4, SSSE3, SCALAR; ctest's
// unit_on_<target> tests), every test runs on that one, narrow-vector paths included. A target
// this CPU lacks skips them all.
#include <gtest/gtest.h>
#include <hwy/targets.h>

#include <cstdint>
#include <cstdlib>
#include <string>

namespace {

int64_t target_named(const std::string& name) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets())
    if (name == hwy::TargetName(target)) return target;
  return 0;
}

class HighwayTarget : public ::testing::Environment {
 public:
  void SetUp() override {
    const char* name = std::getenv("LASTMILE_TEST_HWY_TARGET");
    if (name == nullptr || *name == '\0') return;
    const int64_t target = target_named(name);
    if (target == 0) GTEST_SKIP() << name << " is not compiled in, or this CPU lacks it";
    hwy::SetSupportedTargetsForTest(target);
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
    std::printf("Highway target: %s\n", hwy::TargetName(target));
  }
  void TearDown() override { hwy::SetSupportedTargetsForTest(0); }
};

const auto* const kEnvironment = ::testing::AddGlobalTestEnvironment(new HighwayTarget);

}  // namespace
