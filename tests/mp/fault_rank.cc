// A rank program for the multi-process failure tests, started by `choir run`.
// Each mode makes one kind of trouble on purpose and prints, on every rank,
// "RESULT E<code>" for the status its collective ended with (or "RESULT OK"),
// so that the driver (mp_test.cc) can check every surviving rank's verdict.
//
//   fault_rank kill R      rank R kills itself (SIGKILL) in the middle of a large allreduce
//   fault_rank exit R      rank R exits(7) before the collective
//   fault_rank mismatch    rank 1 uses a different count
//   fault_rank silent R    rank R never calls the collective (others time out)
//   fault_rank create      just create the communicator (bad environments)
//   fault_rank leave-early a reduce to rank 1 that rank 0 leaves (and exits) at once
//                          while rank 2 arrives 500 ms late: no failure, exact result
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "choir/choir.h"

namespace {

void Report(int rank, const choir::Status& s) {
  std::printf("RESULT %s rank=%d %s\n", s.ok() ? "OK" : ("E" + std::to_string(s.number())).c_str(), rank,
              s.ToString().c_str());
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: fault_rank kill|exit|mismatch|silent|create [RANK]\n");
    return 2;
  }
  const std::string mode = argv[1];
  const int target = argc > 2 ? std::atoi(argv[2]) : -1;
  auto comm = choir::Communicator::FromEnvironment();
  if (!comm.ok()) {
    Report(-1, comm.status());
    return 3;
  }
  choir::Communicator& c = **comm;
  const int rank = c.rank();
  std::vector<float> v(mode == "kill" ? (16u << 20) : 1024, 1.0f);  // 64 MiB for kill
  size_t count = v.size();
  if (mode == "mismatch" && rank == 1) count -= 1;
  if (mode == "exit" && rank == target) return 7;
  if (mode == "create") {
    Report(rank, choir::Status::Ok());
    return 0;
  }
  if (mode == "leave-early") {
    // Rank 0 contributes and exits while the root still waits for rank 2:
    // its exit is a clean departure (bye), not a lost peer.
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(500));
    std::vector<float> out(v.size(), 0.0f);
    choir::Status s = c.Reduce(v.data(), out.data(), v.size(), choir::DataType::kFloat32, choir::ReduceOp::kSum, 1).Wait();
    if (s.ok() && rank == 1 && (out.front() != 3.0f || out.back() != 3.0f)) {
      s = choir::InternalError("reduce gave " + std::to_string(out.front()) + ", want 3");
    }
    Report(rank, s);
    return s.ok() ? 0 : 4;
  }
  if (mode == "silent" && rank == target) {
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  if (mode == "kill" && rank == target) {
    std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      kill(getpid(), SIGKILL);
    }).detach();
  }
  // Several rounds so the kill lands mid-collective.
  choir::Status s;
  for (int round = 0; round < 1000 && s.ok(); ++round) {
    s = c.Allreduce(v.data(), v.data(), count, choir::DataType::kFloat32, choir::ReduceOp::kSum).Wait();
    if (mode != "kill") break;
  }
  Report(rank, s);
  return s.ok() ? 0 : 4;
}
