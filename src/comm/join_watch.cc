#include "comm/join_watch.h"

#include <unistd.h>

#include <algorithm>
#include <optional>
#include <utility>
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
std::string ReportKey(const std::string& name, int64_t index) { return Prefix(name) + "failure/" + std::to_string(index); }

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
  // Its number first, then the report: a reader that finds the number but
  // not yet the report reads it again next time.
  Result<int64_t> index = root.Add(Prefix(name) + "failures", 1);
  const Status s = index.ok() ? root.Set(ReportKey(name, *index), JsonDump(report)) : index.status();
  if (!s.ok()) {
    CHOIR_LOG(Warn, INIT, "rank {} could not tell the others of communicator '{}' why it did not join: {}", rank,
              name, s.ToString());
  }
}

namespace {

// A report's fields, or nullopt when it is not one (withdrawn, or garbage).
struct Report {
  int64_t rank = -1;
  int64_t pid = -1;
  int64_t position = -1;
  std::string host;
  std::string error;
};

std::optional<Report> ParseReport(const std::string& text) {
  if (text.empty()) return std::nullopt;  // withdrawn
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object()) return std::nullopt;
  Report r;
  for (auto [key, out] : {std::pair{"rank", &r.rank}, std::pair{"pid", &r.pid}, std::pair{"position", &r.position}}) {
    auto it = j.find(key);
    if (it == j.end() || !it->is_number_integer()) return std::nullopt;
    *out = it->get<int64_t>();
  }
  auto error = j.find("error");
  if (error == j.end() || !error->is_string()) return std::nullopt;
  r.error = error->get<std::string>();
  auto host = j.find("host");
  if (host != j.end() && host->is_string()) r.host = host->get<std::string>();
  return r;
}

}  // namespace

void WithdrawJoinFailure(Store& root, const std::string& name, int rank) {
  const Result<int64_t> count = root.Add(Prefix(name) + "failures", 0);
  if (!count.ok()) return;
  for (int64_t i = 1; i <= *count; ++i) {
    const std::string key = ReportKey(name, i);
    Result<std::string> text = root.Get(key);
    if (!text.ok()) continue;
    const std::optional<Report> r = ParseReport(*text);
    // Only this process's own: a report by another process given the same
    // rank (a rank given twice) stands.
    if (!r || r->rank != rank || r->pid != static_cast<int64_t>(getpid())) continue;
    (void)root.CompareSet(key, *text, "");
  }
}

JoinWatch::JoinWatch(std::shared_ptr<Store> root, std::string name, int64_t first, int size)
    : root_(std::move(root)), name_(std::move(name)), first_(first), size_(size) {}

Status JoinWatch::Check() {
  CHOIR_ASSIGN_OR_RETURN(const int64_t count, root_->Add(Prefix(name_) + "failures", 0));
  // A number whose report is not written yet is read again next time (with
  // what follows it: its writer may also have died in between).
  int64_t first_missing = 0;
  for (int64_t i = seen_ + 1; i <= count; ++i) {
    Result<std::string> text = root_->Get(ReportKey(name_, i));
    if (!text.ok()) {
      if (text.status().code() != Code::kKeyNotFound) return text.status();
      if (first_missing == 0) first_missing = i;
      continue;
    }
    if (first_missing == 0) seen_ = i;
    const std::optional<Report> r = ParseReport(*text);
    if (!r || r->position < first_ || r->position >= first_ + size_) continue;  // withdrawn, or not this incarnation's
    return Status(Code::kRemoteError,
                  fmt::format("rank {} (pid {}{}) could not join communicator '{}': {}", r->rank, r->pid,
                              r->host.empty() ? "" : " on " + r->host, name_, r->error));
  }
  return Status::Ok();
}

std::shared_ptr<Store> NewWatchedStore(std::shared_ptr<Store> base, std::shared_ptr<JoinWatch> watch,
                                       std::chrono::milliseconds slice) {
  return std::make_shared<WatchedStore>(std::move(base), std::move(watch), slice);
}

}  // namespace choir::comm
