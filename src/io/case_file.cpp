// lastmile — case.json reading with a typed error for every malformed field, and output.json
// writing with non-finite floats as the strings "-inf", "inf", "nan".
#include "io/case_file.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "io/clip.hpp"
#include "io/input_file.hpp"
#include "io/unique_keys.hpp"
#include "lastmile/error.hpp"

namespace lastmile::io {
namespace {

using nlohmann::json;

class Reader {
 public:
  explicit Reader(std::string name) : name_(std::move(name)) {}

  [[noreturn]] void fail(const std::string& where, const std::string& what) const {
    throw InvalidArgument(name_ + ": " + where + ": " + what);
  }
  void expect(const json& v, bool ok, const std::string& where, const char* type) const {
    if (!ok) fail(where, std::string("expected ") + type + ", got " + describe(v));
  }
  // A short, single-line picture of a value: scalars as JSON (clipped), containers by type.
  // Never dumps a container: a deeply nested one would recurse without bound.
  static std::string describe(const json& v) {
    if (v.is_structured()) return std::string("an ") + v.type_name();
    return clip(v.dump());
  }
  double number(const json& v, const std::string& where) const {
    expect(v, v.is_number(), where, "a number");
    return v.get<double>();
  }
  int64_t integer(const json& v, const std::string& where, int64_t lo, int64_t hi) const {
    expect(v, v.is_number_integer(), where, "an integer");
    const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > uint64_t{INT64_MAX}
                          ? INT64_MAX
                          : v.get<int64_t>();
    if (x < lo || x > hi)
      fail(where, "expected an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                      "], got " + describe(v));
    return x;
  }
  TokenId token(const json& v, const std::string& where) const {
    return static_cast<TokenId>(integer(v, where, INT32_MIN, INT32_MAX));
  }
  std::vector<TokenId> tokens(const json& v, const std::string& where) const {
    expect(v, v.is_array(), where, "an array of token ids");
    std::vector<TokenId> ids;
    for (size_t i = 0; i < v.size(); ++i)
      ids.push_back(token(v[i], where + "[" + std::to_string(i) + "]"));
    return ids;
  }

 private:
  std::string name_;
};

void read_request(const Reader& r, const json& j, const std::string& where, Case& c) {
  r.expect(j, j.is_object(), where, "an object");
  RequestParams p;
  std::vector<TokenId> prompt, output, spec;
  for (const auto& [key, v] : j.items()) {
    const std::string at = where + "." + key;
    if (key == "temperature") {
      // Greedy is decided on the JSON's double, as vLLM's Python float: 9.9999999e-06 < 1e-5 is
      // greedy although it rounds to 1e-5f, which as a float is not.
      const double t = r.number(v, at);
      p.temperature = t >= 0 && t < 1e-5 ? 0.0f : static_cast<float>(t);
    } else if (key == "top_k")
      p.top_k = static_cast<int32_t>(r.integer(v, at, INT32_MIN, INT32_MAX));
    else if (key == "top_p")
      p.top_p = static_cast<float>(r.number(v, at));
    else if (key == "min_p")
      p.min_p = static_cast<float>(r.number(v, at));
    else if (key == "presence_penalty")
      p.presence_penalty = static_cast<float>(r.number(v, at));
    else if (key == "frequency_penalty")
      p.frequency_penalty = static_cast<float>(r.number(v, at));
    else if (key == "repetition_penalty")
      p.repetition_penalty = static_cast<float>(r.number(v, at));
    else if (key == "min_tokens")
      p.min_tokens = static_cast<int32_t>(r.integer(v, at, INT32_MIN, INT32_MAX));
    else if (key == "stop_token_ids")
      p.stop_token_ids = r.tokens(v, at);
    else if (key == "prompt_token_ids")
      prompt = r.tokens(v, at);
    else if (key == "output_token_ids")
      output = r.tokens(v, at);
    else if (key == "spec_token_ids")
      spec = r.tokens(v, at);
    else if (key == "seed") {
      // vLLM: -1 means no seed. Negative seeds are taken as their 64-bit two's complement.
      if (v.is_number_unsigned())
        p.seed = v.get<uint64_t>();
      else if (!v.is_null() && r.integer(v, at, INT64_MIN, INT64_MAX) != -1)
        p.seed = static_cast<uint64_t>(v.get<int64_t>());
    } else if (key == "allowed_token_ids") {
      if (!v.is_null()) p.allowed_token_ids = r.tokens(v, at);
    } else if (key == "logprob_token_ids") {
      if (!v.is_null()) p.logprob_token_ids = r.tokens(v, at);
    } else if (key == "logprobs") {
      if (!v.is_null()) p.logprobs = static_cast<int32_t>(r.integer(v, at, INT32_MIN, INT32_MAX));
    } else if (key == "bad_words_token_ids") {
      r.expect(v, v.is_array(), at, "an array of token id arrays");
      for (size_t i = 0; i < v.size(); ++i)
        p.bad_words_token_ids.push_back(r.tokens(v[i], at + "[" + std::to_string(i) + "]"));
    } else if (key == "logit_bias") {
      r.expect(v, v.is_object() || v.is_null(), at, "an object of token id -> bias");
      if (v.is_null()) continue;
      for (const auto& [id, bias] : v.items()) {
        // As str(int) writes them: stoll alone took " 3", "+3" and "03", which are other JSON
        // keys for token 3, and each bias was added.
        const size_t sign = !id.empty() && id[0] == '-' ? 1 : 0;
        const bool canonical =
            id.size() > sign && (id[sign] != '0' || id.size() == 1) &&
            std::all_of(id.begin() + static_cast<std::ptrdiff_t>(sign), id.end(),
                        [](unsigned char digit) { return digit >= '0' && digit <= '9'; });
        if (!canonical)
          r.fail(at, "keys must be decimal token ids as str(int) writes them, got \"" + clip(id) +
                         "\"");
        const long long token = id.size() - sign <= 10 ? std::stoll(id) : INT64_MAX;  // no overflow
        if (token < INT32_MIN || token > INT32_MAX)
          r.fail(at, "keys must be token ids that fit int32, got \"" + clip(id) + "\"");
        p.logit_bias.emplace_back(static_cast<TokenId>(token),
                                  static_cast<float>(r.number(bias, at + "." + clip(id))));
      }
    } else {
      r.fail(where + "." + clip(key), "unknown request field");
    }
  }
  c.params.push_back(std::move(p));
  c.prompt_token_ids.push_back(std::move(prompt));
  c.output_token_ids.push_back(std::move(output));
  c.spec_token_ids.push_back(std::move(spec));
}

json number_or_string(float v) {
  if (std::isnan(v)) return "nan";
  if (std::isinf(v)) return v > 0 ? "inf" : "-inf";
  return v;
}

json block_json(const LogprobsBlock& block, int64_t rows) {
  json ids = json::array(), values = json::array(), ranks = json::array();
  for (int64_t r = 0; r < rows; ++r) {
    json row_ids = json::array(), row_values = json::array();
    for (int64_t c = 0; c < block.width; ++c) {
      row_ids.push_back(block.token_ids[r * block.width + c]);
      row_values.push_back(number_or_string(block.logprobs[r * block.width + c]));
    }
    ids.push_back(std::move(row_ids));
    values.push_back(std::move(row_values));
    ranks.push_back(block.ranks[r]);
  }
  return {{"token_ids", ids}, {"logprobs", values}, {"ranks", ranks}};
}

}  // namespace

namespace {

struct NamedMode {
  const char* name;
  LogprobsMode mode;
};
constexpr NamedMode kNamedModes[] = {{"raw_logprobs", LogprobsMode::raw_logprobs},
                                     {"raw_logits", LogprobsMode::raw_logits},
                                     {"processed_logprobs", LogprobsMode::processed_logprobs},
                                     {"processed_logits", LogprobsMode::processed_logits}};

}  // namespace

const std::vector<std::string>& logprobs_mode_names() {
  static const std::vector<std::string> names = [] {
    std::vector<std::string> all;
    for (const NamedMode& m : kNamedModes) all.emplace_back(m.name);
    return all;
  }();
  return names;
}

LogprobsMode parse_logprobs_mode(const std::string& text) {
  for (const NamedMode& m : kNamedModes)
    if (text == m.name) return m.mode;
  const std::vector<std::string>& names = logprobs_mode_names();
  std::string list = names.front();
  for (size_t i = 1; i < names.size(); ++i)
    list += (i + 1 < names.size() ? ", " : " or ") + names[i];
  throw InvalidArgument("expected " + list + ", got \"" + clip(text) + "\"");
}

Case parse_case(const std::string& json_text, const std::string& name) {
  const Reader r(name);
  json j;
  // nlohmann's lexer takes a NUL byte for the end of the input: the text after one would be
  // dropped unread (and a file that starts with one reported as ending at column 1).
  if (const size_t nul = json_text.find('\0'); nul != std::string::npos)
    throw InvalidArgument(name + ": invalid JSON: a NUL byte at offset " + std::to_string(nul));
  try {
    j = parse_unique_keys(json_text, name);  // a key given twice is refused
  } catch (const json::exception& e) {       // parse_error, and out_of_range for numbers like 1e999
    throw InvalidArgument(name + ": invalid JSON: " + clip(e.what(), 200));
  }
  r.expect(j, j.is_object(), "top level", "an object");
  Case c;
  bool has_requests = false;
  for (const auto& [key, v] : j.items()) {
    if (key == "logits_dtype") {
      r.expect(v, v.is_string(), key, "a string");
      c.logits_dtype = v.get<std::string>();
      if (c.logits_dtype != "float32" && c.logits_dtype != "float16" &&
          c.logits_dtype != "bfloat16")
        r.fail(key, "expected float32, float16 or bfloat16, got " + Reader::describe(v));
    } else if (key == "logprobs_mode") {
      r.expect(v, v.is_string(), key, "a string");
      try {
        c.logprobs_mode = parse_logprobs_mode(v.get<std::string>());
      } catch (const InvalidArgument& e) {
        r.fail(key, e.what());
      }
    } else if (key == "max_num_logprobs") {
      if (!v.is_null())
        c.num_logprobs = static_cast<int32_t>(r.integer(v, key, INT32_MIN, INT32_MAX));
    } else if (key == "predict_bonus_token") {
      r.expect(v, v.is_boolean(), key, "true or false");
      c.predict_bonus_token = v.get<bool>();
    } else if (key == "requests") {
      r.expect(v, v.is_array(), key, "an array of requests");
      for (size_t i = 0; i < v.size(); ++i)
        read_request(r, v[i], "requests[" + std::to_string(i) + "]", c);
      has_requests = true;
    } else {
      r.fail(clip(key), "unknown case field");
    }
  }
  if (!has_requests) r.fail("requests", "missing");
  return c;
}

Case read_case(const std::string& path) {
  if (const char* why = unreadable_as_file(path)) throw InvalidArgument(path + ": " + why);
  std::ifstream in(path);
  if (!in) throw InvalidArgument(path + ": cannot open file");
  std::stringstream text;
  text << in.rdbuf();
  return parse_case(text.str(), path);
}

Batch Case::batch() const {
  Batch b;
  b.num_logprobs = num_logprobs;
  b.predict_bonus_token = predict_bonus_token;
  b.logprobs_mode = logprobs_mode;
  for (size_t i = 0; i < params.size(); ++i) {
    BatchRequest& row = b.requests.emplace_back();
    row.params = params[i];
    row.prompt_token_ids = prompt_token_ids[i];
    row.output_token_ids = output_token_ids[i];
    row.spec_token_ids = spec_token_ids[i];
  }
  return b;
}

LogitsView logits_view(const NpyArray& logits, const Case& c, const std::string& name) {
  const char* want = c.logits_dtype == "float32"   ? "<f4"
                     : c.logits_dtype == "float16" ? "<f2"
                                                   : "<u2";
  if (logits.descr != want)
    throw InvalidArgument(ErrorCode::invalid_logits,
                          name + ": dtype " + logits.descr + " does not match logits_dtype " +
                              c.logits_dtype + " (expected " + want + ")");
  if (logits.rows != static_cast<int64_t>(c.params.size()))
    throw InvalidArgument(ErrorCode::invalid_logits,
                          name + ": " + std::to_string(logits.rows) + " rows for " +
                              std::to_string(c.params.size()) + " requests");
  if (logits.cols < 1)
    throw InvalidArgument(ErrorCode::invalid_logits, name + ": vocab_size must be >= 1, got 0");
  const DType dtype = c.logits_dtype == "float32"   ? DType::f32
                      : c.logits_dtype == "float16" ? DType::f16
                                                    : DType::bf16;
  return {logits.data.data(), logits.rows, logits.cols, logits.cols, dtype};
}

std::string output_json(const SamplerOutput& out,
                        const std::vector<std::map<TokenId, int64_t>>* histograms) {
  json j;
  j["sampled"] = std::vector<TokenId>(out.sampled_token_ids.begin(), out.sampled_token_ids.end());
  if (out.logprobs.present()) j["logprobs"] = block_json(out.logprobs, out.num_rows);
  if (out.token_logprobs.present()) {
    json block = block_json(out.token_logprobs, out.num_rows);
    json valid = json::array();
    const int64_t w = out.token_logprobs.width;
    for (int64_t r = 0; r < out.num_rows; ++r) {
      json row = json::array();
      for (int64_t c = 0; c < w; ++c) row.push_back(out.token_logprobs.valid[r * w + c] != 0);
      valid.push_back(std::move(row));
    }
    block["valid"] = std::move(valid);
    j["token_logprobs"] = std::move(block);
  }
  if (histograms != nullptr) {
    json hists = json::array();
    for (const auto& h : *histograms) {
      json row = json::object();
      for (const auto& [token, count] : h) row[std::to_string(token)] = count;
      hists.push_back(std::move(row));
    }
    j["histograms"] = std::move(hists);
  }
  return j.dump();
}

}  // namespace lastmile::io
