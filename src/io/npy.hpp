// lastmile — reading and writing 2-D .npy arrays (NumPy format 1.0-3.0, little-endian, C order).
// For the CLI and tests; not part of the library.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lastmile::io {

struct NpyArray {
  std::string descr;  // "<f4", "<f2" or "<u2"
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<unsigned char> data;  // rows * cols elements, little-endian

  size_t element_size() const { return descr == "<f4" ? 4 : 2; }
};

// Throws lastmile::InvalidArgument naming the file and what is wrong with it.
NpyArray read_npy(const std::string& path);
NpyArray parse_npy(const std::string& name, const std::vector<unsigned char>& bytes);
void write_npy_f32(const std::string& path, const float* data, int64_t rows, int64_t cols);

}  // namespace lastmile::io
