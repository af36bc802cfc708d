// Ports for tests that need "nothing answers here".
//
// A port that was free a moment ago can be taken by any other test running
// at the same time (ctest runs several), and a connection then meets that
// test's listener instead of a refusal. RefusingPort holds the port instead.
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

}  // namespace choir::testing

#endif  // CHOIR_TESTING_PORTS_H_
