// Failures to join a communicator, left where the other ranks wait.
//
// While a communicator forms, its ranks wait for each other's keys in the
// store (hello/R, then shm/R and ready/R) and for each other's TCP
// connections (comm/bootstrap.cc, transport/connect.cc; what is reported and
// how it is read: comm/join_reports.h). A rank that cannot
// join (a rank outside the world, a refused setting, a rank given twice, no
// room for its shared memory) fills the keys the others still wait for with
// a failure value naming it and its error, so that their waits end at once
// and they stop with E403 RemoteError instead of waiting for their timeout.
// One that fails after its hello also sets the incarnation's `failed` key,
// which ranks waiting for TCP connections look at about once a second.
// Nothing is added to a rendezvous that goes well. Keys and values:
// docs/protocols.md, "Joining a communicator".
//
// Thread-safety: the functions keep no state; the store must be thread-safe.
#ifndef CHOIR_TRANSPORT_JOIN_FAILURE_H_
#define CHOIR_TRANSPORT_JOIN_FAILURE_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string>

#include "choir/status.h"
#include "choir/store.h"

namespace choir::transport {

// The incarnation's key (beside hello/R, shm/R, ready/R) that holds the
// failure of a rank that had already published its hello.
inline constexpr char kJoinFailedKey[] = "failed";

struct JoinFailure {
  int64_t rank = -1;  // the rank the failed process was given
  int64_t pid = -1;
  std::string host;   // its host name
  std::string where;  // its kernel and network namespace (a hello's "netns")
  int64_t at_ns = 0;  // NowNanos() when it failed
  // Its error as text; empty in the short values left in hello keys, which
  // point to the full one by `index` (choir/<name>/failure/<index>).
  std::string error;
  int64_t index = 0;
};

// The value a failed rank leaves where its peers wait: "choir-join-failed "
// and JSON of the fields that are set (the error cut to 2000 characters).
std::string JoinFailureValue(const JoinFailure& failure);

// The failure `value` describes, or nullopt when it is an ordinary value.
// A value with the marker but no readable JSON is still a failure (nobody
// may wait on), with the value in its error.
std::optional<JoinFailure> ParseJoinFailure(const std::string& value);

// "rank R (pid P on HOST)": who failed, for messages.
std::string JoinFailureWho(const JoinFailure& failure);

// E403 RemoteError naming the failed rank, its process and host, and its error.
Status JoinFailureStatus(const JoinFailure& failure, const std::string& comm_name);

// Whether `failure` was left by this process (`pid`, `where`) as `rank`
// before `since_ns` (NowNanos(): when this try began), i.e. by an earlier
// try of this rank that failed: a retry waits for the real value instead.
// (A twin given the same rank in this process fails during this try.)
bool IsOwnEarlierFailure(const JoinFailure& failure, int rank, const std::string& where, int64_t since_ns);

// Writes `value` into every key of `keys` that does not exist yet, found by
// halving Checks (a few missing keys among many cost a few requests), with
// Set: stores wake waiters on a Set (torch 1.13's TCPStore does not on a
// CompareSet). A key that arrives between its Check and the Set is
// overwritten. Stops at the first store error and returns it.
Status FillMissingKeys(Store& store, std::span<const std::string> keys, const std::string& value);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_JOIN_FAILURE_H_
