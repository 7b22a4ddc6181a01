// lastmile — a read-only view of a logits matrix [num_rows, vocab_size] owned by the caller.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lastmile {

enum class DType { f32, f16, bf16 };

// Row r starts at `data + r * row_stride` elements of `dtype`; row_stride >= vocab_size. data is
// aligned to the element's size (4 bytes for f32, 2 for f16 / bf16). The sampler reads the logits
// and never writes them.
struct LogitsView {
  const void* data = nullptr;
  int64_t num_rows = 0;
  int64_t vocab_size = 0;
  int64_t row_stride = 0;  // in elements; 0 means vocab_size (rows packed)
  DType dtype = DType::f32;

  static LogitsView f32(const float* data, int64_t num_rows, int64_t vocab_size) {
    return {data, num_rows, vocab_size, vocab_size, DType::f32};
  }
  // f16 / bf16 views take the raw 16-bit patterns.
  static LogitsView f16(const uint16_t* data, int64_t num_rows, int64_t vocab_size) {
    return {data, num_rows, vocab_size, vocab_size, DType::f16};
  }
  static LogitsView bf16(const uint16_t* data, int64_t num_rows, int64_t vocab_size) {
    return {data, num_rows, vocab_size, vocab_size, DType::bf16};
  }
};

}  // namespace lastmile
