// Statistical tests of the random draw (STYLE §9): chi-square goodness of fit of 200,000 draws per
// configuration against the exact distribution, computed independently here in double precision
// (softmax of the penalised logits / T after the spec's min_p, top-k and top-p masks; spec §6.5,
// §7.2, §8.1, §9.2-9.5).
//
// Draws: a fixed request seed with BatchRequest::step = 0..199,999 (one configuration varies the
// seed instead, at step 0). Seeds are stated per test. Bins with an expected count below 5 are
// pooled. Significance: reject at p < 1e-6, i.e. a Wilson–Hilferty normal approximation of the
// chi-square statistic above z = 4.75 fails. The draws are deterministic (Philox keyed by seed and
// step), so a pass is a permanent pass. Every masked token must have zero draws.
#include <algorithm>
#include <numeric>

#include "random/philox.hpp"
#include "unit/test_util.hpp"

namespace lastmile_test {
namespace {

constexpr int64_t kDraws = 200000;
constexpr int64_t kChunk = 1000;   // rows per sample() call
constexpr double kRejectZ = 4.75;  // one-sided p ~ 1e-6

struct Case {
  std::vector<float> logits;
  RequestParams params;
  std::vector<TokenId> prompt;
  std::vector<TokenId> output;
};

// ---- the independent model of the distribution ----

struct Expected {
  std::vector<double> prob;  // 0 for masked tokens
  bool unambiguous = true;   // no token within 1e-6 of a min_p / top-p cut
};

Expected expected_distribution(const Case& c) {
  const RequestParams& p = c.params;
  const size_t n = c.logits.size();
  std::vector<double> l(c.logits.begin(), c.logits.end());
  // Penalties (spec §7.2): repetition over prompt ∪ output, frequency / presence over output.
  std::vector<int> count(n, 0);
  std::vector<bool> seen(n, false);
  for (TokenId t : c.prompt) seen[t] = true;
  for (TokenId t : c.output) {
    seen[t] = true;
    ++count[t];
  }
  for (const auto& [id, bias] : p.logit_bias) l[id] += bias;
  for (size_t i = 0; i < n; ++i) {
    if (seen[i]) l[i] = l[i] > 0 ? l[i] / p.repetition_penalty : l[i] * p.repetition_penalty;
    l[i] -= p.frequency_penalty * count[i];
    l[i] -= p.presence_penalty * (count[i] > 0 ? 1.0 : 0.0);
  }
  for (double& v : l) v /= p.temperature;
  Expected e;
  std::vector<bool> kept(n, true);
  // min_p (spec §6.5): p_j < min_p * p_max, i.e. exp(l_j - max) < min_p.
  const double max = *std::max_element(l.begin(), l.end());
  if (p.min_p > 0) {
    for (size_t i = 0; i < n; ++i) {
      const double ratio = std::exp(l[i] - max);
      if (std::abs(ratio - p.min_p) < 1e-6) e.unambiguous = false;
      if (ratio < p.min_p) kept[i] = false;
    }
  }
  // top-k (spec §9.2): keep values >= the k-th largest.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return l[a] > l[b]; });
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < n) {
    const double threshold = l[order[p.top_k - 1]];
    for (size_t i = 0; i < n; ++i)
      if (l[i] < threshold) kept[i] = false;
  }
  // top-p (spec §9.3) on the renormalised survivors: keep a token iff the mass above it < p.
  if (p.top_p < 1.0f) {
    double total = 0;
    for (size_t i = 0; i < n; ++i)
      if (kept[i]) total += std::exp(l[i] - max);
    double above = 0;
    for (size_t i : order) {
      if (!kept[i]) continue;
      const double mass = std::exp(l[i] - max) / total;
      if (std::abs(above - p.top_p) < 1e-6) e.unambiguous = false;
      if (above >= p.top_p) kept[i] = false;
      above += mass;
    }
  }
  e.prob.assign(n, 0.0);
  double total = 0;
  for (size_t i = 0; i < n; ++i)
    if (kept[i]) total += e.prob[i] = std::exp(l[i] - max);
  for (double& v : e.prob) v /= total;
  return e;
}

// ---- draws ----

// kDraws draws: seed fixed and step = 0..kDraws-1, or (vary_seed) seed = seed + i and step 0.
std::vector<int64_t> histogram(const Case& c, uint64_t seed, bool vary_seed = false) {
  const auto vocab = static_cast<int64_t>(c.logits.size());
  // Rows per call: kChunk, fewer on long rows (at most 16 MB of logits a call).
  const int64_t chunk = std::clamp<int64_t>(4'000'000 / vocab, 1, kChunk);
  Sampler sampler(make_config(vocab, chunk, LogprobsMode::raw_logprobs, 2));
  std::vector<float> logits;
  for (int64_t i = 0; i < chunk; ++i) logits.insert(logits.end(), c.logits.begin(), c.logits.end());
  std::vector<int64_t> counts(static_cast<size_t>(vocab), 0);
  for (int64_t start = 0; start < kDraws; start += chunk) {
    const int64_t rows = std::min(chunk, kDraws - start);
    Batch batch;
    for (int64_t i = 0; i < rows; ++i) {
      BatchRequest& b = batch.requests.emplace_back();
      b.params = c.params;
      b.params.seed = vary_seed ? seed + static_cast<uint64_t>(start + i) : seed;
      b.step = vary_seed ? 0 : static_cast<uint64_t>(start + i);
      b.prompt_token_ids = c.prompt;
      b.output_token_ids = c.output;
    }
    const SamplerOutput& out = sampler.sample(LogitsView::f32(logits.data(), rows, vocab), batch);
    for (TokenId t : out.sampled_token_ids) ++counts[t];
  }
  return counts;
}

// ---- chi-square ----

struct Fit {
  double chi2 = 0;
  int64_t df = 0;
  double z = 0;  // Wilson–Hilferty
  int64_t masked_draws = 0;
};

Fit fit(const std::vector<int64_t>& counts, const std::vector<double>& prob) {
  Fit f;
  double pooled_expected = 0;
  int64_t pooled_observed = 0;
  int64_t bins = 0;
  for (size_t i = 0; i < prob.size(); ++i) {
    const double expected = prob[i] * kDraws;
    if (prob[i] == 0) {
      f.masked_draws += counts[i];
      continue;
    }
    if (expected < 5) {
      pooled_expected += expected;
      pooled_observed += counts[i];
      continue;
    }
    f.chi2 += (counts[i] - expected) * (counts[i] - expected) / expected;
    ++bins;
  }
  if (pooled_expected > 0) {
    f.chi2 +=
        (pooled_observed - pooled_expected) * (pooled_observed - pooled_expected) / pooled_expected;
    ++bins;
  }
  f.df = bins - 1;
  const double k = static_cast<double>(f.df);
  f.z = (std::cbrt(f.chi2 / k) - (1 - 2 / (9 * k))) / std::sqrt(2 / (9 * k));
  return f;
}

void expect_fits(const Case& c, uint64_t seed, bool vary_seed = false) {
  const Expected e = expected_distribution(c);
  ASSERT_TRUE(e.unambiguous) << "test construction: a token sits on a min_p / top-p cut";
  const std::vector<int64_t> counts = histogram(c, seed, vary_seed);
  const Fit f = fit(counts, e.prob);
  ASSERT_GE(f.df, 3) << "too few bins for a meaningful test";
  EXPECT_LT(f.z, kRejectZ) << "chi2 " << f.chi2 << " df " << f.df;
  EXPECT_EQ(f.masked_draws, 0) << "masked tokens were drawn";
}

int64_t masked_tokens(const Case& c) {
  const Expected e = expected_distribution(c);
  return std::count(e.prob.begin(), e.prob.end(), 0.0);
}

Case base_case(size_t vocab, uint64_t logits_seed, float lo = -3.0f, float hi = 3.0f) {
  Case c;
  c.logits = lcg_logits(vocab, logits_seed, lo, hi);
  c.params.temperature = 1.0f;
  return c;
}

// Seed 101, steps 0..199,999; vocab 100; T = 0.7.
TEST(Distribution, TemperatureOnly) {
  Case c = base_case(100, 1);
  c.params.temperature = 0.7f;
  expect_fits(c, 101);
}

TEST(Distribution, WrongDistributionIsRejected) {
  // The same draws (seed 101, T = 0.7) against the T = 1 distribution must fail: the test has
  // power.
  Case c = base_case(100, 1);
  c.params.temperature = 0.7f;
  const std::vector<int64_t> counts = histogram(c, 101);
  Case wrong = c;
  wrong.params.temperature = 1.0f;
  EXPECT_GT(fit(counts, expected_distribution(wrong).prob).z, kRejectZ);
}

// Seeds 5000..204,999 at step 0; vocab 80; T = 1.6.
TEST(Distribution, TemperatureAboveOneVaryingTheSeed) {
  Case c = base_case(80, 2);
  c.params.temperature = 1.6f;
  expect_fits(c, 5000, /*vary_seed=*/true);
}

// Seed 202; vocab 120; T = 0.9, top_k = 12.
TEST(Distribution, TopK) {
  Case c = base_case(120, 3);
  c.params.temperature = 0.9f;
  c.params.top_k = 12;
  ASSERT_EQ(masked_tokens(c), 108);
  expect_fits(c, 202);
}

// Seed 303; vocab 150; T = 1, top_p = 0.75.
TEST(Distribution, TopP) {
  Case c = base_case(150, 4);
  c.params.top_p = 0.75f;
  ASSERT_GT(masked_tokens(c), 20);
  expect_fits(c, 303);
}

// Seed 404; vocab 150; T = 1.2, top_k = 30, top_p = 0.6 (of the renormalised top 30).
TEST(Distribution, TopKTopP) {
  Case c = base_case(150, 5);
  c.params.temperature = 1.2f;
  c.params.top_k = 30;
  c.params.top_p = 0.6f;
  ASSERT_GT(masked_tokens(c), 120);
  expect_fits(c, 404);
}

// Seed 505; vocab 100; T = 0.8, min_p = 0.08.
TEST(Distribution, MinP) {
  Case c = base_case(100, 6);
  c.params.temperature = 0.8f;
  c.params.min_p = 0.08f;
  ASSERT_GT(masked_tokens(c), 10);
  expect_fits(c, 505);
}

TEST(Distribution, ATopPSetOneTokenOffIsRejected) {
  // The draws of TopP (seed 303, top_p = 0.75) against the distribution with one token more in
  // the kept set (the smallest p above 0.75, in steps of 0.001, that keeps one more) must fail:
  // the boundary rule is in reach.
  Case c = base_case(150, 3);
  c.params.top_p = 0.75f;
  const std::vector<int64_t> counts = histogram(c, 303);
  Case wrong = c;
  const int64_t masked = masked_tokens(c);
  while (masked_tokens(wrong) >= masked) wrong.params.top_p += 0.001f;
  ASSERT_EQ(masked_tokens(wrong), masked - 1);
  EXPECT_GT(fit(counts, expected_distribution(wrong).prob).z, kRejectZ);
}

// An LLM-like long row: vocab 32000, a body uniform in [-3, 3] and every 997th token 6 higher (33
// of them), so that top-p keeps the head and part of the body.
Case long_row_case(uint64_t logits_seed) {
  Case c = base_case(32000, logits_seed);
  for (size_t i = 0; i < c.logits.size(); i += 997) c.logits[i] += 6.0f;
  return c;
}

// Seed 909; the long row at T = 0.8, top_p = 0.9: the cpu backend's blocked top-p draws from the
// caller's row.
TEST(Distribution, TopPOverALongRow) {
  Case c = long_row_case(10);
  c.params.temperature = 0.8f;
  c.params.top_p = 0.9f;
  const int64_t masked = masked_tokens(c);
  ASSERT_GT(masked, 1000);
  ASSERT_LT(masked, 32000 - 1000);
  expect_fits(c, 909);
}

// Seed 910; the long row penalised over a 600-token history (head tokens among them) at T = 0.7,
// top_p = 0.85: the cpu backend's draw from the penalised caller's row.
TEST(Distribution, PenalisedTopPOverALongRow) {
  Case c = long_row_case(11);
  c.params.temperature = 0.7f;
  c.params.top_p = 0.85f;
  c.params.repetition_penalty = 1.3f;
  c.params.frequency_penalty = 0.4f;
  c.params.presence_penalty = 0.2f;
  for (TokenId t = 0; t < 300; ++t) c.prompt.push_back(t * 101 % 32000);
  for (TokenId t = 0; t < 300; ++t) c.output.push_back(t % 5 == 0 ? t * 997 % 32000 : t * 89);
  const int64_t masked = masked_tokens(c);
  ASSERT_GT(masked, 1000);
  ASSERT_LT(masked, 32000 - 1000);
  expect_fits(c, 910);
}

// Seed 808; vocab 10000, logits uniform in [-2, 2]; min_p = 0.1 keeps those above -0.30, about
// 5750: a list long enough for the cpu backend's blocked walk with the vector exp.
TEST(Distribution, MinPKeepingALongList) {
  Case c = base_case(10000, 9, -2.0f, 2.0f);
  c.params.min_p = 0.1f;
  const int64_t masked = masked_tokens(c);
  ASSERT_GT(masked, 3000);
  ASSERT_LT(masked, 10000 - 4096 - 100);
  expect_fits(c, 808);
}

// Seed 606; vocab 60; repetition 1.4, frequency 0.3, presence 0.5 over a prompt and an output.
TEST(Distribution, Penalties) {
  Case c = base_case(60, 7, -2.0f, 2.0f);
  c.params.repetition_penalty = 1.4f;
  c.params.frequency_penalty = 0.3f;
  c.params.presence_penalty = 0.5f;
  c.prompt = {0, 1, 2, 3, 4, 5, 6, 7};
  c.output = {5, 5, 5, 9, 9, 10, 11, 12, 12, 12, 12, 40};
  expect_fits(c, 606);
}

// Seed 707; vocab 200; everything at once: bias, penalties, T = 0.75, min_p, top-k, top-p.
TEST(Distribution, AllTransformsTogether) {
  Case c = base_case(200, 8, -4.0f, 4.0f);
  c.params.temperature = 0.75f;
  c.params.logit_bias = {{3, 2.0f}, {50, -1.0f}, {199, 1.5f}};
  c.params.repetition_penalty = 1.2f;
  c.params.frequency_penalty = 0.2f;
  c.params.presence_penalty = 0.1f;
  c.params.min_p = 0.01f;
  c.params.top_k = 60;
  c.params.top_p = 0.85f;
  c.prompt = {3, 4, 5};
  c.output = {3, 50, 50, 199, 7};
  ASSERT_GT(masked_tokens(c), 140);
  expect_fits(c, 707);
}

// The Philox uniforms behind every draw: 200,000 of them (seed 9, steps 0..199,999) in 100 equal
// bins, plus 200,000 at step 0 over seeds 0..199,999. Same chi-square rule.
TEST(Distribution, PhiloxUniformsAreUniform) {
  for (bool vary_seed : {false, true}) {
    constexpr int kBins = 100;
    constexpr int64_t kUniforms = 200000;
    std::vector<int64_t> counts(kBins, 0);
    for (int64_t i = 0; i < kUniforms; ++i) {
      const auto k = static_cast<uint64_t>(i);
      const double u =
          vary_seed ? lastmile::detail::uniform_open(k, 0) : lastmile::detail::uniform_open(9, k);
      ASSERT_GT(u, 0.0);
      ASSERT_LT(u, 1.0);
      ++counts[static_cast<size_t>(u * kBins)];
    }
    const double expected = static_cast<double>(kUniforms) / kBins;
    double chi2 = 0;
    for (int64_t o : counts) chi2 += (o - expected) * (o - expected) / expected;
    const double df = kBins - 1;
    const double z = (std::cbrt(chi2 / df) - (1 - 2 / (9 * df))) / std::sqrt(2 / (9 * df));
    EXPECT_LT(z, kRejectZ) << "chi2 " << chi2 << (vary_seed ? " over seeds" : " over steps");
  }
}

}  // namespace
}  // namespace lastmile_test
