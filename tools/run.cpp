// lastmile CLI — `lastmile run`: the golden runner contract of ../shared/golden/README.md.
// One step as the case says, or --repeat R steps on the same logits (a request's random stream
// advances one step each time from where the case's output leaves it) with a token histogram per
// row.
#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "commands.hpp"
#include "io/case_file.hpp"
#include "io/npy.hpp"
#include "lastmile/lastmile.hpp"
#include "validate.hpp"

namespace lastmile::cli {
int run_case(const RunOptions& options) {
  namespace fs = std::filesystem;
  const fs::path dir(options.case_dir);
  const std::string case_path = (dir / "case.json").string();
  io::Case c = io::read_case(case_path);
  const std::string logits_path = (dir / "logits.npy").string();
  const io::NpyArray logits_array = io::read_npy(logits_path);
  const LogitsView logits = io::logits_view(logits_array, c, logits_path);
  if (options.logprobs_mode) c.logprobs_mode = io::parse_logprobs_mode(*options.logprobs_mode);
  if (options.num_logprobs) {  // checked here, where the option, not case.json, can be named
    detail::validate_num_logprobs("--num-logprobs", "", *options.num_logprobs, logits.vocab_size);
    c.num_logprobs = *options.num_logprobs;
  }
  if (!fs::is_directory(options.out_dir))
    throw InvalidArgument("--out " + options.out_dir + ": not a directory");

  SamplerConfig config;
  config.vocab_size = logits.vocab_size;
  config.max_batch = std::max<int64_t>(1, logits.num_rows);
  config.logprobs_mode = c.logprobs_mode;
  config.threads = options.threads;
  config.backend = options.backend;
  Sampler sampler(config);
  Batch batch = c.batch();
  // The sampler's messages name the request or the row; which file that is, is said here:
  // case.json for a request's fields, logits.npy for the logits.
  auto sample = [&]() -> const SamplerOutput* {
    try {
      return &sampler.sample(logits, batch);
    } catch (const Error& e) {
      if (e.code() == ErrorCode::invalid_argument)
        throw Error(e.code(), case_path + ": " + e.what());
      if (e.code() == ErrorCode::invalid_logits)
        throw Error(e.code(), logits_path + ": " + e.what());
      throw;
    }
  };

  std::vector<std::map<TokenId, int64_t>> histograms;
  const SamplerOutput* out = nullptr;
  if (options.repeat == 0) out = sample();
  histograms.resize(options.repeat > 0 ? logits.num_rows : 0);
  for (int step = 0; step < options.repeat; ++step) {
    // From where the case stands (its output so far, as one `run` takes it), one step a repeat.
    for (BatchRequest& row : batch.requests)
      row.step = row.output_token_ids.size() + static_cast<uint64_t>(step);
    out = sample();
    for (int64_t r = 0; r < logits.num_rows; ++r) ++histograms[r][out->sampled_token_ids[r]];
  }
  if (out->has_full_logprobs)  // [0, V] for a case of no rows
    io::write_npy_f32((fs::path(options.out_dir) / "full_logprobs.npy").string(),
                      out->full_logprobs.data(), out->num_rows, logits.vocab_size);
  std::ofstream json(fs::path(options.out_dir) / "output.json");
  json << io::output_json(*out, options.repeat > 0 ? &histograms : nullptr) << '\n';
  json.close();  // a full disk shows at the flush: checked after it
  if (!json) throw Error(ErrorCode::internal, options.out_dir + "/output.json: write failed");
  return 0;
}

}  // namespace lastmile::cli
