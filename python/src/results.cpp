// lastmile Python — SamplerOutput to numpy (see results.hpp).
#include "results.hpp"

#include <nanobind/ndarray.h>

#include <algorithm>
#include <cstdint>
#include <span>

namespace nb = nanobind;

namespace lastmile::python {
namespace {

// A new numpy array owning a copy of `values`, shaped [rows] or [rows, width].
template <typename T, typename Source = T>
nb::object numpy_copy(std::span<const Source> values, size_t rows, size_t width = 0) {
  T* data = new T[std::max<size_t>(values.size(), 1)];
  std::copy(values.begin(), values.end(), data);
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  const size_t shape[2] = {rows, width};
  return nb::ndarray<nb::numpy, T>(data, width == 0 ? 1 : 2, shape, owner).cast();
}

}  // namespace

nb::dict to_python(const SamplerOutput& o, int64_t vocab_size) {
  const auto rows = static_cast<size_t>(o.num_rows);
  nb::dict out;
  out["sampled_token_ids"] = numpy_copy<int32_t>(o.sampled_token_ids, rows);
  out["logprobs"] = nb::none();
  if (o.logprobs.present()) {
    const auto width = static_cast<size_t>(o.logprobs.width);
    out["logprobs"] = nb::make_tuple(numpy_copy<int32_t>(o.logprobs.token_ids, rows, width),
                                     numpy_copy<float>(o.logprobs.logprobs, rows, width),
                                     numpy_copy<int64_t>(o.logprobs.ranks, rows));
  }
  out["token_logprobs"] = nb::none();
  if (o.token_logprobs.present()) {
    const TokenLogprobsBlock& t = o.token_logprobs;
    const auto width = static_cast<size_t>(t.width);
    out["token_logprobs"] = nb::make_tuple(
        numpy_copy<int32_t>(t.token_ids, rows, width), numpy_copy<float>(t.logprobs, rows, width),
        numpy_copy<bool, uint8_t>(t.valid, rows, width), numpy_copy<int64_t>(t.ranks, rows));
  }
  out["full_logprobs"] = nb::none();
  if (o.has_full_logprobs)
    out["full_logprobs"] =
        numpy_copy<float>(o.full_logprobs, rows, static_cast<size_t>(vocab_size));
  return out;
}

}  // namespace lastmile::python
