// lastmile bench — what a run prints and writes: the table of scenarios, the scaling exponents,
// the twins timed in turns, the worker's start, and issue #3's targets, met or not.
#pragma once

#include <nlohmann/json.hpp>
#include <vector>

#include "scenarios.hpp"
#include "timing.hpp"

namespace lastmile::bench {

struct Result {
  Scenario scenario;
  double ours_us = 0, roofline_us = 0, baseline_us = 0;  // per row, medians
  double twin_us = 0;                                    // the twin's, per row, median
  double twin_roofline_us = 0;  // beside a one-thread twin of rows: the roofline on one thread
};

// The line under the bench's header: how late a sleeping worker joins a run, or that none did.
void print_worker_start(const WorkerStart& start, int threads);

// The table of scenarios on stdout; its rows as JSON.
nlohmann::json print_table(const std::vector<Result>& results);

// The scaling scenarios' fitted exponents, the roofline's own beside ours: printed, and as JSON.
nlohmann::json report_scaling(const std::vector<Result>& results);

// A line for each scenario timed in turns with a twin: its time as a multiple of the twin's.
void print_twins(const std::vector<Result>& results);

// Issue #3's targets that this run's scenarios allow, printed met or not, and returned for the
// JSON: ratios to the roofline, to the baseline and to a twin timed in turns, and the exponents
// (`scaling`: report_scaling's JSON).
nlohmann::json report_targets(const std::vector<Result>& results, const nlohmann::json& scaling);

}  // namespace lastmile::bench
