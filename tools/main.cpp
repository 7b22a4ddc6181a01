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
  const std::map<std::string, lastmile::BackendKind> backends = {
      {"auto", lastmile::BackendKind::automatic},
      {"cpu", lastmile::BackendKind::cpu},
      {"reference", lastmile::BackendKind::reference}};
  app.require_subcommand(0, 1);
  // CLI11 reads integers as C's strtoll with base 0 does: "010" as 8, "0x10" as 16. Integer
  // options here are decimal: leading zeros are dropped ("010" is 10), anything else is refused.
  const CLI::Validator decimal(
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

  // A word from a list (case ignored), given back as the list has it; the error names the list.
  // (CLI11's CheckedTransformer printed its map, and took the enum's numbers too.)
  auto one_of = [](const std::vector<std::string>& words) {
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
  };
  // CLI11 runs an option's transforms last added first: backend_name, then the map to the enum.
  std::vector<std::string> backend_words;
  for (const auto& entry : backends) backend_words.push_back(entry.first);
  const CLI::Validator backend_name = one_of(backend_words);

  lastmile::cli::DemoOptions demo;
  app.add_option("--steps", demo.steps, "demo: decoding steps")
      ->transform(decimal)
      ->check(CLI::Range(1, 1000));
  app.add_option("--threads", demo.threads, "worker threads (0: all cores)")
      ->transform(decimal)
      ->check(CLI::Range(0, 1024));
  app.add_option("--backend", demo.backend, "auto | cpu | reference")
      ->transform(CLI::Transformer(backends).description(""))  // runs after backend_name
      ->transform(backend_name);

  lastmile::cli::RunOptions run;
  CLI::App* run_cmd =
      app.add_subcommand("run", "sample a golden case folder (the runner contract)");
  run_cmd->add_option("case_dir", run.case_dir, "folder with case.json and logits.npy")->required();
  run_cmd->add_option("--out", run.out_dir, "folder to write output.json into")->required();
  std::string mode_help;
  for (const std::string& mode : lastmile::io::logprobs_mode_names())
    mode_help += (mode_help.empty() ? "" : " | ") + mode;
  run_cmd->add_option("--logprobs-mode", run.logprobs_mode, mode_help)
      ->transform(one_of(lastmile::io::logprobs_mode_names()));
  run_cmd->add_option("--num-logprobs", run.num_logprobs, "-1: full matrix; N: top-N")
      ->transform(decimal)
      ->allow_extra_args(false);
  run_cmd->add_option("--repeat", run.repeat, "steps on the same logits; writes histograms")
      ->transform(decimal)
      ->check(CLI::Range(1, 10000000));
  run_cmd->add_option("--threads", run.threads, "worker threads (0: all cores)")
      ->transform(decimal)
      ->check(CLI::Range(0, 1024));
  run_cmd->add_option("--backend", run.backend, "auto | cpu | reference")
      ->transform(CLI::Transformer(backends).description(""))  // runs after backend_name
      ->transform(backend_name);

  lastmile::cli::BenchOptions bench;
  CLI::App* bench_cmd =
      app.add_subcommand("bench", "time scenarios against the roofline and a full-sort baseline");
  bench_cmd->add_option("--scenario", bench.scenario, "a scenario name or prefix (default: all)");
  bench_cmd->add_option("--threads", bench.threads, "worker threads (0: all cores)")
      ->transform(decimal)
      ->check(CLI::Range(0, 1024));
  bench_cmd->add_option("--json", bench.json_path, "also write the results as JSON to this file")
      ->check(CLI::Validator(  // else an empty path would mean no --json at all
          [](std::string& path) {
            return path.empty() ? std::string("expected a path, got ''") : "";
          },
          "PATH"));
  bench_cmd->add_option("--backend", bench.backend, "auto | cpu | reference")
      ->transform(CLI::Transformer(backends).description(""))  // runs after backend_name
      ->transform(backend_name);

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
  // The demo's options before a subcommand were taken and then ignored (`lastmile --backend
  // reference run ...` ran the cpu backend): refused, naming the place they belong.
  const CLI::App* sub = *run_cmd ? run_cmd : *bench_cmd ? bench_cmd : nullptr;
  for (const char* option : {"--steps", "--threads", "--backend"}) {
    if (sub != nullptr && app.count(option) > 0) {
      std::fprintf(stderr, "lastmile: error: %s before '%s' is the demo's option; %s\n", option,
                   sub->get_name().c_str(),
                   std::string(option) == "--steps" ? "the subcommand takes none"
                                                    : "give it after the subcommand");
      return 2;
    }
  }
  try {
    const int status = *run_cmd     ? lastmile::cli::run_case(run)
                       : *bench_cmd ? lastmile::cli::run_bench(bench)
                                    : lastmile::cli::run_demo(demo);
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
