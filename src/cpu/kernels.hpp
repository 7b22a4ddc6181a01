// lastmile — CPU kernels (Highway, runtime dispatch). Plain functions, no vector types here.
// The fast CPU backend (issue #3) grows from this file; today it holds the read roofline.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lastmile::cpu {

// Largest value of x[0, n). Requires n > 0 and NaN-free input. Exact on every target: the
// maximum does not depend on evaluation order. One streaming read: the memory roofline.
float row_max(const float* x, size_t n);

// Largest 16-bit pattern of x[0, n) (unsigned): the same streaming read over fp16 / bf16 rows.
uint16_t row_max_bits16(const uint16_t* x, size_t n);

// The Highway target dispatch picks on this machine, e.g. "AVX3".
const char* dispatch_target_name();

}  // namespace lastmile::cpu
