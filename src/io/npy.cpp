// lastmile — .npy reading: the header is parsed strictly, every size is checked against the file
// before any element is read, and anything unexpected is an InvalidArgument naming the file.
#include "io/npy.hpp"

#include <algorithm>
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

// The text after `'key':` in the header dict, spaces skipped; fails when the key is absent.
std::string_view after_key(const std::string& name, std::string_view header, std::string_view key) {
  std::string quoted(1, '\'');
  quoted.append(key).push_back('\'');
  const size_t at = header.find(quoted);
  if (at == std::string_view::npos)
    fail(name, "npy header has no '" + std::string(key) + "' entry");
  std::string_view rest = header.substr(at + quoted.size());
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  if (rest.empty() || rest.front() != ':')
    fail(name, "npy header: no ':' after '" + std::string(key) + "'");
  rest.remove_prefix(1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return rest;
}

// Parses `(rows, cols)` or `(rows, cols,)`; anything else is not a 2-D shape.
bool parse_shape(std::string_view text, int64_t& rows, int64_t& cols, std::string& shown) {
  const size_t close = text.find(')');
  if (text.empty() || text.front() != '(' || close == std::string_view::npos) return false;
  shown = clip(text.substr(1, close - 1));
  int64_t dims[2] = {0, 0};
  int count = 0;
  std::string_view body = text.substr(1, close - 1);
  while (!body.empty()) {
    while (!body.empty() && body.front() == ' ') body.remove_prefix(1);
    if (body.empty()) break;
    size_t digits = 0;
    int64_t value = 0;
    while (digits < body.size() && body[digits] >= '0' && body[digits] <= '9' && digits < 12)
      value = value * 10 + (body[digits++] - '0');
    if (digits == 0 || count == 2) return false;
    dims[count++] = value;
    body.remove_prefix(digits);
    while (!body.empty() && body.front() == ' ') body.remove_prefix(1);
    if (!body.empty() && body.front() != ',') return false;
    if (!body.empty()) body.remove_prefix(1);
  }
  rows = dims[0];
  cols = dims[1];
  return count == 2;
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
  const std::string_view descr = after_key(name, header, "descr");
  const size_t descr_end = descr.size() > 1 ? descr.find('\'', 1) : std::string_view::npos;
  if (descr.empty() || descr.front() != '\'' || descr_end == std::string_view::npos)
    fail(name, "npy header has no valid 'descr' entry");
  array.descr = std::string(descr.substr(1, descr_end - 1));
  if (array.descr != "<f4" && array.descr != "<f2" && array.descr != "<u2")
    fail(name, "dtype must be <f4 (float32), <f2 (float16) or <u2 (bfloat16 bits), got " +
                   clip(array.descr));
  std::string_view fortran_order = after_key(name, header, "fortran_order");
  const size_t value_end = std::min(fortran_order.find_first_of(",}"), fortran_order.size());
  fortran_order = fortran_order.substr(0, value_end);
  while (!fortran_order.empty() && fortran_order.back() == ' ') fortran_order.remove_suffix(1);
  if (fortran_order == "True") fail(name, "fortran_order arrays are not supported");
  if (fortran_order != "False")
    fail(name, "npy header: 'fortran_order' must be False or True, got " + clip(fortran_order));
  std::string shape;
  if (!parse_shape(after_key(name, header, "shape"), array.rows, array.cols, shape))
    fail(name, "expected 2 dimensions [num_rows, vocab_size], got shape (" + shape + ")");
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
