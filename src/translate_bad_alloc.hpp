// lastmile — std::bad_alloc at the API boundary becomes lastmile::Error(out_of_memory), so callers
// catch one exception family (STYLE §7).
#pragma once

#include <new>
#include <string>

#include "lastmile/error.hpp"

namespace lastmile::detail {

template <typename F>
decltype(auto) translating_bad_alloc(const char* what, F&& f) {
  try {
    return f();
  } catch (const std::bad_alloc&) {
    throw Error(ErrorCode::out_of_memory, std::string(what) + ": out of memory");
  }
}

}  // namespace lastmile::detail
