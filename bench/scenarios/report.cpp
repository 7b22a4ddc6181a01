// lastmile bench — a run's report (see the header).
#include "report.hpp"

#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <thread>
#include <utility>

namespace lastmile::bench {
namespace {

// Least-squares slope of log(time per call) against log(x).
double fitted_exponent(const std::vector<std::pair<double, double>>& points) {
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (const auto& [x, y] : points) {
    sx += std::log(x), sy += std::log(y), sxx += std::log(x) * std::log(x),
        sxy += std::log(x) * std::log(y);
  }
  const double n = static_cast<double>(points.size());
  return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

}  // namespace

void print_worker_start(const WorkerStart& start, int threads) {
  std::printf("a worker asleep 1 ms ");
  if (start.measured == 0) {
    std::printf("came after the caller had run every task, in all %zu runs", WorkerStart::kRuns);
  } else {
    std::printf("starts a run %.0f us after it is posted (median of %zu runs", start.median_us,
                start.measured);
    if (start.measured < WorkerStart::kRuns)
      std::printf("; in %zu more the caller ran every task first",
                  WorkerStart::kRuns - start.measured);
    std::printf(")");
  }
  const unsigned hardware = std::thread::hardware_concurrency();
  if (hardware > 0 && static_cast<unsigned>(threads) > hardware)
    std::printf("; %d threads on %u hardware threads", threads, hardware);
  std::printf("\n");
}

nlohmann::json print_table(const std::vector<Result>& results) {
  std::printf("%-22s %6s %7s %5s %3s %12s %12s %13s %9s %10s\n", "scenario", "batch", "vocab",
              "dtype", "thr", "ours_us/row", "roofline_us", "baseline_us", "ours/roof",
              "base/ours");
  nlohmann::json rows = nlohmann::json::array();
  for (const Result& r : results) {
    const Scenario& s = r.scenario;
    const char* dtype = dtype_label(s.dtype);
    std::printf("%-22s %6lld %7lld %5s %3d %12.1f %12.1f %13.1f %9.2f %10.2f\n", s.name.c_str(),
                static_cast<long long>(s.batch), static_cast<long long>(s.vocab), dtype, s.threads,
                r.ours_us, r.roofline_us, r.baseline_us, r.ours_us / r.roofline_us,
                r.baseline_us / r.ours_us);
    rows.push_back({{"name", s.name},
                    {"batch", s.batch},
                    {"vocab", s.vocab},
                    {"dtype", dtype},
                    {"threads", s.threads},
                    {"median_us_per_row", r.ours_us},
                    {"roofline_us_per_row", r.roofline_us},
                    {"baseline_us_per_row", r.baseline_us}});
    if (s.twin != Scenario::Twin::none) rows.back()["twin_us_per_row"] = r.twin_us;
    if (r.twin_roofline_us > 0) rows.back()["twin_roofline_us_per_row"] = r.twin_roofline_us;
  }
  return rows;
}

// Where a batch outgrows a cache level its read slows per byte (on a Xeon's 105 MB L3, 64 rows of
// 256000 fp32 tokens read 2-2.5x slower a token than 64 of 32000), and ours grows with it.
nlohmann::json report_scaling(const std::vector<Result>& results) {
  std::vector<std::pair<double, double>> by_batch, by_vocab, roof_by_batch, roof_by_vocab;
  for (const Result& r : results) {
    const auto batch = static_cast<double>(r.scenario.batch);
    const double per_call = r.ours_us * batch, roofline_per_call = r.roofline_us * batch;
    if (r.scenario.name.rfind("scaling_b", 0) == 0) {
      by_batch.emplace_back(batch, per_call);
      roof_by_batch.emplace_back(batch, roofline_per_call);
    }
    if (r.scenario.name.rfind("scaling_v", 0) == 0) {
      by_vocab.emplace_back(r.scenario.vocab, per_call);
      roof_by_vocab.emplace_back(r.scenario.vocab, roofline_per_call);
    }
  }
  nlohmann::json scaling = nlohmann::json::object();
  std::vector<std::string> fits;  // "batch^1.10 (roofline ^1.15)", then the vocab's
  auto fit = [&](const char* what, const auto& ours, const auto& roofline) {
    if (ours.size() < 2) return;
    const double exponent = fitted_exponent(ours), roofline_exponent = fitted_exponent(roofline);
    scaling[std::string(what) + "_exponent"] = exponent;
    scaling[std::string(what) + "_roofline_exponent"] = roofline_exponent;
    char text[64];
    std::snprintf(text, sizeof text, "%s^%.2f (roofline ^%.2f)", what, exponent, roofline_exponent);
    fits.emplace_back(text);
  };
  fit("batch", by_batch, roof_by_batch);
  fit("vocab", by_vocab, roof_by_vocab);
  for (size_t i = 0; i < fits.size(); ++i)
    std::printf("%s%s", i == 0 ? "\nscaling: time per call ~ " : ", ~ ", fits[i].c_str());
  if (!fits.empty()) std::printf("\n");
  return scaling;
}

void print_twins(const std::vector<Result>& results) {
  for (const Result& r : results) {
    const char* twin = nullptr;
    switch (r.scenario.twin) {
      case Scenario::Twin::none:
        continue;
      case Scenario::Twin::empty_history:
        twin = "requests with no history";
        break;
      case Scenario::Twin::llm_shaped:
        twin = "on LLM-shaped logits";
        break;
      case Scenario::Twin::one_thread:
        twin = "on one thread";
        break;
    }
    std::printf("%s: %.2fx the time of the same %s (%.1f us/row; timed in turns)",
                r.scenario.name.c_str(), r.ours_us / r.twin_us, twin, r.twin_us);
    // The threads share the memory system: what the roofline's read alone gains from them, timed
    // in the same turns, says how much of a shortfall is the machine's.
    if (r.twin_roofline_us > 0)
      std::printf("; the roofline %.2fx (%.1f us/row on one thread)",
                  r.roofline_us / r.twin_roofline_us, r.twin_roofline_us);
    std::printf("\n");
  }
}

nlohmann::json report_targets(const std::vector<Result>& results, const nlohmann::json& scaling) {
  struct Target {
    std::string name;
    double value, low, high;
    bool met() const { return value >= low && value <= high; }
  };
  std::vector<Target> targets;
  auto find = [&](const std::string& name) -> const Result* {
    for (const Result& r : results)
      if (r.scenario.name == name) return &r;
    return nullptr;
  };
  const double inf = std::numeric_limits<double>::infinity();
  for (const auto& [name, limit] :
       std::vector<std::pair<std::string, double>>{{"greedy", 1.5},
                                                   {"temperature", 3},
                                                   {"topk_topp", 3},
                                                   {"topp", 3},
                                                   {"minp", 3},
                                                   {"serving_mix", 4},
                                                   {"serving_mix_qwen", 4}})
    if (const Result* r = find(name))
      targets.push_back({name + " ours/roofline", r->ours_us / r->roofline_us, 0, limit});
  for (const std::string name : {"topk_topp", "topp"})
    if (const Result* r = find(name))
      targets.push_back({name + " baseline/ours", r->baseline_us / r->ours_us, 50, inf});
  if (const Result* r = find("topp_flat"))
    targets.push_back({"topp_flat / topp (in turns)", r->ours_us / r->twin_us, 0, 2});
  if (const Result* r = find("serving_mix"))
    targets.push_back({"serving_mix 2 vs 1 thread (in turns)", r->twin_us / r->ours_us, 1.7, inf});
  if (const Result* r = find("stateful_history_32k"))
    targets.push_back({"stateful 32k / no history (in turns)", r->ours_us / r->twin_us, 0, 1.2});
  for (const char* exponent : {"batch_exponent", "vocab_exponent"})
    if (scaling.contains(exponent))
      targets.push_back(
          {std::string("scaling ") + exponent, scaling[exponent].get<double>(), 0.85, 1.15});
  nlohmann::json json = nlohmann::json::array();
  if (targets.empty()) return json;
  int met = 0;
  for (const Target& t : targets) met += t.met();
  std::printf("\ntargets (issue #3): %d of %zu met\n", met, targets.size());
  // Two decimals, or three where two would print the value as a bound it lies beyond or within
  // (an exponent of 1.153 shown as 1.15 beside 0.85-1.15, NOT MET).
  auto at_bound = [inf](const Target& t) {
    auto two = [](double x) { return std::round(x * 100) / 100; };
    return two(t.value) == two(t.low) || (t.high != inf && two(t.value) == two(t.high));
  };
  for (const Target& t : targets) {
    const bool ok = t.met();
    char range[32];
    if (t.high == inf)
      std::snprintf(range, sizeof range, ">= %.2g", t.low);
    else if (t.low == 0)
      std::snprintf(range, sizeof range, "<= %.2g", t.high);
    else
      std::snprintf(range, sizeof range, "%.2f-%.2f", t.low, t.high);
    std::printf(at_bound(t) ? "  %-38s %8.3f  %-10s %s\n" : "  %-38s %8.2f  %-10s %s\n",
                t.name.c_str(), t.value, range, ok ? "met" : "NOT MET");
    json.push_back({{"name", t.name}, {"value", t.value}, {"target", range}, {"met", ok}});
  }
  return json;
}

}  // namespace lastmile::bench
