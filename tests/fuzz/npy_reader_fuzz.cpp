// libFuzzer harness: .npy bytes -> parse_npy -> Sampler::sample of every row (a greedy and a
// seeded top-p request alternating). Any input must end in a result or a lastmile::Error.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "io/npy.hpp"
#include "lastmile/lastmile.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<unsigned char> bytes(data, data + size);
  try {
    const lastmile::io::NpyArray a = lastmile::io::parse_npy("fuzz.npy", bytes);
    if (a.rows < 1 || a.rows > 16 || a.cols < 1 || a.cols > 4096) return 0;
    const lastmile::DType dtype = a.descr == "<f4"   ? lastmile::DType::f32
                                  : a.descr == "<f2" ? lastmile::DType::f16
                                                     : lastmile::DType::bf16;
    lastmile::SamplerConfig config;
    config.vocab_size = a.cols;
    config.max_batch = a.rows;
    config.threads = 2;
    lastmile::Sampler sampler(config);
    lastmile::Batch batch;
    batch.num_logprobs = 2;
    for (int64_t r = 0; r < a.rows; ++r) {
      lastmile::RequestParams& p = batch.requests.emplace_back().params;
      if (r % 2) {
        p.top_p = 0.9f;
        p.seed = static_cast<uint64_t>(r);
      } else {
        p.temperature = 0.0f;
      }
    }
    sampler.sample({a.data.data(), a.rows, a.cols, a.cols, dtype}, batch);
  } catch (const lastmile::Error&) {
  }
  return 0;
}
