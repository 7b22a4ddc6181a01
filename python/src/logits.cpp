// lastmile Python — arrays to LogitsView (see logits.hpp).
#include "logits.hpp"

namespace nb = nanobind;

namespace lastmile::python {
namespace {

using nb::dlpack::dtype_code;

bool is(const nb::dlpack::dtype& t, dtype_code code, int bits) {
  return t.code == static_cast<uint8_t>(code) && t.bits == bits && t.lanes == 1;
}

std::string describe(const nb::dlpack::dtype& t) {
  static const char* const kCodes[] = {"int",    "uint",    "float", "opaque handle",
                                       "bfloat", "complex", "bool"};
  const std::string code = t.code < 7 ? kCodes[t.code] : "code " + std::to_string(t.code);
  return code + std::to_string(t.bits);
}

DType element_type(const nb::dlpack::dtype& t, const std::optional<std::string>& dtype) {
  if (dtype && *dtype != "float32" && *dtype != "float16" && *dtype != "bfloat16")
    throw nb::value_error(
        ("logits: dtype must be 'float32', 'float16' or 'bfloat16', got '" + *dtype + "'").c_str());
  const bool bits16 = is(t, dtype_code::UInt, 16) || is(t, dtype_code::Int, 16);
  if (dtype == "bfloat16" && bits16) return DType::bf16;
  DType found;
  if (is(t, dtype_code::Float, 32))
    found = DType::f32;
  else if (is(t, dtype_code::Float, 16))
    found = DType::f16;
  else if (is(t, dtype_code::Bfloat, 16))
    found = DType::bf16;
  else
    throw nb::value_error(("logits: dtype must be float32, float16 or bfloat16 (or 16-bit "
                           "integers with dtype='bfloat16'), got " +
                           describe(t))
                              .c_str());
  static const char* const kNames[] = {"float32", "float16", "bfloat16"};
  if (dtype && *dtype != kNames[static_cast<int>(found)])
    throw nb::value_error(
        ("logits: dtype='" + *dtype + "' but the array holds " + kNames[static_cast<int>(found)])
            .c_str());
  return found;
}

}  // namespace

LogitsView logits_view(const AnyArray& logits, const std::optional<std::string>& dtype) {
  if (logits.ndim() != 2)
    throw nb::value_error(("logits: expected 2 dimensions [num_rows, vocab_size], got " +
                           std::to_string(logits.ndim()))
                              .c_str());
  if (logits.device_type() != nb::device::cpu::value)
    throw nb::value_error(("logits: must be in CPU memory, got DLPack device type " +
                           std::to_string(logits.device_type()) + " (move it with .cpu() first)")
                              .c_str());
  const DType type = element_type(logits.dtype(), dtype);
  const auto rows = static_cast<int64_t>(logits.shape(0));
  const auto vocab = static_cast<int64_t>(logits.shape(1));
  if (vocab > 1 && logits.stride(1) != 1)
    throw nb::value_error(
        ("logits: the vocabulary axis must be contiguous (stride 1), got stride " +
         std::to_string(logits.stride(1)))
            .c_str());
  const int64_t stride = rows > 1 ? logits.stride(0) : vocab;
  if (stride < vocab)
    throw nb::value_error(("logits: rows must not overlap (row stride >= vocab_size " +
                           std::to_string(vocab) + "), got " + std::to_string(stride))
                              .c_str());
  return {logits.data(), rows, vocab, stride, type};
}

}  // namespace lastmile::python
