// The world size every rank of a communicator was started with, checked
// between ranks that joined one after the other.
//
// Ranks of a communicator name take positions from one counter
// (choir/<name>/joined), and a rank's position divided by its world size
// gives the incarnation whose keys it uses: the positions [k*size,
// (k+1)*size) form incarnation k. A rank started with another world size
// computes another incarnation, and it and the ranks it should have joined
// would each wait for the others until their timeout. So every rank records
// its world size under its position (choir/<name>/size/<position>) and
// checks the position just before its own: inside its own range that rank
// must have its world size, and before its range that rank's range must end
// where its own begins. Checked for every pair of neighbours, this holds
// only when the positions split into whole ranges of one size each, so any
// rank with another world size is found by the rank after it or finds the
// rank before it, at once (the rank before it always came first, and
// records its size right after taking its position). Keys:
// docs/protocols.md, "Joining a communicator".
//
// Thread-safety: the functions keep no state; the store must be thread-safe.
#ifndef CHOIR_COMM_JOIN_SIZES_H_
#define CHOIR_COMM_JOIN_SIZES_H_

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

#include "base/clock.h"
#include "choir/status.h"
#include "choir/store.h"

namespace choir::comm {

// choir/<name>/size/<position>.
std::string JoinSizeKey(const std::string& name, int64_t position);

// Records this rank's world size under its position (the counter's value
// before its Add), with its rank, pid and host for the message of a peer
// that finds a mismatch.
Status PublishJoinSize(Store& store, const std::string& name, int64_t position, int rank, int size,
                       const std::string& host);

// What the rank at a position recorded.
struct JoinSizeRecord {
  int size = 0;
  std::string who;  // "rank R (pid P on HOST)"
};

// The record at `position`, polled for up to `wait` (the rank there records
// it right after its Add); none when it is not there by then (an older
// choir, or a rank that stopped right after its Add) or holds no size
// (another program's key); a store error as it is.
Result<std::optional<JoinSizeRecord>> ReadJoinSize(Store& store, const std::string& name, int64_t position,
                                                   std::chrono::milliseconds wait, Deadline deadline);

// The world of the rank before this one, when this rank's position lies in
// its range (so it cannot form); none when its range ended before.
struct JoinSizeConflict {
  int size = 0;
  int64_t incarnation = -1;
};

// Reads the size recorded by the position before this one (polling for it
// up to 2 s) and checks it as above. InvalidWorldSize naming the other rank
// when they conflict (and its world in `conflict`); OK otherwise, also when
// that rank recorded no size in time (an older choir, which the hellos then
// name, or a rank that stopped) or something else than a size record; a
// store error as it is. Called before the claim and the hello.
Status CheckSizeOfRankBefore(Store& store, const std::string& name, int64_t position, int rank, int size,
                             Deadline deadline, JoinSizeConflict* conflict);

}  // namespace choir::comm

#endif  // CHOIR_COMM_JOIN_SIZES_H_
