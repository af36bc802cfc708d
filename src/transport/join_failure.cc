#include "transport/join_failure.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "base/clock.h"
#include "base/json_text.h"

namespace choir::transport {
namespace {

using json = nlohmann::json;

// Ordinary values are JSON objects ("{"), "<segment> <token>" and
// "cma=..." text: none starts with this.
constexpr std::string_view kMarker = "choir-join-failed ";
constexpr size_t kMaxErrorChars = 2000;  // the value stays a small store value
constexpr size_t kMaxKeysPerCheck = 65536;  // choir/store.h

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

std::string JoinFailureValue(int rank, const Status& error) {
  std::string text = error.ToString();
  if (text.size() > kMaxErrorChars) text = text.substr(0, kMaxErrorChars) + "...";
  const json j = {{"rank", rank},
                  {"pid", static_cast<int64_t>(getpid())},
                  {"host", HostName()},
                  {"at_ns", NowNanos()},
                  {"error", text}};
  return std::string(kMarker) + JsonDump(j);
}

std::optional<JoinFailure> ParseJoinFailure(const std::string& value) {
  if (value.compare(0, kMarker.size(), kMarker) != 0) return std::nullopt;
  const json j = json::parse(value.substr(kMarker.size()), nullptr, /*allow_exceptions=*/false);
  JoinFailure f;
  f.error = "(unreadable report: " + value.substr(0, 200) + ")";
  if (!j.is_object()) return f;  // still a failure: the others must not wait on
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
  text("host", &f.host);
  text("error", &f.error);
  return f;
}

Status JoinFailureStatus(const JoinFailure& failure, const std::string& comm_name) {
  return Status(Code::kRemoteError,
                fmt::format("rank {} (pid {}{}) could not join communicator '{}': {}", failure.rank, failure.pid,
                            failure.host.empty() ? "" : " on " + failure.host, comm_name, failure.error));
}

bool IsOwnEarlierFailure(const JoinFailure& failure, int rank, int64_t since_ns) {
  return failure.rank == rank && failure.pid == static_cast<int64_t>(getpid()) && failure.at_ns < since_ns;
}

Status FillMissingKeys(Store& store, std::span<const std::string> keys, const std::string& value) {
  if (keys.empty()) return Status::Ok();
  Status first;
  if (keys.size() > kMaxKeysPerCheck) {
    for (size_t at = 0; at < keys.size(); at += kMaxKeysPerCheck) {
      Status s = FillMissingKeys(store, keys.subspan(at, std::min(kMaxKeysPerCheck, keys.size() - at)), value);
      if (first.ok()) first = s;
    }
    return first;
  }
  const Result<bool> all_there = store.Check(std::vector<std::string>(keys.begin(), keys.end()));
  if (!all_there.ok()) return all_there.status();
  if (*all_there) return Status::Ok();
  if (keys.size() == 1) {
    // Only where nothing is: a value that arrived meanwhile is a real one.
    const Result<std::string> after = store.CompareSet(keys[0], "", value);
    return after.ok() ? Status::Ok() : after.status();
  }
  const size_t half = keys.size() / 2;
  first = FillMissingKeys(store, keys.first(half), value);
  const Status second = FillMissingKeys(store, keys.subspan(half), value);
  return first.ok() ? second : first;
}

}  // namespace choir::transport
