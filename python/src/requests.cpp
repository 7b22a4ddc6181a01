// lastmile Python — requests to C++ (see requests.hpp). Field names and neutral values are those
// of lastmile::RequestParams and ../shared/golden/README.md.
#include "requests.hpp"

#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <string_view>

#include "lastmile/error.hpp"

namespace nb = nanobind;

namespace lastmile::python {
namespace {

constexpr std::string_view kFields[] = {"temperature",
                                        "top_k",
                                        "top_p",
                                        "min_p",
                                        "presence_penalty",
                                        "frequency_penalty",
                                        "repetition_penalty",
                                        "logit_bias",
                                        "allowed_token_ids",
                                        "bad_words_token_ids",
                                        "min_tokens",
                                        "stop_token_ids",
                                        "seed",
                                        "logprobs",
                                        "logprob_token_ids",
                                        "prompt_token_ids",
                                        "output_token_ids",
                                        "spec_token_ids",
                                        "step"};

// A str as Python's ascii() shows it, quoted, cut after 60 characters: a lone surrogate has no
// UTF-8, and nb::cast to std::string would throw std::bad_cast (a RuntimeError naming nothing).
std::string ascii(nb::handle s) {
  constexpr size_t kShown = 60;
  const nb::object shown = nb::steal(PyObject_ASCII(s.ptr()));
  if (!shown.is_valid()) throw nb::python_error();
  std::string text = nb::cast<std::string>(shown);
  if (text.size() > kShown) text = text.substr(0, kShown) + "...";
  return text;
}

[[noreturn]] void type_error(const std::string& who, const char* field, const char* expected,
                             nb::handle got) {
  const std::string type = nb::cast<std::string>(nb::str(nb::handle(got.type()).attr("__name__")));
  throw nb::type_error((who + ": " + field + " must be " + expected + ", got " + type).c_str());
}

// The field, or None when absent.
class Fields {
 public:
  Fields(nb::handle request, const std::string& who) : request_(request) {
    is_dict_ = nb::isinstance<nb::dict>(request);
    if (!is_dict_) return;
    for (auto [key, value] : nb::borrow<nb::dict>(request)) {
      if (!nb::isinstance<nb::str>(key)) type_error(who, "a field name", "a str", key);
      // The key's cached UTF-8, no copy; ascii() only for the message (a lone surrogate has no
      // UTF-8).
      Py_ssize_t size = 0;
      const char* utf8 = PyUnicode_AsUTF8AndSize(key.ptr(), &size);
      if (utf8 == nullptr) PyErr_Clear();
      const std::string_view name =
          utf8 != nullptr ? std::string_view(utf8, static_cast<size_t>(size)) : std::string_view();
      if (utf8 == nullptr ||
          std::find(std::begin(kFields), std::end(kFields), name) == std::end(kFields))
        throw InvalidArgument(who + ": unknown field " + ascii(key));
    }
  }
  nb::object get(const char* name) const {
    if (is_dict_) {
      nb::dict d = nb::borrow<nb::dict>(request_);
      return d.contains(name) ? nb::borrow(d[name]) : nb::none();
    }
    return nb::getattr(request_, name, nb::none());
  }

 private:
  nb::handle request_;
  bool is_dict_ = false;
};

// What has __index__ or __float__ but is no int or number here: a bool, Python's or numpy's
// (numpy.bool_, named "bool" since numpy 2), or a 0-d tensor of bools (torch.tensor(True)), which
// would pass for 0 / 1; an array of one element (numpy's or torch's [2]); a complex scalar, whose
// __float__ drops the imaginary part.
bool poses_as_a_number(nb::handle value) {
  if (PyBool_Check(value.ptr())) return true;
  if (PyLong_CheckExact(value.ptr()) || PyFloat_CheckExact(value.ptr())) return false;  // common
  const std::string type =
      nb::cast<std::string>(nb::str(nb::handle(value.type()).attr("__name__")));
  if (type == "bool_" || type == "bool") return true;
  const nb::object ndim = nb::getattr(value, "ndim", nb::none());
  if (PyLong_Check(ndim.ptr()) && PyLong_AsLong(ndim.ptr()) != 0) return true;
  const nb::object dtype = nb::getattr(value, "dtype", nb::none());
  if (dtype.is_none()) return false;
  const std::string dtype_name = nb::cast<std::string>(nb::str(dtype));
  if (dtype_name == "torch.bool" || dtype_name == "bool") return true;
  const nb::object kind = nb::getattr(dtype, "kind", nb::none());              // numpy
  const nb::object is_complex = nb::getattr(dtype, "is_complex", nb::none());  // torch
  if (nb::isinstance<nb::str>(kind) && nb::cast<std::string>(kind) == "c") return true;
  const int complex_dtype = PyObject_IsTrue(is_complex.ptr());
  if (complex_dtype < 0) throw nb::python_error();
  return complex_dtype == 1;
}

// The value as a Python int (through __index__: numpy and torch integers too); bools refused.
nb::object python_int(nb::handle value, const std::string& who, const char* field) {
  if (poses_as_a_number(value) || !PyIndex_Check(value.ptr()))
    type_error(who, field, "an int", value);
  nb::object index = nb::steal(PyNumber_Index(value.ptr()));
  if (!index.is_valid()) {  // e.g. a numpy array where an int belongs
    PyErr_Clear();
    type_error(who, field, "an int", value);
  }
  return index;
}

// ", got N" for an int past 64 bits: its digits, or past 128 bits its width, as Python's
// _shown (str() refuses ints over 4300 digits).
std::string got_wide(nb::handle index) {
  const auto bits = nb::cast<size_t>(index.attr("bit_length")());
  if (bits <= 128) return ", got " + nb::cast<std::string>(nb::str(index));
  const bool negative = PyObject_RichCompareBool(index.ptr(), nb::int_(0).ptr(), Py_LT) == 1;
  return std::string(", got ") + (negative ? "a negative" : "an") + " integer of " +
         std::to_string(bits) + " bits";
}

int64_t as_integer(nb::handle value, const std::string& who, const char* field) {
  const nb::object index = python_int(value, who, field);
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow != 0)
    throw InvalidArgument(who + ": " + field + " does not fit 64 bits" + got_wide(index));
  return v;
}

int32_t as_int32(nb::handle value, const std::string& who, const char* field) {
  const int64_t v = as_integer(value, who, field);
  if (v < std::numeric_limits<int32_t>::min() || v > std::numeric_limits<int32_t>::max())
    throw InvalidArgument(who + ": " + field + " must fit int32, got " + std::to_string(v));
  return static_cast<int32_t>(v);
}

// vLLM: -1 means no seed. Other negative seeds are their 64-bit two's complement; seeds up to
// 2^64 - 1 are accepted (as the case reader does).
std::optional<uint64_t> as_seed(nb::handle value, const std::string& who) {
  const nb::object index = python_int(value, who, "seed");
  int overflow = 0;
  const long long v = PyLong_AsLongLongAndOverflow(index.ptr(), &overflow);
  if (overflow == 0) return v == -1 ? std::nullopt : std::optional<uint64_t>(v);
  const unsigned long long u = overflow > 0 ? PyLong_AsUnsignedLongLong(index.ptr()) : 0;
  if (overflow < 0 || (u == static_cast<unsigned long long>(-1) && PyErr_Occurred())) {
    PyErr_Clear();
    throw InvalidArgument(who + ": seed must fit 64 bits" + got_wide(index));
  }
  return u;
}

double as_double(nb::handle value, const std::string& who, const char* field) {
  if (poses_as_a_number(value) || !(PyFloat_Check(value.ptr()) || PyIndex_Check(value.ptr()) ||
                                    PyObject_HasAttrString(value.ptr(), "__float__")))
    type_error(who, field, "a number", value);
  const double v = PyFloat_AsDouble(value.ptr());
  if (v == -1.0 && PyErr_Occurred()) {
    if (PyErr_ExceptionMatches(PyExc_OverflowError)) {  // e.g. 10**400: no double holds it
      PyErr_Clear();
      throw InvalidArgument(who + ": " + field +
                            " must be a finite number, got an int too large "
                            "for a double");
    }
    // An array of two (numpy's TypeError, torch's ValueError), a meta tensor (RuntimeError):
    // __float__ refuses it. Anything else (MemoryError, RecursionError, KeyboardInterrupt, say an
    // AttributeError from a user's __float__) goes through as it is.
    const bool refused =
        !PyErr_ExceptionMatches(PyExc_RecursionError) &&
        (PyErr_ExceptionMatches(PyExc_TypeError) || PyErr_ExceptionMatches(PyExc_ValueError) ||
         PyErr_ExceptionMatches(PyExc_RuntimeError));
    if (!refused) throw nb::python_error();
    PyErr_Clear();
    type_error(who, field, "a number", value);
  }
  return v;
}

float as_float(nb::handle value, const std::string& who, const char* field) {
  return static_cast<float>(as_double(value, who, field));
}

void set_float(const Fields& f, const char* name, float& out, const std::string& who) {
  nb::object v = f.get(name);
  if (!v.is_none()) out = as_float(v, who, name);
}

// Greedy is decided on the double, as vLLM's Python float and the case reader do: 9.9999999e-06 <
// 1e-5 is greedy although it rounds to 1e-5f, which as a float is not.
void set_temperature(const Fields& f, float& out, const std::string& who) {
  nb::object v = f.get("temperature");
  if (v.is_none()) return;
  const double t = as_double(v, who, "temperature");
  out = t >= 0 && t < 1e-5 ? 0.0f : static_cast<float>(t);
}

void set_int32(const Fields& f, const char* name, int32_t& out, const std::string& who) {
  nb::object v = f.get(name);
  if (!v.is_none()) out = as_int32(v, who, name);
}

std::vector<TokenId> optional_ids(const Fields& f, const char* name, const std::string& who) {
  nb::object v = f.get(name);
  return v.is_none() ? std::vector<TokenId>{} : read_token_ids(v, who, name);
}

void check_token_id(int64_t v, const std::string& who, const char* field, size_t i) {
  if (v < 0 || v > std::numeric_limits<int32_t>::max())
    throw InvalidArgument(who + ": " + field + "[" + std::to_string(i) +
                          "] must be a token id in [0, 2^31), got " + std::to_string(v));
}

// A 1-D integer numpy array or CPU tensor, read in C++ without a Python object per element
// (a 32k-token prompt would otherwise cost milliseconds). False: not such an array.
bool read_integer_array(nb::handle ids, const std::string& who, const char* field,
                        std::vector<TokenId>& out) {
  nb::ndarray<nb::ro, nb::ndim<1>, nb::device::cpu> a;
  if (!nb::try_cast(ids, a, /*convert=*/false)) return false;
  const nb::dlpack::dtype t = a.dtype();
  const bool is_int = t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Int);
  const bool is_uint = t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::UInt);
  if (t.code == static_cast<uint8_t>(nb::dlpack::dtype_code::Bool))  // 0 / 1 are not its ids
    type_error(who, field, "token ids, not a bool mask", ids);
  if (!(is_int || is_uint) || (t.bits != 32 && t.bits != 64) || t.lanes != 1) return false;
  const size_t n = a.shape(0);
  const int64_t stride = a.stride(0);
  out.resize(n);
  const auto* base = static_cast<const char*>(a.data());
  for (size_t i = 0; i < n; ++i) {
    const char* at = base + static_cast<int64_t>(i) * stride * (t.bits / 8);
    int64_t v;
    if (t.bits == 32) {
      int32_t s;
      std::memcpy(&s, at, 4);
      v = is_uint ? static_cast<int64_t>(static_cast<uint32_t>(s)) : s;
    } else {
      uint64_t u;
      std::memcpy(&u, at, 8);
      if (is_uint && u > static_cast<uint64_t>(INT64_MAX))
        throw InvalidArgument(who + ": " + field + "[" + std::to_string(i) +
                              "] must be a token id in [0, 2^31), got " + std::to_string(u));
      v = static_cast<int64_t>(u);
    }
    check_token_id(v, who, field, i);
    out[i] = static_cast<TokenId>(v);
  }
  return true;
}

// Iterable, and not text, bytes (b"\x01\x02" iterates as the ids 1, 2) or a mapping (a dict
// iterates its keys): what a list of ids or of words may be.
bool is_sequence_of_items(nb::handle value) {
  if (PyList_CheckExact(value.ptr()) || PyTuple_CheckExact(value.ptr())) return true;  // common
  if (!PyObject_HasAttrString(value.ptr(), "__iter__") || nb::isinstance<nb::str>(value) ||
      PyBytes_Check(value.ptr()) || PyByteArray_Check(value.ptr()) || PyDict_Check(value.ptr()))
    return false;
  const nb::object mapping = nb::module_::import_("collections.abc").attr("Mapping");
  const int is_mapping = PyObject_IsInstance(value.ptr(), mapping.ptr());
  if (is_mapping < 0) throw nb::python_error();
  return is_mapping == 0;
}

// Room for a sequence's ids, as its length says: one past 2^31 - 1 ids (or past what len() can
// give) is refused, and the room is capped, since a __len__ may say more than it holds.
void reserve_for(nb::handle ids, const std::string& who, const char* field,
                 std::vector<TokenId>& out) {
  constexpr Py_ssize_t kMostIds = std::numeric_limits<int32_t>::max();
  constexpr Py_ssize_t kMostReserved = Py_ssize_t{1} << 20;
  const Py_ssize_t length = PyObject_Length(ids.ptr());
  if (length < 0) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw nb::python_error();
    PyErr_Clear();  // e.g. range(10**30)
  }
  if (length < 0 || length > kMostIds)
    throw InvalidArgument(who + ": " + field + " holds more than 2^31 - 1 token ids");
  out.reserve(static_cast<size_t>(std::min(length, kMostReserved)));
}

}  // namespace

std::vector<TokenId> read_token_ids(nb::handle ids, const std::string& who, const char* field) {
  if (!is_sequence_of_items(ids)) type_error(who, field, "a sequence of ints", ids);
  std::vector<TokenId> out;
  if (read_integer_array(ids, who, field, out)) return out;
  try {
    if (PySequence_Check(ids.ptr())) reserve_for(ids, who, field, out);
    size_t i = 0;
    for (nb::handle item : nb::iter(ids)) {
      const std::string at = std::string(field) + "[" + std::to_string(i++) + "]";
      const int64_t v = as_integer(item, who, at.c_str());
      check_token_id(v, who, field, i - 1);
      out.push_back(static_cast<TokenId>(v));
    }
  } catch (const nb::python_error& e) {  // has __iter__ but no length or items: a 0-d array
    if (!e.matches(PyExc_TypeError)) throw;
    type_error(who, field, "a sequence of ints", ids);
  }
  return out;
}

void read_request(nb::handle request, const std::string& who, BatchRequest& out,
                  std::vector<TokenId>& prompt, std::vector<TokenId>& output,
                  std::vector<TokenId>& spec) {
  const Fields f(request, who);
  RequestParams& p = out.params;
  set_temperature(f, p.temperature, who);
  set_int32(f, "top_k", p.top_k, who);
  set_float(f, "top_p", p.top_p, who);
  set_float(f, "min_p", p.min_p, who);
  set_float(f, "presence_penalty", p.presence_penalty, who);
  set_float(f, "frequency_penalty", p.frequency_penalty, who);
  set_float(f, "repetition_penalty", p.repetition_penalty, who);
  set_int32(f, "min_tokens", p.min_tokens, who);
  if (nb::object bias = f.get("logit_bias"); !bias.is_none()) {
    if (!nb::isinstance<nb::dict>(bias))
      type_error(who, "logit_bias", "a dict {token_id: bias}", bias);
    for (auto [key, value] : nb::borrow<nb::dict>(bias)) {
      // Keys may be ints or decimal strings (JSON objects, as in the golden cases).
      nb::object id = nb::borrow(key);
      if (nb::isinstance<nb::str>(key)) {
        try {
          id = nb::int_(key);
        } catch (const nb::python_error&) {
          throw InvalidArgument(who +
                                ": logit_bias keys must be token ids (ints or decimal "
                                "strings), got " +
                                ascii(key));
        }
      }
      const int64_t token = as_integer(id, who, "logit_bias key");
      if (token < 0 || token > std::numeric_limits<int32_t>::max())
        throw InvalidArgument(who + ": logit_bias key must be a token id in [0, 2^31), got " +
                              std::to_string(token));
      p.logit_bias.emplace_back(static_cast<TokenId>(token),
                                as_float(value, who, "logit_bias value"));
    }
    // Keys that int() reads alike ({3: ..., "3": ...}, "03" and "+3") would add both biases,
    // where vLLM's from_optional keeps one: refused.
    std::vector<TokenId> ids(p.logit_bias.size());
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = p.logit_bias[i].first;
    std::sort(ids.begin(), ids.end());
    if (const auto twice = std::adjacent_find(ids.begin(), ids.end()); twice != ids.end())
      throw InvalidArgument(who + ": logit_bias names token_id " + std::to_string(*twice) +
                            " twice (keys that int() reads alike)");
  }
  if (nb::object allowed = f.get("allowed_token_ids"); !allowed.is_none())
    p.allowed_token_ids = read_token_ids(allowed, who, "allowed_token_ids");
  if (nb::object words = f.get("bad_words_token_ids"); !words.is_none()) {
    if (!is_sequence_of_items(words))
      type_error(who, "bad_words_token_ids", "a list of token-id lists", words);
    size_t i = 0;
    for (nb::handle word : nb::iter(words)) {  // each named by its index: [i][j] in messages
      const std::string field = "bad_words_token_ids[" + std::to_string(i++) + "]";
      p.bad_words_token_ids.push_back(read_token_ids(word, who, field.c_str()));
    }
  }
  p.stop_token_ids = optional_ids(f, "stop_token_ids", who);
  if (nb::object seed = f.get("seed"); !seed.is_none()) p.seed = as_seed(seed, who);
  if (nb::object n = f.get("logprobs"); !n.is_none()) p.logprobs = as_int32(n, who, "logprobs");
  if (nb::object ids = f.get("logprob_token_ids"); !ids.is_none())
    p.logprob_token_ids = read_token_ids(ids, who, "logprob_token_ids");
  prompt = optional_ids(f, "prompt_token_ids", who);
  output = optional_ids(f, "output_token_ids", who);
  spec = optional_ids(f, "spec_token_ids", who);
  out.prompt_token_ids = prompt;
  out.output_token_ids = output;
  out.spec_token_ids = spec;
  if (nb::object step = f.get("step"); !step.is_none()) {
    const int64_t v = as_integer(step, who, "step");
    if (v < 0) throw InvalidArgument(who + ": step must be >= 0, got " + std::to_string(v));
    out.step = static_cast<uint64_t>(v);
  }
}

void read_requests(nb::handle requests, Batch& batch, Histories& histories) {
  if (nb::isinstance<nb::str>(requests) || nb::isinstance<nb::dict>(requests) ||
      !PySequence_Check(requests.ptr()))
    type_error("sample", "requests", "a list of SamplingParams or dicts", requests);
  const size_t n = nb::len(requests);
  batch.requests.assign(n, {});
  histories.prompt.assign(n, {});
  histories.output.assign(n, {});
  histories.spec.assign(n, {});
  for (size_t i = 0; i < n; ++i)
    read_request(nb::borrow(requests)[i], "request " + std::to_string(i), batch.requests[i],
                 histories.prompt[i], histories.output[i], histories.spec[i]);
}

}  // namespace lastmile::python
