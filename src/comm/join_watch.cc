#include "comm/join_watch.h"

#include <unistd.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "base/json_text.h"
#include "base/logging.h"
#include "base/strings.h"

namespace choir::comm {
namespace {

using json = nlohmann::json;

constexpr size_t kMaxErrorChars = 2000;  // a report stays a small store value

std::string Prefix(const std::string& name) { return "choir/" + name + "/"; }
std::string ReportKey(const std::string& name, int rank) { return Prefix(name) + "failed/" + std::to_string(rank); }

std::string HostName() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return host;
}

// The StoreTimeout of the last slice names the keys still missing but only
// the slice's wait: it gets the whole wait.
Status WithWholeWait(const Status& s, std::chrono::milliseconds timeout) {
  const std::string& m = s.message();
  const size_t ms = m.find(" ms for ");
  if (m.rfind("waited ", 0) != 0 || ms == std::string::npos) return s;
  return Status(s.code(), fmt::format("waited {}{}", timeout.count(), m.substr(ms)));
}

class WatchedStore : public Store {
 public:
  WatchedStore(std::shared_ptr<Store> base, std::shared_ptr<JoinWatch> watch, std::chrono::milliseconds slice)
      : base_(std::move(base)), watch_(std::move(watch)), slice_(std::max(slice, std::chrono::milliseconds(1))) {}

  Status Set(const std::string& key, const std::string& value) override { return base_->Set(key, value); }
  Result<std::string> Get(const std::string& key) override { return base_->Get(key); }
  Result<int64_t> Add(const std::string& key, int64_t delta) override { return base_->Add(key, delta); }
  Result<std::string> CompareSet(const std::string& key, const std::string& expected,
                                 const std::string& desired) override {
    return base_->CompareSet(key, expected, desired);
  }
  Result<bool> Delete(const std::string& key) override { return base_->Delete(key); }
  Result<bool> Check(const std::vector<std::string>& keys) override { return base_->Check(keys); }

  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    using Clock = std::chrono::steady_clock;
    CHOIR_RETURN_IF_ERROR(watch_->Check());
    if (timeout.count() <= 0) return base_->Wait(keys, timeout);
    const auto end = Clock::now() + timeout;
    while (true) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now());
      const Status s = base_->Wait(keys, std::clamp(left, std::chrono::milliseconds(1), slice_));
      if (s.code() != Code::kStoreTimeout) return s;
      if (Clock::now() >= end) return WithWholeWait(s, timeout);
      CHOIR_RETURN_IF_ERROR(watch_->Check());
    }
  }

 private:
  std::shared_ptr<Store> base_;
  std::shared_ptr<JoinWatch> watch_;
  std::chrono::milliseconds slice_;
};

}  // namespace

bool IsJoinFailureToReport(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
    case Code::kStoreTimeout:
    case Code::kStoreUnreachable:
    case Code::kStoreProtocol:
    case Code::kStoreIo:
    case Code::kConnectTimeout:
    case Code::kPeerLost:
    case Code::kRemoteError:
      return false;
    default:
      return true;
  }
}

void ReportJoinFailure(Store& root, const std::string& name, int64_t position, int rank, const Status& error) {
  std::string text = error.ToString();
  if (text.size() > kMaxErrorChars) text = text.substr(0, kMaxErrorChars) + "...";
  const json report = {{"rank", rank},
                       {"pid", static_cast<int64_t>(getpid())},
                       {"host", HostName()},
                       {"position", position},
                       {"error", text}};
  // The report first, then its number: a reader that sees the number finds it.
  Status s = root.Set(ReportKey(name, rank), JsonDump(report));
  Result<int64_t> index = s.ok() ? root.Add(Prefix(name) + "failures", 1) : Result<int64_t>(s);
  if (index.ok()) s = root.Set(Prefix(name) + "failure/" + std::to_string(*index), std::to_string(rank));
  if (!index.ok()) s = index.status();
  if (!s.ok()) {
    CHOIR_LOG(Warn, INIT, "rank {} could not tell the others of communicator '{}' why it did not join: {}", rank,
              name, s.ToString());
  }
}

void WithdrawJoinFailure(Store& root, const std::string& name, int rank) {
  const std::string key = ReportKey(name, rank);
  Result<std::string> old = root.Get(key);
  if (!old.ok() || old->empty()) return;  // nothing reported (KeyNotFound), or withdrawn
  const json report = json::parse(*old, nullptr, /*allow_exceptions=*/false);
  if (!report.is_object() || !report.contains("pid") || !report["pid"].is_number_integer() ||
      report["pid"].get<int64_t>() != static_cast<int64_t>(getpid())) {
    return;  // another process's report (a rank given twice): it stands
  }
  // Only the report read above: one made meanwhile by another process stays.
  (void)root.CompareSet(key, *old, "");
}

JoinWatch::JoinWatch(std::shared_ptr<Store> root, std::string name, int64_t first, int size)
    : root_(std::move(root)), name_(std::move(name)), first_(first), size_(size) {}

Status JoinWatch::Check() {
  CHOIR_ASSIGN_OR_RETURN(const int64_t count, root_->Add(Prefix(name_) + "failures", 0));
  // A number whose rank is not written yet is read again next time (with
  // what follows it: its writer may also have died in between).
  int64_t first_missing = 0;
  for (int64_t i = seen_ + 1; i <= count; ++i) {
    Result<std::string> who = root_->Get(Prefix(name_) + "failure/" + std::to_string(i));
    if (!who.ok()) {
      if (who.status().code() != Code::kKeyNotFound) return who.status();
      if (first_missing == 0) first_missing = i;
      continue;
    }
    if (first_missing == 0) seen_ = i;
    const std::optional<int64_t> r = strings::ParseInt(*who);
    if (!r) continue;
    Result<std::string> text = root_->Get(ReportKey(name_, static_cast<int>(*r)));
    if (!text.ok() || text->empty()) continue;  // withdrawn
    const json report = json::parse(*text, nullptr, /*allow_exceptions=*/false);
    if (!report.is_object()) continue;
    const auto field = [&](const char* k) -> const json* {
      auto it = report.find(k);
      return it == report.end() ? nullptr : &*it;
    };
    const json* pid = field("pid");
    const json* position = field("position");
    const json* error = field("error");
    const json* host = field("host");
    if (pid == nullptr || !pid->is_number_integer() || position == nullptr || !position->is_number_integer() ||
        error == nullptr || !error->is_string()) {
      continue;
    }
    const int64_t at = position->get<int64_t>();
    if (at < first_ || at >= first_ + size_) continue;  // another incarnation's
    const std::string where = host != nullptr && host->is_string() ? " on " + host->get<std::string>() : "";
    return Status(Code::kRemoteError, fmt::format("rank {} (pid {}{}) could not join communicator '{}': {}", *r,
                                                  pid->get<int64_t>(), where, name_, error->get<std::string>()));
  }
  return Status::Ok();
}

std::shared_ptr<Store> NewWatchedStore(std::shared_ptr<Store> base, std::shared_ptr<JoinWatch> watch,
                                       std::chrono::milliseconds slice) {
  return std::make_shared<WatchedStore>(std::move(base), std::move(watch), slice);
}

}  // namespace choir::comm
