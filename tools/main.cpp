// lastmile CLI — `lastmile` (the demo), `lastmile run CASE --out OUT` (the golden runner).
// Every failure is one line on stderr and exit status 2; nothing is allowed to crash.
#include <CLI/CLI.hpp>
#include <algorithm>
#include <cctype>
#include <cstddef>
#include <cstdio>
#include <exception>
#include <functional>
#include <iostream>
#include <map>
#include <new>
#include <string>
#include <vector>

#include "commands.hpp"
#include "io/case_file.hpp"
#include "lastmile/lastmile.hpp"

namespace {

// Whether everything written to stdout (by stdio or iostreams) reached it; says so on stderr
// when not. A full disk shows only at the flush.
bool stdout_written() {
  std::cout.flush();
  if (std::fflush(stdout) == 0 && std::ferror(stdout) == 0 && !std::cout.fail()) return true;
  std::fprintf(stderr, "lastmile: error: stdout: write failed\n");
  return false;
}

// CLI11 reads integers as C's strtoll with base 0 does: "010" as 8, "0x10" as 16. Integer
// options here are decimal: leading zeros are dropped ("010" is 10), anything else is refused.
CLI::Validator decimal() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const size_t sign = !text.empty() && text[0] == '-' ? 1 : 0;
        const bool digits =
            text.size() > sign &&
            std::all_of(text.begin() + static_cast<std::ptrdiff_t>(sign), text.end(),
                        [](unsigned char c) { return c >= '0' && c <= '9'; });
        if (!digits) return "expected a decimal integer, got '" + text + "'";
        const size_t first = std::min(text.find_first_not_of('0', sign), text.size() - 1);
        text.erase(sign, first - sign);
        return {};
      },
      "DECIMAL");
}

// A word from a list (case ignored), given back as the list has it; the error names the list.
// (CLI11's CheckedTransformer printed its map, and took the enum's numbers too.)
CLI::Validator one_of(const std::vector<std::string>& words) {
  std::string list;
  for (size_t i = 0; i < words.size(); ++i)
    list += (i == 0 ? "" : i + 1 == words.size() ? " or " : ", ") + words[i];
  return CLI::Validator(
      [words, list](std::string& text) -> std::string {
        std::string lower = text;
        std::transform(lower.begin(), lower.end(), lower.begin(),
                       [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
        if (std::find(words.begin(), words.end(), lower) == words.end())
          return "expected " + list + ", got '" + text + "'";
        text = lower;
        return {};
      },
      "WORD");
}

const std::map<std::string, lastmile::BackendKind>& backends() {
  static const std::map<std::string, lastmile::BackendKind> names = {
      {"auto", lastmile::BackendKind::automatic},
      {"cpu", lastmile::BackendKind::cpu},
      {"reference", lastmile::BackendKind::reference}};
  return names;
}

// --backend NAME into `backend`. CLI11 runs an option's transforms last added first: the name
// checked by one_of, then mapped to the enum.
void add_backend_option(CLI::App& app, lastmile::BackendKind& backend) {
  std::vector<std::string> words;
  for (const auto& entry : backends()) words.push_back(entry.first);
  app.add_option("--backend", backend, "auto | cpu | reference")
      ->transform(CLI::Transformer(backends()).description(""))  // runs after one_of
      ->transform(one_of(words));
}

void add_threads_option(CLI::App& app, int& threads) {
  app.add_option("--threads", threads, "worker threads (0: all cores)")
      ->transform(decimal())
      ->check(CLI::Range(0, 1024));
}

// The demo's options, on the app itself (`lastmile` with no subcommand runs the demo).
void add_demo_options(CLI::App& app, lastmile::cli::DemoOptions& demo) {
  app.add_option("--steps", demo.steps, "demo: decoding steps")
      ->transform(decimal())
      ->check(CLI::Range(1, 1000));
  add_threads_option(app, demo.threads);
  add_backend_option(app, demo.backend);
}

CLI::App* add_run_command(CLI::App& app, lastmile::cli::RunOptions& run) {
  CLI::App* cmd = app.add_subcommand("run", "sample a golden case folder (the runner contract)");
  cmd->add_option("case_dir", run.case_dir, "folder with case.json and logits.npy")->required();
  cmd->add_option("--out", run.out_dir, "folder to write output.json into")->required();
  std::string mode_help;
  for (const std::string& mode : lastmile::io::logprobs_mode_names())
    mode_help += (mode_help.empty() ? "" : " | ") + mode;
  cmd->add_option("--logprobs-mode", run.logprobs_mode, mode_help)
      ->transform(one_of(lastmile::io::logprobs_mode_names()));
  cmd->add_option("--num-logprobs", run.num_logprobs, "-1: full matrix; N: top-N")
      ->transform(decimal())
      ->allow_extra_args(false);
  cmd->add_option("--repeat", run.repeat, "steps on the same logits; writes histograms")
      ->transform(decimal())
      ->check(CLI::Range(1, 10000000));
  add_threads_option(*cmd, run.threads);
  add_backend_option(*cmd, run.backend);
  return cmd;
}

CLI::App* add_bench_command(CLI::App& app, lastmile::cli::BenchOptions& bench) {
  CLI::App* cmd =
      app.add_subcommand("bench", "time scenarios against the roofline and a full-sort baseline");
  cmd->add_option("--scenario", bench.scenario, "a scenario name or prefix (default: all)");
  add_threads_option(*cmd, bench.threads);
  cmd->add_option("--json", bench.json_path, "also write the results as JSON to this file")
      ->check(CLI::Validator(  // else an empty path would mean no --json at all
          [](std::string& path) {
            return path.empty() ? std::string("expected a path, got ''") : "";
          },
          "PATH"));
  add_backend_option(*cmd, bench.backend);
  return cmd;
}

// The demo's options before a subcommand were taken and then ignored (`lastmile --backend
// reference run ...` ran the cpu backend): refused, naming the place they belong. False if one
// was given.
bool demo_options_stay_with_the_demo(const CLI::App& app, const CLI::App* sub) {
  if (sub == nullptr) return true;
  for (const char* option : {"--steps", "--threads", "--backend"}) {
    if (app.count(option) > 0) {
      std::fprintf(stderr, "lastmile: error: %s before '%s' is the demo's option; %s\n", option,
                   sub->get_name().c_str(),
                   std::string(option) == "--steps" ? "the subcommand takes none"
                                                    : "give it after the subcommand");
      return false;
    }
  }
  return true;
}

// The command's status; 2, with one line on stderr, for whatever it throws.
int status_of(const std::function<int()>& command) {
  try {
    const int status = command();
    // The demo's and bench's output is stdout: a full disk shows at the flush. A closed pipe ends
    // the process by SIGPIPE before, as it ends any Unix filter.
    if (status == 0 && !stdout_written()) return 2;
    return status;
  } catch (const lastmile::Error& e) {
    std::fprintf(stderr, "lastmile: error: %s\n", e.what());
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr, "lastmile: error: out of memory\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "lastmile: error: %s\n", e.what());
  }
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"lastmile: vLLM's V1 sampler in C++ (run with no arguments for a demo)"};
  app.set_version_flag("--version", std::function<std::string()>([] {
                         lastmile::SamplerConfig probe;
                         probe.vocab_size = 1;
                         probe.threads = 1;
                         return std::string("lastmile ") + lastmile::kVersion +
                                ", backends: " + lastmile::Sampler(probe).backend_name() +
                                " (default), reference (scalar C++)";
                       }));
  app.require_subcommand(0, 1);
  lastmile::cli::DemoOptions demo;
  lastmile::cli::RunOptions run;
  lastmile::cli::BenchOptions bench;
  add_demo_options(app, demo);
  CLI::App* const run_cmd = add_run_command(app, run);
  CLI::App* const bench_cmd = add_bench_command(app, bench);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) {  // --help, --version: CLI11 prints them to std::cout
      const int status = app.exit(e);
      return stdout_written() ? status : 2;
    }
    std::fprintf(stderr, "lastmile: error: %s\n", e.what());
    return 2;
  }
  if (!demo_options_stay_with_the_demo(app, *run_cmd ? run_cmd : *bench_cmd ? bench_cmd : nullptr))
    return 2;
  if (*run_cmd) return status_of([&] { return lastmile::cli::run_case(run); });
  if (*bench_cmd) return status_of([&] { return lastmile::cli::run_bench(bench); });
  return status_of([&] { return lastmile::cli::run_demo(demo); });
}
