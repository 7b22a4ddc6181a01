// lastmile — version.
#pragma once

namespace lastmile {
inline constexpr const char* kVersion = "0.1.0";
}  // namespace lastmile
