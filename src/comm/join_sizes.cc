#include "comm/join_sizes.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <thread>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "base/json_text.h"
#include "transport/join_failure.h"

namespace choir::comm {
namespace {
using json = nlohmann::json;
constexpr std::chrono::seconds kSizeWait{2};
}  // namespace

std::string JoinSizeKey(const std::string& name, int64_t position) {
  return fmt::format("choir/{}/size/{}", name, position);
}

Status PublishJoinSize(Store& store, const std::string& name, int64_t position, int rank, int size,
                       const std::string& host) {
  const json value = {{"size", size}, {"rank", rank}, {"pid", static_cast<int64_t>(getpid())}, {"host", host}};
  return store.Set(JoinSizeKey(name, position), JsonDump(value));
}

Result<std::optional<JoinSizeRecord>> ReadJoinSize(Store& store, const std::string& name, int64_t position,
                                                   std::chrono::milliseconds wait, Deadline deadline) {
  const std::string key = JoinSizeKey(name, position);
  // Polled, never a Wait that could time out (torch 1.13's TCPStore leaves
  // a reply behind then).
  const auto until = std::chrono::steady_clock::now() + wait;
  while (true) {
    CHOIR_ASSIGN_OR_RETURN(const bool there, store.Check({key}));
    if (there) break;
    if (std::chrono::steady_clock::now() >= until || deadline.Expired()) return std::optional<JoinSizeRecord>();
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  CHOIR_ASSIGN_OR_RETURN(const std::string value, store.Get(key));
  // An unreadable value (another program's key) proves nothing either way.
  const json v = json::parse(value, nullptr, /*allow_exceptions=*/false);
  if (!v.is_object() || !v.contains("size") || !v["size"].is_number_integer()) return std::optional<JoinSizeRecord>();
  const int64_t size = v["size"].get<int64_t>();
  if (size < 1 || size > INT32_MAX) return std::optional<JoinSizeRecord>();
  return std::optional<JoinSizeRecord>(JoinSizeRecord{
      static_cast<int>(size),
      transport::JoinFailureWho({.rank = v.value("rank", int64_t{-1}),
                                 .pid = v.value("pid", int64_t{-1}),
                                 .host = v.value("host", std::string())})});
}

Status CheckSizeOfRankBefore(Store& store, const std::string& name, int64_t position, int rank, int size,
                             Deadline deadline, JoinSizeConflict* conflict) {
  if (position <= 0) return Status::Ok();
  const int64_t before = position - 1;
  // That rank recorded its size right after taking its position, so it is
  // there already but in a race; polled only for a while: a rank that
  // records none (an older choir, which the hellos then name, or one that
  // stopped right after its Add) is not checked.
  CHOIR_ASSIGN_OR_RETURN(const std::optional<JoinSizeRecord> record,
                         ReadJoinSize(store, name, before, kSizeWait, deadline));
  if (!record) return Status::Ok();
  const int64_t theirs = record->size;
  const int64_t first = position - position % size;  // this rank's range: [first, first + size)
  // Whether this position lies in their range (else it ended just before,
  // and their world may still form).
  const bool in_their_range = before % theirs != theirs - 1;
  if (before >= first ? theirs == size : !in_their_range) return Status::Ok();
  if (in_their_range) {
    conflict->size = static_cast<int>(theirs);
    conflict->incarnation = before / theirs;
  }
  return Status(Code::kInvalidWorldSize,
                fmt::format("{} joined communicator '{}' just before rank {} as one of {} ranks, but rank {} was "
                            "started as one of {}: give every rank the same world size (WORLD_SIZE, or the same split groups); a "
                            "communicator name used again on one store needs a world size that fits the ranks "
                            "that used it before, or a new name",
                            record->who, name, rank, theirs, rank, size));
}

}  // namespace choir::comm
