// lastmile — JSON parsed with every object's keys unique. nlohmann, like Python's json.loads, keeps
// the last of two equal keys and drops the first unread: {"temperature": 0, "temperature": 1} would
// sample at 1 with no word. A case that names a field twice is more likely a slip than a wish.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace lastmile::io {

// nlohmann::json::parse(text), but a key given twice in one object throws InvalidArgument
// "<name>: <path>: given twice in one object", the path as the case's errors write it
// ("requests[0].logit_bias.3", clipped to 200 characters). Parse errors throw nlohmann's
// exceptions, as parse does. Two passes, both linear: a check that builds nothing, then parse.
nlohmann::json parse_unique_keys(const std::string& text, const std::string& name);

}  // namespace lastmile::io
