// lastmile — input text echoed in an error message stays one printable line of bounded length.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace lastmile::io {

inline std::string clip(std::string_view text, size_t max_size = 60) {
  std::string out;
  for (unsigned char c : text) {
    if (out.size() >= max_size) return out + "...";
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  return out;
}

}  // namespace lastmile::io
