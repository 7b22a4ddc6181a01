// lastmile Python — any 2-D CPU array (DLPack or the buffer protocol) as a LogitsView, no copy.
#pragma once

#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>

#include <optional>
#include <string>

#include "lastmile/logits_view.hpp"

namespace lastmile::python {

using AnyArray = nanobind::ndarray<nanobind::ro>;

// float32, float16 and bfloat16 arrays as they are; a 16-bit integer array holds bfloat16 bit
// patterns when dtype is "bfloat16" (numpy has no bfloat16). Rows may be strided, the vocabulary
// axis must be contiguous. Raises ValueError naming the problem (dimensions, device, dtype,
// layout). The view borrows the array's memory: keep the array alive while it is used.
LogitsView logits_view(const AnyArray& logits, const std::optional<std::string>& dtype);

}  // namespace lastmile::python
