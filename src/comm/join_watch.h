// Failures to join a communicator, told through the rendezvous store.
//
// While a communicator forms, its ranks wait for each other in the store and
// on their listening sockets (comm/bootstrap.cc, transport/connect.cc). A
// rank that cannot join (a bad rank or world size, a refused setting, a rank
// taken twice, a peer it cannot reach) publishes why, and the others look for
// such reports about once a second while they wait, so that every rank stops
// at once with E403 naming the rank and its error instead of waiting for the
// timeout and naming only who never arrived. A rank that joins after failing
// once (a retry in the same process) withdraws its report first (so a rank
// given twice to threads of one process may withdraw its twin's report: the
// timeout then names the twin, as without reports).
//
// Store keys, beside the communicator's own (docs/protocols.md, "Joining a
// communicator"): choir/<name>/failures counts reports, choir/<name>/
// failure/<i> holds report i (JSON: rank, pid, host, join position, error),
// "" once withdrawn. A report concerns the incarnation that was forming when
// it was made: its join position (how many ranks had joined the name
// before) falls in that incarnation's range.
//
// Thread-safety: a JoinWatch is used by the one thread that creates the
// communicator; the functions may be called from any thread.
#ifndef CHOIR_COMM_JOIN_WATCH_H_
#define CHOIR_COMM_JOIN_WATCH_H_

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "choir/status.h"
#include "choir/store.h"

namespace choir::comm {

// Whether a failure of Create is this rank's own and worth telling the
// others: not a store that does not answer, nor a wait for peers (timeouts,
// lost peers), nor another rank's reported failure.
bool IsJoinFailureToReport(const Status& s);

// Publishes that `rank` could not join communicator `name`. `position`: the
// number of ranks that had joined the name before this one (its own join
// counter value minus one, or the counter's value if it never joined).
// Best effort: a store error is logged, not returned.
void ReportJoinFailure(Store& root, const std::string& name, int64_t position, int rank, const Status& error);

// Withdraws the reports this process made earlier for `rank` of `name` (it
// joins now). Best effort, like ReportJoinFailure.
void WithdrawJoinFailure(Store& root, const std::string& name, int rank);

// Looks for reports that concern one incarnation of a communicator: those
// whose join position lies in [first, first + size).
class JoinWatch {
 public:
  JoinWatch(std::shared_ptr<Store> root, std::string name, int64_t first, int size);
  // OK, or E403 RemoteError naming the first report that concerns this
  // incarnation. Store errors are returned as they are.
  Status Check();

 private:
  std::shared_ptr<Store> root_;
  std::string name_;
  int64_t first_;
  int size_;
  int64_t seen_ = 0;  // reports read so far
};

// A store whose Wait (and so WaitGet) checks `watch` before it blocks and
// about every `slice` while it does; everything else goes to `base`.
std::shared_ptr<Store> NewWatchedStore(std::shared_ptr<Store> base, std::shared_ptr<JoinWatch> watch,
                                       std::chrono::milliseconds slice = std::chrono::milliseconds(1000));

}  // namespace choir::comm

#endif  // CHOIR_COMM_JOIN_WATCH_H_
