// lastmile Python — the exit gate (see exit_gate.hpp).
#include "exit_gate.hpp"

#include <nanobind/nanobind.h>
#include <pthread.h>

namespace lastmile::python {
namespace {

// A thread stranded in a call keeps its sampler alive through finalization, which nanobind would
// report as a reference leak of the binding's: it is the daemon thread's.
void quiet_leak_report() { nanobind::set_leak_warnings(false); }

}  // namespace

ExitGate::ExitGate() {
  // fork: the gate's lock is taken around it, so the child's copy is consistent; the child has
  // none of the parent's other threads, so none of their calls is in flight there.
  pthread_atfork([] { exit_gate().mutex_.lock(); }, [] { exit_gate().mutex_.unlock(); },
                 [] {
                   ExitGate& gate = exit_gate();
                   if (gate.in_flight_ > 0) quiet_leak_report();  // their samplers stay held
                   gate.in_flight_ = 0;
                   gate.closed_ = false;
                   gate.closer_ = {};
                   gate.mutex_.unlock();
                 });
}

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
  closer_ = std::this_thread::get_id();
  if (in_flight_ > 0) quiet_leak_report();
  left_.wait(lock, [this] { return in_flight_ == 0; });
}

bool ExitGate::closed_by_this_thread() {
  std::lock_guard lock(mutex_);
  return closed_ && closer_ == std::this_thread::get_id();
}

ExitGate& exit_gate() {
  static ExitGate gate;
  return gate;
}

GilReleased::GilReleased() {
  if (exit_gate().enter()) {
    state_ = PyEval_SaveThread();
    return;
  }
  if (exit_gate().closed_by_this_thread()) return;  // finalizing: keep the GIL
  quiet_leak_report();
  PyEval_SaveThread();  // never restored: the process is exiting
  std::mutex parked;
  std::unique_lock lock(parked);
  std::condition_variable never;
  for (;;) never.wait(lock);
}

GilReleased::~GilReleased() {
  if (state_ == nullptr) return;
  PyEval_RestoreThread(state_);
  exit_gate().leave();
}

}  // namespace lastmile::python
