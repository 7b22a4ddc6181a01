// libFuzzer harness: case.json text -> parse_case -> Sampler::sample on zero logits (vocab 64).
// Any input must end in a result or a lastmile::Error: no crash, no other exception, no
// sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/case_file.hpp"
#include "lastmile/lastmile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  constexpr int64_t kVocab = 64;
  const std::string text(reinterpret_cast<const char*>(data), size);
  try {
    const lastmile::io::Case c = lastmile::io::parse_case(text);
    const auto rows = static_cast<int64_t>(c.params.size());
    if (rows == 0 || rows > 8) return 0;
    lastmile::SamplerConfig config;
    config.vocab_size = kVocab;
    config.max_batch = rows;
    config.threads = 2;
    config.logprobs_mode = c.logprobs_mode;
    lastmile::Sampler sampler(config);
    std::vector<float> logits(static_cast<size_t>(rows * kVocab));
    for (size_t i = 0; i < logits.size(); ++i) logits[i] = static_cast<float>(i % 7) - 3.0f;
    sampler.sample(lastmile::LogitsView::f32(logits.data(), rows, kVocab), c.batch());
  } catch (const lastmile::Error&) {
  }
  return 0;
}
