#include "transport/join_failure.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "base/json_text.h"

namespace choir::transport {
namespace {

using json = nlohmann::json;

// Ordinary values are JSON objects ("{"), "<segment> <token>" and
// "cma=..." text: none starts with this.
constexpr std::string_view kMarker = "choir-join-failed ";
constexpr size_t kMaxErrorChars = 2000;  // the value stays a small store value
constexpr size_t kMaxKeysPerCheck = 65536;  // choir/store.h

}  // namespace

std::string JoinFailureValue(const JoinFailure& f) {
  json j = {{"rank", f.rank}, {"pid", f.pid}, {"at_ns", f.at_ns}};
  if (!f.host.empty()) j["host"] = f.host;
  if (!f.where.empty()) j["where"] = f.where;
  if (!f.error.empty()) {
    j["error"] = f.error.size() > kMaxErrorChars ? f.error.substr(0, kMaxErrorChars) + "..." : f.error;
  }
  if (f.index > 0) j["index"] = f.index;
  return std::string(kMarker) + JsonDump(j);
}

std::optional<JoinFailure> ParseJoinFailure(const std::string& value) {
  if (value.compare(0, kMarker.size(), kMarker) != 0) return std::nullopt;
  const json j = json::parse(value.substr(kMarker.size()), nullptr, /*allow_exceptions=*/false);
  JoinFailure f;
  if (!j.is_object()) {
    f.error = "(unreadable failure value: " + value.substr(0, 200) + ")";
    return f;
  }
  auto number = [&](const char* key, int64_t* out) {
    auto it = j.find(key);
    if (it != j.end() && it->is_number_integer()) *out = it->get<int64_t>();
  };
  auto text = [&](const char* key, std::string* out) {
    auto it = j.find(key);
    if (it != j.end() && it->is_string()) *out = it->get<std::string>();
  };
  number("rank", &f.rank);
  number("pid", &f.pid);
  number("at_ns", &f.at_ns);
  number("index", &f.index);
  text("host", &f.host);
  text("where", &f.where);
  text("error", &f.error);
  return f;
}

std::string JoinFailureWho(const JoinFailure& failure) {
  return fmt::format("rank {} (pid {}{})", failure.rank, failure.pid, failure.host.empty() ? "" : " on " + failure.host);
}

Status JoinFailureStatus(const JoinFailure& failure, const std::string& comm_name) {
  return Status(Code::kRemoteError,
                fmt::format("{} could not join communicator '{}': {}", JoinFailureWho(failure), comm_name,
                            failure.error.empty() ? std::string("(its error was not kept)") : failure.error));
}

bool IsOwnEarlierFailure(const JoinFailure& failure, int rank, const std::string& where, int64_t since_ns) {
  return failure.rank == rank && failure.pid == static_cast<int64_t>(getpid()) && failure.where == where &&
         failure.at_ns < since_ns;
}

Status FillMissingKeys(Store& store, std::span<const std::string> keys, const std::string& value) {
  if (keys.empty()) return Status::Ok();
  if (keys.size() > kMaxKeysPerCheck) {
    for (size_t at = 0; at < keys.size(); at += kMaxKeysPerCheck) {
      CHOIR_RETURN_IF_ERROR(
          FillMissingKeys(store, keys.subspan(at, std::min(kMaxKeysPerCheck, keys.size() - at)), value));
    }
    return Status::Ok();
  }
  CHOIR_ASSIGN_OR_RETURN(const bool all_there, store.Check(std::vector<std::string>(keys.begin(), keys.end())));
  if (all_there) return Status::Ok();
  if (keys.size() == 1) return store.Set(keys[0], value);
  const size_t half = keys.size() / 2;
  CHOIR_RETURN_IF_ERROR(FillMissingKeys(store, keys.first(half), value));
  return FillMissingKeys(store, keys.subspan(half), value);
}

}  // namespace choir::transport
