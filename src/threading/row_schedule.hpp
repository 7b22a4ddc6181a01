// lastmile — RowSchedule: whether a batch's rows run side by side over the thread pool or one
// after another on the caller, from what the sampler's past calls measured.
#pragma once

#include <algorithm>
#include <cstdint>

namespace lastmile::detail {

// A worker asleep between calls starts a run late (7-57 us on the README's 2-core VM, the more
// the longer it slept), and a row it claims late keeps the caller waiting: small batches ran
// slower on two threads than on one (top-k/top-p rows of 128k tokens: 14.8 against 10.1 us a row
// at B = 2). n rows of r ns each, side by side on two threads, take about (n r + w) / 2 plus half
// a row of imbalance and the wake-up's cost c when the worker starts w ns late, against n r in
// order: they pay when n r > w + r + 2 c (with more threads they pay sooner; the rule stays
// conservative). A worker that claimed no row counts as late as the whole run: a lower bound. So
// the rows spread when that holds at the running estimates of r (the caller's rows) and w (averages
// over past calls). w is taken only from a call that follows a spread one, as it would be while the
// rows keep spreading (after calls in order the worker has slept longer); a call that spreads after
// calls in order is followed by one more that spreads. Such a probe, which keeps w current, comes
// after 1 call in order, then after 2, 4, 8, 16 and at most kProbeEvery while probes keep sending
// the rows back in order. Spread calls that end with a worker that claimed no row start that count
// at 1 again: its w is a lower bound, and the worker may well be back at the next call. (One such
// call, a worker the VM left without a core for a call, sent 64-row batches in order until the
// 65th call, with one probe at the 32nd; now they spread again from the 6th.) Any other spread
// calls leave the count where it was: they measured w, and a batch of fewer rows that goes in
// order after them needs no probe sooner. The results are the same either way: rows are
// independent of each other and of the thread that runs them.
class RowSchedule {
 public:
  static constexpr int kProbeEvery = 32;       // the most calls in order between two probes
  static constexpr double kWakeCostNs = 5000;  // c: the wake-up's system call, the final wait

  // Whether `rows` rows should run side by side over the pool.
  bool spread(int64_t rows) const {
    // After the first call of a stretch of spread ones, the next spreads too and measures w.
    const bool measure_next = last_spread_ && spread_calls_ == 1;
    if (!wake_known_ || measure_next || serial_calls_ >= calls_before_probe_) return true;
    return static_cast<double>(rows) * row_ns_ > wake_ns_ + row_ns_ + 2 * kWakeCostNs;
  }

  // What a call measured: whether it spread its rows, the caller's mean time a row (negative when
  // the caller ran none), the pool's worker delay (negative when no worker claimed a row: it came
  // later than the whole run, `run_ns`).
  void record(bool spread, double caller_row_ns, double worker_delay_ns, double run_ns) {
    if (caller_row_ns >= 0) row_ns_ = average(row_ns_, caller_row_ns, row_known_);
    if (!spread) {
      if (last_spread_ && spread_calls_ <= 2 && spread_after_order_)  // a probe sent them back
        calls_before_probe_ = std::min(2 * calls_before_probe_, kProbeEvery);
      else if (last_spread_ && last_claimless_)  // the worker missed a call: probe at once
        calls_before_probe_ = 1;
      serial_calls_ = std::min(serial_calls_ + 1, kProbeEvery);  // capped: it never overflows
      last_spread_ = false;
      return;
    }
    if (!last_spread_) {
      spread_calls_ = 0;
      spread_after_order_ = serial_calls_ > 0;
    }
    spread_calls_ = std::min(spread_calls_ + 1, 3);  // 3: more than a probe's two
    last_claimless_ = worker_delay_ns < 0;
    serial_calls_ = 0;
    if (last_spread_)
      wake_ns_ = average(wake_ns_, worker_delay_ns >= 0 ? worker_delay_ns : run_ns, wake_known_);
    last_spread_ = true;
  }

 private:
  // An exponential average with weight 1/4 for the new value; the first value as it is.
  static double average(double mean, double value, bool& known) {
    if (!known) {
      known = true;
      return value;
    }
    return mean + (value - mean) / 4;
  }

  double row_ns_ = 0;
  double wake_ns_ = 0;
  bool row_known_ = false;
  bool wake_known_ = false;
  bool last_spread_ = false;
  int serial_calls_ = 0;        // calls in order since the rows last spread
  int calls_before_probe_ = 1;  // calls in order after which the rows spread to probe w
  int spread_calls_ = 0;        // spread calls in the current or last stretch of them (at most 3)
  bool spread_after_order_ = false;  // that stretch followed calls in order: it began as a probe
  bool last_claimless_ = false;      // the last spread call's worker claimed no row
};

}  // namespace lastmile::detail
