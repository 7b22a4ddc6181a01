// lastmile Python — the exit gate (see exit_gate.hpp).
#include "exit_gate.hpp"

#include <nanobind/nanobind.h>

namespace lastmile::python {
namespace {

// A thread stranded in a call keeps its sampler alive through finalization, which nanobind would
// report as a reference leak of the binding's: it is the daemon thread's.
void quiet_leak_report() { nanobind::set_leak_warnings(false); }

}  // namespace

bool ExitGate::enter() {
  std::lock_guard lock(mutex_);
  if (closed_) return false;
  ++in_flight_;
  return true;
}

void ExitGate::leave() {
  std::lock_guard lock(mutex_);
  if (--in_flight_ == 0) left_.notify_all();
}

void ExitGate::close_and_wait() {
  std::unique_lock lock(mutex_);
  closed_ = true;
  if (in_flight_ > 0) quiet_leak_report();
  left_.wait(lock, [this] { return in_flight_ == 0; });
}

ExitGate& exit_gate() {
  static ExitGate gate;
  return gate;
}

GilReleased::GilReleased() {
  if (!exit_gate().enter()) {
    quiet_leak_report();
    PyEval_SaveThread();  // never restored: the process is exiting
    std::mutex parked;
    std::unique_lock lock(parked);
    std::condition_variable never;
    for (;;) never.wait(lock);
  }
  state_ = PyEval_SaveThread();
}

GilReleased::~GilReleased() {
  PyEval_RestoreThread(state_);
  exit_gate().leave();
}

}  // namespace lastmile::python
