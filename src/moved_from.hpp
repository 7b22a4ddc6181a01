// lastmile — the public classes' pimpl, checked: a moved-from Sampler or RequestBatch holds no
// implementation, and a call on it throws instead of dereferencing null.
#pragma once

#include <memory>
#include <string>

#include "lastmile/error.hpp"

namespace lastmile::detail {

// *impl, or InvalidArgument naming `type` when it was moved from.
template <class Impl>
Impl& live(const std::unique_ptr<Impl>& impl, const char* type) {
  if (impl == nullptr) throw InvalidArgument(std::string(type) + ": used after being moved from");
  return *impl;
}

}  // namespace lastmile::detail
