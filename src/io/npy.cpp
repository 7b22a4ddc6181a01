// lastmile — .npy reading: the header is parsed strictly, every size is checked against the file
// before any element is read, and anything unexpected is an InvalidArgument naming the file.
#include "io/npy.hpp"

#include <algorithm>
#include <cctype>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "io/clip.hpp"
#include "io/input_file.hpp"
#include "lastmile/error.hpp"

namespace lastmile::io {
namespace {

[[noreturn]] void fail(const std::string& name, const std::string& what) {
  throw InvalidArgument(ErrorCode::invalid_logits, name + ": " + what);
}

// The header dict's three values as written (a string keeps its quotes, a tuple its
// parentheses). The header is read as the dict literal it is, key by key, so that text inside a
// value is never taken for a key (a search for "'descr':" was).
struct HeaderEntries {
  std::string_view descr, fortran_order, shape;
};

// numpy's header: {'key': value, ...}, values a quoted string, True / False, or a tuple; numpy
// writes exactly the keys descr, fortran_order and shape and refuses any other, as here.
HeaderEntries parse_entries(const std::string& name, std::string_view header) {
  auto skip_spaces = [&] {
    while (!header.empty() && (header.front() == ' ' || header.front() == '\n'))
      header.remove_prefix(1);
  };
  // The next token: a quoted string, a parenthesised tuple, or a word; empty if none.
  auto token = [&]() -> std::string_view {
    if (header.empty()) return {};
    size_t end = 0;
    if (header.front() == '\'' || header.front() == '"') {
      end = header.find(header.front(), 1);
      end = end == std::string_view::npos ? 0 : end + 1;
    } else if (header.front() == '(') {
      end = header.find(')');
      end = end == std::string_view::npos ? 0 : end + 1;
    } else {
      while (end < header.size() && std::isalnum(static_cast<unsigned char>(header[end]))) ++end;
    }
    const std::string_view t = header.substr(0, end);
    header.remove_prefix(end);
    return t;
  };
  auto expect = [&](char c, const char* where) {
    skip_spaces();
    if (header.empty() || header.front() != c)
      fail(name, std::string("npy header: expected '") + c + "' " + where);
    header.remove_prefix(1);
  };
  HeaderEntries entries;
  expect('{', "at its start");
  for (;;) {
    skip_spaces();
    if (!header.empty() && header.front() == '}') break;
    const std::string_view key = token();
    if (key.size() < 2 || (key.front() != '\'' && key.front() != '"'))
      fail(name, "npy header: expected a quoted key, got " + clip(header.substr(0, 20)));
    const std::string_view unquoted = key.substr(1, key.size() - 2);
    std::string_view* const value = unquoted == "descr"           ? &entries.descr
                                    : unquoted == "fortran_order" ? &entries.fortran_order
                                    : unquoted == "shape"         ? &entries.shape
                                                                  : nullptr;
    if (value == nullptr) fail(name, "npy header: unexpected key " + clip(key));
    if (!value->empty()) fail(name, "npy header: key " + clip(key) + " appears twice");
    expect(':', "after a key");
    skip_spaces();
    *value = token();
    if (value->empty()) fail(name, "npy header: no value for key " + clip(key));
    skip_spaces();
    if (!header.empty() && header.front() == ',')
      header.remove_prefix(1);
    else if (header.empty() || header.front() != '}')
      fail(name, "npy header: expected ',' or '}' after the value of " + clip(key));
  }
  header.remove_prefix(1);
  skip_spaces();
  if (!header.empty()) fail(name, "npy header: text after the dict");
  for (const auto& [value, key] :
       {std::pair{entries.descr, "descr"}, std::pair{entries.fortran_order, "fortran_order"},
        std::pair{entries.shape, "shape"}})
    if (value.empty()) fail(name, std::string("npy header has no '") + key + "' entry");
  return entries;
}

// How a header's shape parses: `(rows, cols)` or `(rows, cols,)` is two dimensions; a tuple of
// plain non-negative integers is a shape of another rank; anything else (a sign, a hex or float
// literal, an empty entry) is not a shape, which says so rather than naming its rank.
enum class ShapeText { two_dimensions, other_rank, not_integers };

ShapeText parse_shape(std::string_view text, int64_t& rows, int64_t& cols, std::string& shown) {
  const size_t close = text.find(')');
  if (text.empty() || text.front() != '(' || close == std::string_view::npos)
    return ShapeText::not_integers;
  shown = clip(text.substr(1, close - 1));
  int64_t dims[2] = {0, 0};
  int count = 0;
  std::string_view body = text.substr(1, close - 1);
  while (!body.empty()) {
    const size_t comma = body.find(',');
    std::string_view entry = body.substr(0, comma);
    body.remove_prefix(comma == std::string_view::npos ? body.size() : comma + 1);
    while (!entry.empty() && entry.front() == ' ') entry.remove_prefix(1);
    while (!entry.empty() && entry.back() == ' ') entry.remove_suffix(1);
    if (entry.empty()) {  // only `(n,)` and `(a, b,)` end in a comma
      if (comma == std::string_view::npos && count > 0) break;
      return ShapeText::not_integers;
    }
    int64_t value = 0;
    for (const char c : entry) {
      if (c < '0' || c > '9') return ShapeText::not_integers;
      value = std::min<int64_t>(value * 10 + (c - '0'), int64_t{1} << 40);  // past 2^31: too large
    }
    if (count < 2) dims[count] = value;
    ++count;
  }
  rows = dims[0];
  cols = dims[1];
  return count == 2 ? ShapeText::two_dimensions : ShapeText::other_rank;
}

// The .npy magic and a version byte's room (the first 10 bytes).
void parse_magic(const std::string& name, const std::vector<unsigned char>& bytes) {
  static const unsigned char kMagic[] = {0x93, 'N', 'U', 'M', 'P', 'Y'};
  if (bytes.size() < 10 || std::memcmp(bytes.data(), kMagic, 6) != 0)
    fail(name, "not a .npy file (bad magic)");
}

// The preamble's length (10 or 12 bytes) and the header's, from the first bytes (at least 10:
// parse_magic passed).
std::pair<size_t, size_t> preamble(const std::string& name,
                                   const std::vector<unsigned char>& bytes) {
  const int major = bytes[6];
  if (major == 1) return {10, bytes[8] | (size_t{bytes[9]} << 8)};
  if (major != 2 && major != 3) fail(name, "unsupported npy version " + std::to_string(major));
  if (bytes.size() < 12) fail(name, "truncated npy header");
  return {12, bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) |
                  (size_t{bytes[11]} << 24)};
}

// The array's descr and shape from `bytes`, the preamble and the whole header at least; returns
// the data's offset. No data is read.
size_t parse_header(const std::string& name, const std::vector<unsigned char>& bytes,
                    NpyArray& array) {
  parse_magic(name, bytes);
  const auto [offset, header_len] = preamble(name, bytes);
  if (header_len > bytes.size() - offset) fail(name, "truncated npy header");
  const std::string header(bytes.begin() + static_cast<std::ptrdiff_t>(offset),
                           bytes.begin() + static_cast<std::ptrdiff_t>(offset + header_len));
  const HeaderEntries entries = parse_entries(name, header);
  const std::string_view descr = entries.descr;
  if (descr.size() < 2 || (descr.front() != '\'' && descr.front() != '"'))
    fail(name, "npy header has no valid 'descr' entry");
  array.descr = std::string(descr.substr(1, descr.size() - 2));
  if (array.descr != "<f4" && array.descr != "<f2" && array.descr != "<u2")
    fail(name, "dtype must be <f4 (float32), <f2 (float16) or <u2 (bfloat16 bits), got " +
                   clip(array.descr));
  const std::string_view fortran_order = entries.fortran_order;
  if (fortran_order == "True") fail(name, "fortran_order arrays are not supported");
  if (fortran_order != "False")
    fail(name, "npy header: 'fortran_order' must be False or True, got " + clip(fortran_order));
  std::string shape;
  switch (parse_shape(entries.shape, array.rows, array.cols, shape)) {
    case ShapeText::not_integers:
      fail(name, "npy header: 'shape' must be a tuple of non-negative integers, got " +
                     clip(entries.shape));
    case ShapeText::other_rank:
      fail(name, "expected 2 dimensions [num_rows, vocab_size], got shape (" + shape + ")");
    case ShapeText::two_dimensions:
      break;
  }
  if (array.rows > INT32_MAX || array.cols > INT32_MAX)
    fail(name, "shape (" + shape + ") is too large: each dimension must be < 2^31");
  return offset + header_len;
}

// Fails unless `have` bytes of data are what the header's shape and dtype need.
void check_data_size(const std::string& name, const NpyArray& array, size_t have) {
  const size_t want =
      static_cast<size_t>(array.rows) * static_cast<size_t>(array.cols) * array.element_size();
  if (have != want)
    fail(name, "data holds " + std::to_string(have) + " bytes, shape (" +
                   std::to_string(array.rows) + ", " + std::to_string(array.cols) + ") of " +
                   array.descr + " needs " + std::to_string(want));
}

// Reads count bytes into `at`, or fails naming how many came.
void read_exactly(const std::string& path, std::ifstream& in, unsigned char* at, size_t count) {
  in.read(reinterpret_cast<char*>(at), static_cast<std::streamsize>(count));
  if (static_cast<size_t>(in.gcount()) != count)
    fail(path, "read " + std::to_string(in.gcount()) + " of " + std::to_string(count) +
                   " bytes (the file changed while read?)");
}

}  // namespace

NpyArray parse_npy(const std::string& name, const std::vector<unsigned char>& bytes) {
  NpyArray array;
  const size_t data_offset = parse_header(name, bytes, array);
  check_data_size(name, array, bytes.size() - data_offset);
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_offset), bytes.end());
  return array;
}

NpyArray read_npy(const std::string& path) {
  if (const char* why = unreadable_as_file(path)) fail(path, why);
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  std::error_code error;
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) fail(path, "cannot read its size: " + error.message());
  // The preamble and header first, then exactly the data they declare: a large file of something
  // else, or of another shape, is refused before it is read.
  std::vector<unsigned char> head(static_cast<size_t>(std::min<uintmax_t>(size, 12)));
  read_exactly(path, in, head.data(), head.size());
  parse_magic(path, head);  // also refuses a file under 10 bytes
  const auto [offset, header_len] = preamble(path, head);
  if (offset + header_len > size) fail(path, "truncated npy header");
  head.resize(offset + header_len);
  if (head.size() > 12) read_exactly(path, in, head.data() + 12, head.size() - 12);
  NpyArray array;
  const size_t data_offset = parse_header(path, head, array);
  check_data_size(path, array, static_cast<size_t>(size) - data_offset);
  array.data.resize(static_cast<size_t>(size) - data_offset);
  read_exactly(path, in, array.data.data(), array.data.size());
  return array;
}

void write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols) {
  std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (" +
                       std::to_string(rows) + ", " + std::to_string(cols) + "), }";
  const size_t unpadded = 10 + header.size() + 1;
  header.append((64 - unpadded % 64) % 64, ' ');
  header.push_back('\n');
  std::ofstream out(path, std::ios::binary);
  if (!out) throw Error(ErrorCode::internal, path + ": cannot open file for writing");
  const unsigned char preamble[] = {0x93,
                                    'N',
                                    'U',
                                    'M',
                                    'P',
                                    'Y',
                                    1,
                                    0,
                                    static_cast<unsigned char>(header.size() & 0xff),
                                    static_cast<unsigned char>(header.size() >> 8)};
  out.write(reinterpret_cast<const char*>(preamble), sizeof preamble);
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  out.write(reinterpret_cast<const char*>(data),
            static_cast<std::streamsize>(rows * cols * sizeof(float)));
  out.close();  // a full disk shows at the flush: checked after it
  if (!out) throw Error(ErrorCode::internal, path + ": write failed");
}

}  // namespace lastmile::io
