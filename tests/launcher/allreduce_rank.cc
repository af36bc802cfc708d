// Rank program for the launcher tests: a real choir job under `choir run`.
//
// Joins the world communicator from the launcher's environment, allreduces
// RANK+1 and prints "allreduce ok rank R of W sum S". With the argument
// "rank1-exits-3", rank 1 leaves with code 3 after joining, and the others'
// allreduce must fail by itself (they print the error and exit 1) so that the
// launcher finds them gone within its grace period.
//
// Thread-safety: single-threaded program (the communicator has its own threads).
#include <cstdio>
#include <cstring>

#include "choir/communicator.h"

int main(int argc, char** argv) {
  auto comm = choir::Communicator::FromEnvironment();
  if (!comm.ok()) {
    std::fprintf(stderr, "joining: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  const int rank = (*comm)->rank();
  if (argc > 1 && std::strcmp(argv[1], "rank1-exits-3") == 0 && rank == 1) return 3;
  int64_t value = rank + 1;
  const choir::Status s =
      (*comm)->Allreduce(&value, &value, 1, choir::DataType::kInt64, choir::ReduceOp::kSum).Wait();
  if (!s.ok()) {
    std::fprintf(stderr, "allreduce: %s\n", s.ToString().c_str());
    return 1;
  }
  std::printf("allreduce ok rank %d of %d sum %lld\n", rank, (*comm)->size(),
              static_cast<long long>(value));
  return 0;
}
