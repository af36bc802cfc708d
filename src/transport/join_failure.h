// Failures to join a communicator, left where the other ranks wait.
//
// While a communicator forms, its ranks wait for each other's keys in the
// store (hello/R, then shm/R and ready/R) and for each other's TCP
// connections (comm/bootstrap.cc, transport/connect.cc). A rank that cannot
// join (a bad rank or world size, a refused setting, a rank given twice, no
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
  std::string host;
  std::string error;  // its Status, as text
  int64_t at_ns = 0;  // NowNanos() when it failed
};

// The value a rank that failed with `error` leaves in the keys its peers wait for.
std::string JoinFailureValue(int rank, const Status& error);

// The failure `value` describes, or nullopt when it is an ordinary value.
std::optional<JoinFailure> ParseJoinFailure(const std::string& value);

// E403 RemoteError naming the failed rank, its process and host, and its error.
Status JoinFailureStatus(const JoinFailure& failure, const std::string& comm_name);

// Whether `failure` was left by this process as `rank` before `since_ns`
// (NowNanos(): when this try began), i.e. by an earlier try of this rank
// that failed: a retry waits for the real value instead. (A twin given the
// same rank in this process fails during this try, not before it.)
bool IsOwnEarlierFailure(const JoinFailure& failure, int rank, int64_t since_ns);

// Writes `value` into every key of `keys` that does not exist yet (found by
// halving Checks, so a few missing keys among many cost a few requests);
// keys that appear meanwhile keep their value. Returns the first store
// error, having gone on with the other keys.
Status FillMissingKeys(Store& store, std::span<const std::string> keys, const std::string& value);

}  // namespace choir::transport

#endif  // CHOIR_TRANSPORT_JOIN_FAILURE_H_
