#include "comm/join_reports.h"

#include <unistd.h>

#include <chrono>
#include <nlohmann/json.hpp>
#include <optional>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "base/logging.h"
#include "comm/join_sizes.h"
#include "transport/join_failure.h"

namespace choir::comm {
namespace {

using json = nlohmann::json;
using transport::JoinFailure;

// How long a process given a rank outside the world waits for the world to
// form before it fills the hellos still missing.
constexpr std::chrono::seconds kStrayGrace{2};
// Larger worlds are not filled (a value per missing hello would be too much
// for the store): their timeout names the failure.
constexpr int kMaxFilledWorld = 65536;

// An incarnation of a communicator name whose missing hellos may be filled.
struct World {
  int64_t incarnation;
  int size;
};

std::string FailureCountKey(const std::string& name) { return "choir/" + name + "/failures"; }

std::string FailureRecordKey(const std::string& name, int64_t index) {
  return fmt::format("choir/{}/failure/{}", name, index);
}

// Record `index` under the name, or nullopt when it cannot be read.
std::optional<JoinFailure> ReadFailureRecord(Store& store, const std::string& name, int64_t index) {
  const Result<std::string> value = store.Get(FailureRecordKey(name, index));
  return value.ok() ? transport::ParseJoinFailure(*value) : std::nullopt;
}

// The whole failure a short value in a hello key points to (itself when it
// is whole, or when the record cannot be read).
JoinFailure WholeFailure(Store& store, const std::string& name, const JoinFailure& f) {
  if (!f.error.empty() || f.index <= 0) return f;
  return ReadFailureRecord(store, name, f.index).value_or(f);
}

// The world a process outside its own stops: it took no position, and
// `position` is the counter's value when it failed. After the grace, the
// world whose range holds both that position and the next one to be taken,
// if someone joined it: of the world size the ranks before the next
// position recorded (comm/join_sizes.h), or the process's own when none is
// recorded. So one process too many neither stops a world that forms within
// the grace nor touches a later incarnation, whichever of the ranks came
// first. Only a size that was read says that a range is whole: a rank that
// has taken its position but not yet recorded its size (or never will)
// leaves the question open until the last look.
Result<std::optional<World>> StrayWorld(Store& store, const std::string& name, int64_t position, int size) {
  const auto until = std::chrono::steady_clock::now() + kStrayGrace;
  while (true) {
    const bool last_look = std::chrono::steady_clock::now() >= until;
    CHOIR_ASSIGN_OR_RETURN(const int64_t joined, store.Add("choir/" + name + "/joined", 0));
    std::optional<JoinSizeRecord> record;
    // The last position's record, else (not written yet) the one before it.
    for (int64_t p = joined - 1; p >= std::max<int64_t>(0, joined - 2) && !record; --p) {
      const auto wait = std::chrono::milliseconds(last_look && p == joined - 1 ? 100 : 0);
      CHOIR_ASSIGN_OR_RETURN(record, ReadJoinSize(store, name, p, wait, Deadline::Infinite()));
    }
    const int theirs = record ? record->size : size;
    const int64_t k = position / theirs;
    const bool whole = joined >= (k + 1) * theirs;  // that range is complete: its world formed
    if (whole && (record || last_look)) return std::optional<World>();
    if (last_look) return joined > k * theirs ? std::optional<World>(World{k, theirs}) : std::optional<World>();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

// Whether the process that left failure `f` has since joined as its rank (a
// retry): its hello is real, comes from the same process and was made after
// the failure (a twin given the same rank in one process made it before).
bool FailedProcessJoinedSince(Store& scoped, const JoinFailure& f, int size) {
  if (f.rank < 0 || f.rank >= size) return false;
  const Result<std::string> text = scoped.Get("hello/" + std::to_string(f.rank));
  if (!text.ok() || transport::ParseJoinFailure(*text)) return false;
  const json h = json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (!h.is_object()) return false;
  const auto pid = h.find("pid");
  const auto netns = h.find("netns");
  const auto made = h.find("made_ns");
  return pid != h.end() && pid->is_number_integer() && pid->get<int64_t>() == f.pid && netns != h.end() &&
         netns->is_string() && netns->get<std::string>() == f.where && made != h.end() &&
         made->is_number_integer() && made->get<int64_t>() > f.at_ns;
}

}  // namespace

bool IsJoinFailureToReport(const Status& s) {
  switch (s.code()) {
    case Code::kOk:
    case Code::kStoreTimeout:
    case Code::kStoreUnreachable:
    case Code::kStoreProtocol:
    case Code::kKeyNotFound:
    case Code::kStoreIo:
    case Code::kConnectTimeout:
    case Code::kConnectRefused:
    case Code::kPeerLost:
    case Code::kAborted:
    case Code::kRemoteError:
      return false;
    default:
      return true;
  }
}

// The whole failure is kept under the name (choir/N/failure/I): for the
// timeout of ranks that computed another incarnation (RecentJoinFailures),
// and as what the short values in hello keys point to. Before its hello is
// published the others wait for hellos: the first failing rank of an
// incarnation fills every hello still missing in the one its join position
// falls in (a rank given twice also the next one, where the ranks that join
// after its surplus join land; a process outside the world only after the
// grace, and only a partly joined incarnation, of the world size the rank
// before it recorded: StrayWorld; a world-size conflict, found before the
// hello, also the next one and the other rank's world). After it, they wait
// for its segment, its readiness or its TCP connection: those keys and
// `failed` get the failure. Stops at the first store error (a store that does not answer
// would make every further call wait for its own timeout).
void ReportJoinFailure(const std::shared_ptr<Store>& store, const JoinStanding& at, const Status& error) {
  const std::string& name = at.name;
  const int rank = at.rank;
  JoinFailure failure{rank, getpid(), at.host, at.where, NowNanos(), error.ToString()};
  const int64_t incarnation = at.position / at.size;
  const bool stray = rank < 0 || rank >= at.size;
  // The incarnations whose missing hellos are filled (a stray's: StrayWorld).
  std::vector<World> worlds;
  if (at.conflict) {
    // A world-size conflict (comm/join_sizes.h): positions are out of step
    // with this world size, so the ranks of its size that come after it
    // land in its incarnation or the next; and the other rank's world
    // cannot form when its range holds this rank's position.
    worlds.push_back({incarnation, at.size});
    worlds.push_back({incarnation + 1, at.size});
    if (at.other_incarnation >= 0) worlds.push_back({at.other_incarnation, at.other_size});
  } else if (!at.hello_published && !stray) {
    worlds.push_back({incarnation, at.size});
    if (at.twice) worlds.push_back({incarnation + 1, at.size});
  }
  auto report = [&]() -> Status {
    CHOIR_ASSIGN_OR_RETURN(failure.index, store->Add(FailureCountKey(name), 1));
    const std::string full = transport::JoinFailureValue(failure);
    CHOIR_RETURN_IF_ERROR(store->Set(FailureRecordKey(name, failure.index), full));
    if (at.hello_published) {
      // Only this rank writes its own keys: where they are missing, Set,
      // which wakes every store's waiters; a value it published already
      // stands (peers that read it go on to their own checks).
      auto scoped = NewPrefixStore("choir/" + name + "#" + std::to_string(incarnation), store);
      for (const std::string& key : {"shm/" + std::to_string(rank), "ready/" + std::to_string(rank),
                                     std::string(transport::kJoinFailedKey)}) {
        CHOIR_ASSIGN_OR_RETURN(const bool there, scoped->Check({key}));
        if (!there) CHOIR_RETURN_IF_ERROR(scoped->Set(key, full));
      }
    }
    JoinFailure pointer = failure;
    pointer.error.clear();
    const std::string value = transport::JoinFailureValue(pointer);
    if (stray && !at.hello_published) {
      CHOIR_ASSIGN_OR_RETURN(const std::optional<World> w, StrayWorld(*store, name, at.position, at.size));
      if (w) worlds.push_back(*w);
    }
    for (const World& w : worlds) {
      const int64_t k = w.incarnation;
      const int size = w.size;
      if (size > kMaxFilledWorld) continue;
      std::vector<std::string> keys;
      keys.reserve(static_cast<size_t>(size));
      for (int r = 0; r < size; ++r) keys.push_back(fmt::format("choir/{}#{}/hello/{}", name, k, r));
      // The first failing rank of an incarnation (of this world size) fills
      // it; after that no hello is missing there (keys are never removed).
      CHOIR_ASSIGN_OR_RETURN(const int64_t filler,
                             store->Add(fmt::format("choir/{}#{}/filling/{}", name, k, size), 1));
      if (filler == 1) CHOIR_RETURN_IF_ERROR(transport::FillMissingKeys(*store, keys, value));
    }
    return Status::Ok();
  };
  if (const Status s = report(); !s.ok()) {
    CHOIR_LOG(Warn, INIT, "rank {} could not tell the other ranks of communicator '{}' why it did not join: {}",
              rank, name, s.ToString());
  }
}

std::string RecentJoinFailures(Store& store, const std::string& name) {
  constexpr int64_t kShown = 4;
  const Result<int64_t> count = store.Add(FailureCountKey(name), 0);
  if (!count.ok() || *count <= 0) return "";
  std::string out;
  for (int64_t i = *count; i > std::max<int64_t>(0, *count - kShown); --i) {
    const auto failure = ReadFailureRecord(store, name, i);
    if (failure) out += fmt::format("{} {}: {}", out.empty() ? "" : ";", transport::JoinFailureWho(*failure), failure->error);
  }
  if (out.empty()) return "";
  return fmt::format(". Processes that could not join '{}' said (newest first, {} in all):{}", name, *count, out);
}

Status CheckJoinFailed(Store& scoped, const std::string& name) {
  const Result<bool> failed = scoped.Check({transport::kJoinFailedKey});
  if (!failed.ok() || !*failed) return Status::Ok();
  const Result<std::string> value = scoped.Get(transport::kJoinFailedKey);
  const auto failure = value.ok() ? transport::ParseJoinFailure(*value) : std::nullopt;
  return failure ? transport::JoinFailureStatus(*failure, name) : Status::Ok();
}

Result<std::string> ReadHello(Store& root, Store& scoped, const std::string& name, int size, int rank, int r,
                              const std::string& where, int64_t join_start, Deadline deadline, double timeout_s) {
  const std::string key = "hello/" + std::to_string(r);
  CHOIR_ASSIGN_OR_RETURN(std::string text, scoped.Get(key));
  int64_t reports_seen = -1;
  for (auto f = transport::ParseJoinFailure(text); f; f = transport::ParseJoinFailure(text)) {
    const JoinFailure whole = WholeFailure(root, name, *f);
    const bool stale = transport::IsOwnEarlierFailure(whole, rank, where, join_start) ||
                       FailedProcessJoinedSince(scoped, whole, size);
    if (!stale) return transport::JoinFailureStatus(whole, name);
    if (deadline.Expired()) {
      return Status(Code::kStoreTimeout,
                    fmt::format("rank {}: rank {} never joined communicator '{}' within {:.1f} s (its hello "
                                "still holds the failure of an earlier try that has since joined)",
                                rank, r, name, timeout_s));
    }
    // Rank r itself may fail now; its failure cannot land in its key, which
    // is not missing: look at the new records under the name.
    const Result<int64_t> reports = root.Add(FailureCountKey(name), 0);
    if (reports.ok()) {
      for (int64_t i = reports_seen < 0 ? *reports + 1 : reports_seen + 1; i <= *reports; ++i) {
        const auto g = ReadFailureRecord(root, name, i);
        if (g && g->rank == r) return transport::JoinFailureStatus(*g, name);
      }
      reports_seen = *reports;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    CHOIR_ASSIGN_OR_RETURN(text, scoped.Get(key));
  }
  return text;
}

}  // namespace choir::comm
