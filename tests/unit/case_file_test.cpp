// case.json reading (src/io/case_file.cpp): field mapping, vLLM's conventions, typed errors.
#include "io/case_file.hpp"

#include <gtest/gtest.h>

#include "lastmile/error.hpp"

namespace {

using lastmile::InvalidArgument;
using lastmile::io::parse_case;

std::string message_of(const std::string& json) {
  try {
    parse_case(json);
  } catch (const InvalidArgument& e) {
    return e.what();
  }
  return "(no error)";
}

// A NUL byte ends nlohmann's input: a valid case followed by one and garbage would parse as the
// case alone. Any NUL is refused, with its offset.
TEST(CaseFile, ANulByteIsRefusedNotTakenForTheEnd) {
  const std::string valid = R"({"requests": [{}, {}]})";
  EXPECT_EQ(message_of(valid + std::string(1, '\0') + R"({"this is": garbage)"),
            "case.json: invalid JSON: a NUL byte at offset " + std::to_string(valid.size()));
  EXPECT_EQ(message_of(std::string("\0\x01\x02", 3)),
            "case.json: invalid JSON: a NUL byte at offset 0");
}

// JSON parsers keep the last of two equal keys: a field given twice would be read once, silently.
// It is refused wherever it is, with its path.
TEST(CaseFile, AKeyGivenTwiceInOneObjectIsRefusedWithItsPath) {
  EXPECT_EQ(message_of(R"({"requests": [{}], "requests": [{}, {}]})"),
            "case.json: requests: given twice in one object");
  EXPECT_EQ(message_of(R"({"requests": [{"prompt_token_ids": [1, 2], "logit_bias": {"1": 1},
                                         "bad_words_token_ids": [[1, 2], [3]]},
                                        {"seed": 1, "temperature": 0.5, "seed": 2}]})"),
            "case.json: requests[1].seed: given twice in one object");
  EXPECT_EQ(message_of(R"({"requests": [{"logit_bias": {"3": 1.0, "4": 0, "3": 2.0}}]})"),
            "case.json: requests[0].logit_bias.3: given twice in one object");
  EXPECT_EQ(message_of(R"({"requests": [{}], "": 1, "": 2})"),
            "case.json: \"\": given twice in one object");  // an empty key, shown as one
  // Equal keys in different objects are not duplicates.
  const auto c = parse_case(R"({"requests": [{"seed": 1, "logit_bias": {"3": 1}},
                                              {"seed": 2, "logit_bias": {"3": 2}}]})");
  ASSERT_EQ(c.params.size(), 2u);
  EXPECT_EQ(c.params[1].seed, std::optional<uint64_t>(2));
  ASSERT_EQ(c.params[1].logit_bias.size(), 1u);
  EXPECT_EQ(c.params[1].logit_bias[0].second, 2.0f);
}

TEST(CaseFile, GreedyIsDecidedOnTheJsonDouble) {
  // 9.9999999e-06 < 1e-5 in double, but rounds to 1e-5f: vLLM calls it greedy (spec §8.1).
  const auto c =
      parse_case(R"({"requests": [{"temperature": 9.9999999e-06}, {"temperature": 1e-05}]})");
  EXPECT_TRUE(c.params[0].is_greedy());
  EXPECT_FALSE(c.params[1].is_greedy());
}

TEST(CaseFile, SeedMinusOneMeansUnseeded) {
  const auto c = parse_case(
      R"({"requests": [{"seed": -1}, {"seed": 18446744073709551615}, {"seed": null}, {"seed": 7}]})");
  EXPECT_FALSE(c.params[0].seed.has_value());
  EXPECT_EQ(c.params[1].seed, 18446744073709551615ull);
  EXPECT_FALSE(c.params[2].seed.has_value());
  EXPECT_EQ(c.params[3].seed, 7u);
}

TEST(CaseFile, ReadsEveryRequestField) {
  const auto c = parse_case(R"({
    "logits_dtype": "bfloat16", "logprobs_mode": "processed_logits", "max_num_logprobs": -1,
    "predict_bonus_token": true,
    "requests": [{"temperature": 0.5, "top_k": 3, "top_p": 0.25, "min_p": 0.125,
                  "presence_penalty": 0.5, "frequency_penalty": -0.5, "repetition_penalty": 1.5,
                  "logit_bias": {"4": 2.5}, "allowed_token_ids": [1, 2],
                  "bad_words_token_ids": [[3], [4, 5]], "min_tokens": 2, "stop_token_ids": [9],
                  "prompt_token_ids": [1], "output_token_ids": [2, 3], "spec_token_ids": [4],
                  "logprob_token_ids": [6], "logprobs": 2}]})");
  const auto& p = c.params[0];
  EXPECT_EQ(c.logits_dtype, "bfloat16");
  EXPECT_EQ(c.logprobs_mode, lastmile::LogprobsMode::processed_logits);
  EXPECT_EQ(c.num_logprobs, -1);
  EXPECT_TRUE(c.predict_bonus_token);
  EXPECT_EQ(p.temperature, 0.5f);
  EXPECT_EQ(p.top_k, 3);
  EXPECT_EQ(p.top_p, 0.25f);
  EXPECT_EQ(p.min_p, 0.125f);
  EXPECT_EQ(p.presence_penalty, 0.5f);
  EXPECT_EQ(p.frequency_penalty, -0.5f);
  EXPECT_EQ(p.repetition_penalty, 1.5f);
  ASSERT_EQ(p.logit_bias.size(), 1u);
  EXPECT_EQ(p.logit_bias[0], (std::pair<lastmile::TokenId, float>{4, 2.5f}));
  EXPECT_EQ(*p.allowed_token_ids, (std::vector<lastmile::TokenId>{1, 2}));
  EXPECT_EQ(p.bad_words_token_ids, (std::vector<std::vector<lastmile::TokenId>>{{3}, {4, 5}}));
  EXPECT_EQ(p.min_tokens, 2);
  EXPECT_EQ(p.stop_token_ids, (std::vector<lastmile::TokenId>{9}));
  EXPECT_EQ(c.prompt_token_ids[0], (std::vector<lastmile::TokenId>{1}));
  EXPECT_EQ(c.output_token_ids[0], (std::vector<lastmile::TokenId>{2, 3}));
  EXPECT_EQ(c.spec_token_ids[0], (std::vector<lastmile::TokenId>{4}));
  EXPECT_EQ(*p.logprob_token_ids, (std::vector<lastmile::TokenId>{6}));
  EXPECT_EQ(p.logprobs, 2);
  const lastmile::Batch batch = c.batch();
  ASSERT_EQ(batch.requests.size(), 1u);
  EXPECT_EQ(batch.requests[0].output_token_ids.size(), 2u);
  EXPECT_TRUE(batch.predict_bonus_token);
}

TEST(CaseFile, ErrorsNameTheFieldAndStayShort) {
  EXPECT_EQ(message_of(R"({"requests": [{"top_k": 1.5}]})"),
            "case.json: requests[0].top_k: expected an integer, got 1.5");
  EXPECT_EQ(message_of(R"({"requests": [{"stop_token_ids": [[1]]}]})"),
            "case.json: requests[0].stop_token_ids[0]: expected an integer, got an array");
  EXPECT_EQ(message_of(R"({"requests": [{"logit_bias": {"1x": 1}}]})"),
            "case.json: requests[0].logit_bias: keys must be decimal token ids as str(int) writes "
            "them, got \"1x\"");
  EXPECT_EQ(message_of(R"({"requests": {}})"),
            "case.json: requests: expected an array of requests, got an object");
  EXPECT_EQ(message_of(R"({"logprobs_mode": "raw_logprob", "requests": [{}]})"),
            "case.json: logprobs_mode: expected raw_logprobs, raw_logits, processed_logprobs or "
            "processed_logits, got \"raw_logprob\"");
  const std::string long_string(1000, 'a');
  const std::pair<std::string, size_t> long_values[] = {
      {R"({"requests": [{"top_p": ")" + long_string + R"("}]})", 140},
      {R"({"logprobs_mode": ")" + long_string + R"(\n"})", 200}};  // the four names, then 60
  for (const auto& [json, most] : long_values) {
    const std::string m = message_of(json);
    EXPECT_LT(m.size(), most) << m;
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
  }
}

// Each of the four names reads as its own mode; the CLI's --logprobs-mode takes the same list.
TEST(CaseFile, ReadsEachLogprobsModeByName) {
  const std::vector<std::string>& names = lastmile::io::logprobs_mode_names();
  ASSERT_EQ(names.size(), 4u);
  const lastmile::LogprobsMode modes[] = {
      lastmile::LogprobsMode::raw_logprobs, lastmile::LogprobsMode::raw_logits,
      lastmile::LogprobsMode::processed_logprobs, lastmile::LogprobsMode::processed_logits};
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(lastmile::io::parse_logprobs_mode(names[i]), modes[i]) << names[i];
    EXPECT_EQ(
        parse_case(R"({"logprobs_mode": ")" + names[i] + R"(", "requests": [{}]})").logprobs_mode,
        modes[i])
        << names[i];
  }
}

}  // namespace
