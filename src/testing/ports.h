// Ports for tests that need "nothing answers here" or a port a program under
// test will bind.
//
// A port that was free a moment ago can be taken by any other test running
// at the same time (ctest runs several), and a connection then meets that
// test's listener instead of a refusal. RefusingPort holds the port instead.
// A port the program binds itself cannot be held; FreePortPair takes it from
// outside the kernel's ephemeral range, where no connection's source port lands.
//
// Thread-safety: no shared state.
#ifndef CHOIR_TESTING_PORTS_H_
#define CHOIR_TESTING_PORTS_H_

#include "base/fd.h"

namespace choir::testing {

// A port on 127.0.0.1 that refuses connections for as long as the returned
// socket stays open: bound, never listening, so nobody else can bind it.
// Sets *port (0 and an invalid Fd on failure, with a gtest failure added).
Fd RefusingPort(int* port);

// A port Q such that Q and Q+1 are both free on 127.0.0.1 right now, picked
// at random outside the ephemeral range (0 with a gtest failure when none is).
int FreePortPair();

}  // namespace choir::testing

#endif  // CHOIR_TESTING_PORTS_H_
