// Rank program for the operations tests: a small, steady choir job that feeds
// every metric family the dashboard and alert rules read.
//
//   ops_job [--seconds S] [--bytes B] [--straggler-rank R] [--with-error]
//
// Joins the world communicator (under `choir run`), then for S seconds runs
// allreduces of B bytes with a short pause between them; rank R sleeps 2 ms
// before each one so its peers record late arrival. --with-error first makes
// a sub-communicator fail on purpose (a null buffer, E103) so that
// choir_errors_total has a series while the job keeps running on the world
// communicator. Prints "ops_job done rank R iterations N" at the end.
//
// Thread-safety: single-threaded program.
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "choir/communicator.h"

int main(int argc, char** argv) {
  double seconds = 10;
  size_t bytes = 64 * 1024;
  int straggler = -1;
  bool with_error = false;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--seconds" && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else if (a == "--bytes" && i + 1 < argc) {
      bytes = static_cast<size_t>(std::atoll(argv[++i]));
    } else if (a == "--straggler-rank" && i + 1 < argc) {
      straggler = std::atoi(argv[++i]);
    } else if (a == "--with-error") {
      with_error = true;
    } else {
      std::fprintf(stderr, "ops_job: unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  auto comm = choir::Communicator::FromEnvironment();
  if (!comm.ok()) {
    std::fprintf(stderr, "ops_job: %s\n", comm.status().ToString().c_str());
    return 1;
  }
  choir::Communicator& c = **comm;
  // Kept until exit: a communicator's metrics (its error count) live as long as it does.
  std::unique_ptr<choir::Communicator> failed;
  if (with_error) {
    auto sub = c.Split(0, c.rank());
    if (!sub.ok()) {
      std::fprintf(stderr, "ops_job: split: %s\n", sub.status().ToString().c_str());
      return 1;
    }
    failed = std::move(*sub);
    // Expected to fail with E103 NullBuffer; the world communicator is unaffected.
    const choir::Status s =
        failed->Allreduce(nullptr, nullptr, 1, choir::DataType::kFloat32, choir::ReduceOp::kSum)
            .Wait();
    std::printf("ops_job rank %d provoked %s\n", c.rank(),
                s.ok() ? "nothing" : s.ToString().c_str());
  }
  std::vector<float> v(bytes / sizeof(float), 1.0f);
  // Rank 0 decides when to stop so every rank runs the same number of allreduces.
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  int64_t iterations = 0;
  for (;;) {
    int64_t go = std::chrono::steady_clock::now() < end ? 1 : 0;
    choir::Status s = c.Broadcast(&go, &go, 1, choir::DataType::kInt64, 0).Wait();
    if (!s.ok()) {
      std::fprintf(stderr, "ops_job: %s\n", s.ToString().c_str());
      return 1;
    }
    if (go == 0) break;
    if (c.rank() == straggler) std::this_thread::sleep_for(std::chrono::milliseconds(2));
    s = c.Allreduce(v.data(), v.data(), v.size(), choir::DataType::kFloat32, choir::ReduceOp::kMax)
            .Wait();
    if (!s.ok()) {
      std::fprintf(stderr, "ops_job: %s\n", s.ToString().c_str());
      return 1;
    }
    ++iterations;
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
  }
  std::printf("ops_job done rank %d iterations %lld\n", c.rank(),
              static_cast<long long>(iterations));
  return 0;
}
