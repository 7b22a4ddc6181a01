// lastmile Python — leaving the GIL safely at interpreter exit.
//
// At exit Python ends a daemon thread when it next takes the GIL. A thread that released the
// GIL to sample takes it back in a destructor, which is noexcept: the thread's end, an unwinding,
// then meets std::terminate, and the process aborts. So every release here goes through
// GilReleased, and an atexit hook (ExitGate::close_and_wait, registered by the package) waits,
// before the interpreter finalizes, for the calls that released the GIL to take it back. A call
// that would release it after that parks its thread for good, GIL released: the process exits
// around it.
#pragma once

#include <Python.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace lastmile::python {

class ExitGate {
 public:
  // With the GIL held. False once the gate is closed.
  bool enter();
  void leave();
  // With the GIL released: no call enters after it, and every call in flight has left.
  void close_and_wait();

 private:
  std::mutex mutex_;
  std::condition_variable left_;
  int64_t in_flight_ = 0;
  bool closed_ = false;
};

// The interpreter's one gate: its state is the interpreter's (open until exit), not a sampler's.
ExitGate& exit_gate();

// nb::gil_scoped_release's role, through the gate. With the gate closed the constructor never
// returns: the thread waits, GIL released, for the process to exit.
class GilReleased {
 public:
  GilReleased();
  ~GilReleased();
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_ = nullptr;
};

}  // namespace lastmile::python
