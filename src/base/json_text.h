// JSON text for output, store values and messages: text that is not UTF-8
// (a host name, an environment value) is replaced by U+FFFD instead of
// making nlohmann::json throw, which would end the program.
//
// Thread-safety: no shared state.
#ifndef CHOIR_BASE_JSON_TEXT_H_
#define CHOIR_BASE_JSON_TEXT_H_

#include <string>

#include <nlohmann/json.hpp>

namespace choir {

// `j` as text, on one line (indent -1) or indented by `indent` spaces.
// Works for nlohmann::json and nlohmann::ordered_json.
template <typename Json>
std::string JsonDump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', false, Json::error_handler_t::replace);
}

}  // namespace choir

#endif  // CHOIR_BASE_JSON_TEXT_H_
