// lastmile — JSON parsed with every object's keys unique (unique_keys.hpp).
#include "io/unique_keys.hpp"

#include <set>
#include <vector>

#include "io/clip.hpp"
#include "lastmile/error.hpp"

namespace lastmile::io {
namespace {

// Follows nlohmann's parse events: one frame per open object or array, holding where the parser
// is inside it (the last key read, or the index of the next element) and an object's keys so far.
class UniqueKeys {
 public:
  explicit UniqueKeys(const std::string& name) : name_(name) {}

  bool operator()(int /*depth*/, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    switch (event) {
      case Event::object_start:
      case Event::array_start:
        frames_.push_back({event == Event::object_start, {}, 0, {}});
        break;
      case Event::key: {
        Frame& f = frames_.back();
        f.key = parsed.get<std::string>();
        if (!f.keys.insert(f.key).second)
          throw InvalidArgument(name_ + ": " + path() + ": given twice in one object");
        break;
      }
      case Event::object_end:
      case Event::array_end:
        frames_.pop_back();
        element_done();
        break;
      case Event::value:
        element_done();
        break;
    }
    return true;  // keep every value
  }

 private:
  struct Frame {
    bool object;
    std::string key;  // an object's last key
    size_t index;     // an array's next element
    std::set<std::string> keys;
  };

  void element_done() {
    if (!frames_.empty() && !frames_.back().object) ++frames_.back().index;
  }

  // Where the parser is, from the top level down: requests[0].logit_bias.3
  std::string path() const {
    std::string out;
    for (const Frame& f : frames_) {
      if (!f.object)
        out += "[" + std::to_string(f.index) + "]";
      else
        out += (out.empty() ? "" : ".") + (f.key.empty() ? std::string("\"\"") : clip(f.key));
    }
    return out;
  }

  const std::string& name_;
  std::vector<Frame> frames_;
};

}  // namespace

nlohmann::json parse_unique_keys(const std::string& text, const std::string& name) {
  UniqueKeys check(name);
  return nlohmann::json::parse(
      text, [&check](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
        return check(depth, event, parsed);
      });
}

}  // namespace lastmile::io
