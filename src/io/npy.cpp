// lastmile — .npy reading: the header is parsed strictly, every size is checked against the file
// before any element is read, and anything unexpected is an InvalidArgument naming the file.
#include "io/npy.hpp"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "io/clip.hpp"
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

}  // namespace

NpyArray parse_npy(const std::string& name, const std::vector<unsigned char>& bytes) {
  parse_magic(name, bytes);
  const int major = bytes[6];
  size_t header_len = 0, offset = 0;
  if (major == 1) {
    header_len = bytes[8] | (size_t{bytes[9]} << 8);
    offset = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) fail(name, "truncated npy header");
    header_len =
        bytes[8] | (size_t{bytes[9]} << 8) | (size_t{bytes[10]} << 16) | (size_t{bytes[11]} << 24);
    offset = 12;
  } else {
    fail(name, "unsupported npy version " + std::to_string(major));
  }
  if (header_len > bytes.size() - offset) fail(name, "truncated npy header");
  const std::string header(bytes.begin() + offset, bytes.begin() + offset + header_len);
  NpyArray array;
  const std::string_view descr = after_key(name, header, "descr");
  const size_t descr_end = descr.size() > 1 ? descr.find('\'', 1) : std::string_view::npos;
  if (descr.empty() || descr.front() != '\'' || descr_end == std::string_view::npos)
    fail(name, "npy header has no valid 'descr' entry");
  array.descr = std::string(descr.substr(1, descr_end - 1));
  if (array.descr != "<f4" && array.descr != "<f2" && array.descr != "<u2")
    fail(name, "dtype must be <f4 (float32), <f2 (float16) or <u2 (bfloat16 bits), got " +
                   clip(array.descr));
  const std::string_view fortran_order = after_key(name, header, "fortran_order");
  if (fortran_order.substr(0, 5) != "False") fail(name, "fortran_order arrays are not supported");
  if (fortran_order.size() > 5 &&
      std::string_view(", }").find(fortran_order[5]) == std::string_view::npos)
    fail(name, "npy header: 'fortran_order' is not False or True, got " + clip(fortran_order));
  std::string shape;
  if (!parse_shape(after_key(name, header, "shape"), array.rows, array.cols, shape))
    fail(name, "expected 2 dimensions [num_rows, vocab_size], got shape (" + shape + ")");
  if (array.rows > INT32_MAX || array.cols > INT32_MAX)
    fail(name, "shape (" + shape + ") is too large: each dimension must be < 2^31");
  const size_t data_offset = offset + header_len;
  const size_t want =
      static_cast<size_t>(array.rows) * static_cast<size_t>(array.cols) * array.element_size();
  if (bytes.size() - data_offset != want)
    fail(name, "data holds " + std::to_string(bytes.size() - data_offset) + " bytes, shape (" +
                   std::to_string(array.rows) + ", " + std::to_string(array.cols) + ") of " +
                   array.descr + " needs " + std::to_string(want));
  array.data.assign(bytes.begin() + static_cast<std::ptrdiff_t>(data_offset), bytes.end());
  return array;
}

NpyArray read_npy(const std::string& path) {
  if (std::error_code error; std::filesystem::is_directory(path, error))
    fail(path, "a directory, not a file");
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open file");
  // Only a regular file has a size to read up to (a device such as /dev/zero never ends).
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) fail(path, "not a regular file");
  const uintmax_t size = std::filesystem::file_size(path, error);
  if (error) fail(path, "cannot read its size: " + error.message());
  // The magic first: a large file of something else is refused before it is read.
  std::vector<unsigned char> bytes(static_cast<size_t>(std::min<uintmax_t>(size, 10)));
  in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  if (!in) fail(path, "read failed");
  parse_magic(path, bytes);  // also refuses a file under 10 bytes
  bytes.resize(static_cast<size_t>(size));
  in.read(reinterpret_cast<char*>(bytes.data()) + 10, static_cast<std::streamsize>(size - 10));
  if (!in) fail(path, "read failed");
  return parse_npy(path, bytes);
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
