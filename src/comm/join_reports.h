// What Create does with a failure to join, and how it reads the failures
// of others (the values and the key filling: transport/join_failure.h; the
// keys: docs/protocols.md, "Joining a communicator").
//
// Thread-safety: the functions keep no state; the stores must be thread-safe.
#ifndef CHOIR_COMM_JOIN_REPORTS_H_
#define CHOIR_COMM_JOIN_REPORTS_H_

#include <cstdint>
#include <memory>
#include <string>

#include "base/clock.h"
#include "choir/status.h"
#include "choir/store.h"

namespace choir::comm {

// Whether a failure of Create is this rank's own and worth telling the
// others: not a store that does not answer or is inconsistent, nor a wait
// for peers (timeouts, refused or lost peers), nor another rank's failure.
bool IsJoinFailureToReport(const Status& s);

// Where a rank that could not join stood.
struct JoinStanding {
  std::string name;  // the communicator's
  int size = 0;      // its world size
  int rank = -1;
  // The ranks of the name that joined before this one (-1 until it joined;
  // ReportJoinFailure wants the counter's value then).
  int64_t position = -1;
  bool twice = false;            // another process had claimed the rank
  bool hello_published = false;  // its hello is in the store
  // A world-size conflict with the rank before it (comm/join_sizes.h): the
  // missing hellos of its own incarnation and the next are filled, and of
  // that rank's world (size and incarnation, when given) too.
  bool conflict = false;
  int other_size = 0;
  int64_t other_incarnation = -1;
  std::string host;   // its host name
  std::string where;  // its kernel and network namespace
};

// Leaves `error` where the other ranks of the communicator wait. Best
// effort: a store error is logged.
void ReportJoinFailure(const std::shared_ptr<Store>& store, const JoinStanding& at, const Status& error);

// For a timeout naming the ranks that never joined: what the last processes
// that could not join `name` said ("" when none did).
std::string RecentJoinFailures(Store& store, const std::string& name);

// The failure a peer left in the incarnation's `failed` key (`scoped` is the
// incarnation's store), for waits on TCP connections; OK when there is none.
// Advisory: a store error is no failure here.
Status CheckJoinFailed(Store& scoped, const std::string& name);

// Reads rank r's hello for `rank`. A failure value there is a failure of the
// job (E403), unless it was left by a try that failed and has since joined
// (this process's own earlier try, begun before `join_start`, or a retry of
// the failed rank): then it waits for the real hello, and stops with E403 if
// rank r reports a failure meanwhile.
Result<std::string> ReadHello(Store& root, Store& scoped, const std::string& name, int size, int rank, int r,
                              const std::string& where, int64_t join_start, Deadline deadline, double timeout_s);

}  // namespace choir::comm

#endif  // CHOIR_COMM_JOIN_REPORTS_H_
