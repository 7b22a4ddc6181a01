// lastmile — the CPU backend's draw straight from a caller's row (Backend::draw_from_input).
#pragma once

#include "backend.hpp"

namespace lastmile::detail::cpu_selection {

TokenId draw_from_caller_row(const void* src, DType dtype, int64_t n, const DrawParams& params,
                             double u, SortScratch scratch, const ParallelFor& parallel);

}  // namespace lastmile::detail::cpu_selection
