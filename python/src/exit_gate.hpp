// lastmile Python — leaving the GIL safely at interpreter exit.
//
// At exit Python ends a daemon thread when it next takes the GIL. A thread that released the
// GIL to sample takes it back in a destructor, which is noexcept: the thread's end, an unwinding,
// then meets std::terminate, and the process aborts. So every release here goes through
// GilReleased, and an atexit hook (ExitGate::close_and_wait, registered by the package) waits,
// before the interpreter finalizes, for the calls that released the GIL to take it back.
//
// After that a call on the thread that closed the gate (the one finalizing: a __del__, a later
// atexit handler) keeps the GIL: no call is in flight to wait for it. A call on any other thread
// parks it for good, GIL released, for the process to end around it: keeping the GIL there could
// block on a sampler's lock that a call still in flight holds, and that call needs the GIL back.
// A forked child starts with the gate open and no call in flight (their threads stayed behind).
#pragma once

#include <Python.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <thread>

namespace lastmile::python {

class ExitGate {
 public:
  ExitGate();
  // With the GIL held. False once the gate is closed.
  bool enter();
  void leave();
  // With the GIL released: no call enters after it, and every call in flight has left.
  void close_and_wait();
  // Whether the gate is closed and this thread closed it.
  bool closed_by_this_thread();

 private:
  std::mutex mutex_;
  std::condition_variable left_;
  int64_t in_flight_ = 0;
  bool closed_ = false;
  std::thread::id closer_;
};

// The interpreter's one gate: its state is the process's exit (open until then), not a sampler's.
ExitGate& exit_gate();

// nb::gil_scoped_release's role, through the gate.
class GilReleased {
 public:
  GilReleased();
  ~GilReleased();
  GilReleased(const GilReleased&) = delete;
  GilReleased& operator=(const GilReleased&) = delete;

 private:
  PyThreadState* state_ = nullptr;  // null: the GIL was kept
};

}  // namespace lastmile::python
