// lastmile — ErrorCode to lastmile_status, 1:1 (STYLE §7), and the two ways a message reaches C.
#include "capi/handle_error.hpp"

#include <algorithm>
#include <cstring>

namespace lastmile::capi {

lastmile_status status_of(ErrorCode code) {
  switch (code) {
    case ErrorCode::invalid_argument:
      return LASTMILE_STATUS_INVALID_ARGUMENT;
    case ErrorCode::invalid_logits:
      return LASTMILE_STATUS_INVALID_LOGITS;
    case ErrorCode::unsupported:
      return LASTMILE_STATUS_UNSUPPORTED;
    case ErrorCode::out_of_memory:
      return LASTMILE_STATUS_OUT_OF_MEMORY;
    case ErrorCode::internal:
      break;
  }
  return LASTMILE_STATUS_INTERNAL;
}

lastmile_status store(std::string& last_error, lastmile_status status,
                      const char* message) noexcept {
  try {
    last_error = message;
  } catch (...) {
    last_error = "out of memory";  // fits the small-string buffer: cannot throw
  }
  return status;
}

void write_error(char* buffer, size_t size, const char* message) noexcept {
  if (buffer == nullptr || size == 0) return;
  const size_t n = std::min(size - 1, std::strlen(message));
  std::memcpy(buffer, message, n);
  buffer[n] = '\0';
}

}  // namespace lastmile::capi
