// lastmile — the C boundary's one rule: every exception becomes a lastmile_status plus a message
// kept in the handle (STYLE §7). Nothing escapes: not lastmile::Error, not std::bad_alloc, not
// whatever a custom logits processor threw.
#pragma once

#include <new>
#include <stdexcept>
#include <string>

#include "lastmile/error.hpp"
#include "lastmile/lastmile.h"

namespace lastmile::capi {

lastmile_status status_of(ErrorCode code);

// Keeps the message when it fits in memory; a failed copy leaves a fixed message instead.
lastmile_status store(std::string& last_error, lastmile_status status,
                      const char* message) noexcept;

// Writes message into the caller's buffer for create functions (no handle to keep it in).
void write_error(char* buffer, size_t size, const char* message) noexcept;

// Runs f(); on an exception stores its message in `last_error` and returns its status.
template <typename F>
lastmile_status guarded(std::string& last_error, F&& f) noexcept {
  try {
    f();
    last_error.clear();
    return LASTMILE_STATUS_OK;
  } catch (const Error& e) {
    return store(last_error, status_of(e.code()), e.what());
  } catch (const std::bad_alloc&) {
    return store(last_error, LASTMILE_STATUS_OUT_OF_MEMORY, "out of memory");
  } catch (const std::length_error&) {  // a size past any vector: the caller's count, unchecked
    return store(last_error, LASTMILE_STATUS_INVALID_ARGUMENT,
                 "a count past what an array can hold");
  } catch (const std::exception& e) {
    return store(last_error, LASTMILE_STATUS_INTERNAL, e.what());
  } catch (...) {
    return store(last_error, LASTMILE_STATUS_INTERNAL, "unknown exception");
  }
}

}  // namespace lastmile::capi
