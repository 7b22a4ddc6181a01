// A ParallelFor that runs a row's chunks last to first, as threads might finish them: a kernel
// split in fixed chunks must give the same result as in order.
#pragma once

#include <cstdint>

#include "backend.hpp"

namespace lastmile_test {

inline void run_backwards(void*, int64_t count, void* task, void (*call)(void*, int64_t)) {
  for (int64_t i = count - 1; i >= 0; --i) call(task, i);
}
inline const lastmile::detail::ParallelFor kBackwards{nullptr, &run_backwards};

}  // namespace lastmile_test
