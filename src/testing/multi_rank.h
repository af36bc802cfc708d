// In-process multi-rank harness: runs a function on N threads, each holding
// its own Communicator of one group, joined through an in-memory store.
// Lets unit tests exercise real collectives (shared memory or TCP on
// loopback) without starting processes.
//
// Thread-safety: RunRanks blocks until every rank's function returned.
#ifndef CHOIR_TESTING_MULTI_RANK_H_
#define CHOIR_TESTING_MULTI_RANK_H_

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "choir/communicator.h"
#include "choir/store.h"

namespace choir::testing {

struct RankResult {
  Status create;  // Communicator::Create result
  Status run;     // what the function returned
};

// Creates `n` communicators (one per thread) and calls fn(comm) on each.
std::vector<RankResult> RunRanks(int n, const std::function<Status(Communicator&)>& fn,
                                 CommOptions options = {},
                                 std::shared_ptr<Store> store = nullptr);

// As above, with options chosen per rank (e.g. a host id per rank to emulate
// several hosts in one process).
std::vector<RankResult> RunRanks(int n, const std::function<Status(Communicator&)>& fn,
                                 const std::function<CommOptions(int rank)>& options_for_rank,
                                 std::shared_ptr<Store> store = nullptr);

// Options for a test communicator: `transport` ("shm", "tcp", "auto") and
// the deadline of its steps.
CommOptions TransportOptions(const std::string& transport,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20));

// Expects (gtest) that every rank created its communicator and returned OK.
void ExpectAllOk(const std::vector<RankResult>& results);

// A unique communicator name per call, so repeated tests never share keys.
std::string UniqueName(const std::string& prefix);

}  // namespace choir::testing

#endif  // CHOIR_TESTING_MULTI_RANK_H_
