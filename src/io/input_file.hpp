// lastmile — whether a path can be read as an input file, checked before it is opened.
#pragma once

#include <filesystem>
#include <string>

namespace lastmile::io {

// Why `path` cannot be read as an input file, or nullptr (also for a missing path: opening it
// fails, and says so). Checked before opening: a directory opens, and reading it then fails
// without naming the path; a FIFO's open blocks; a device (/dev/zero) never ends.
inline const char* unreadable_as_file(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (std::filesystem::is_directory(status)) return "a directory, not a file";
  if (std::filesystem::exists(status) && !std::filesystem::is_regular_file(status))
    return "not a regular file";
  return nullptr;
}

}  // namespace lastmile::io
