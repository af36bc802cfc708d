// `choir probe`: a liveness check for one host (and optionally one job),
// usable as a Kubernetes exec livenessProbe.
//
//   choir probe [--deadline 10] [--transport shm,tcp] [--bytes 64K]
//               [--job ID [--registry DIR]]
//
// Runs two ranks as threads of this process and checks an allreduce and a
// broadcast through each transport (shared memory, then TCP on loopback),
// all within --deadline seconds. With --job it also requires every
// registered process of that job (CHOIR_METRICS_PORT set) to answer on its
// metrics endpoint. Exit 0 and one "OK" line when healthy; otherwise exit 1
// with one line "choir probe: E<code> <Name>: <reason>". A watchdog ends the
// probe at the deadline even if something below it hangs.
//
// Thread-safety: the main thread runs the checks; two rank threads per
// transport; one watchdog thread.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "base/clock.h"
#include "base/strings.h"
#include "choir/choir.h"
#include "diag/http.h"
#include "diag/registry.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

// Ends the process when the deadline passes; Disarm() before returning.
class Watchdog {
 public:
  Watchdog(double seconds, const std::atomic<const char*>* stage)
      : thread_([this, seconds, stage] {
          std::unique_lock<std::mutex> lock(mu_);
          if (cv_.wait_for(lock, std::chrono::duration<double>(seconds),
                           [this] { return disarmed_; }))
            return;
          fmt::print(
              stderr, "choir probe: {}\n",
              Status(Code::kProbeFailed,
                     fmt::format("did not finish within the {:.3g} s deadline (stuck in: {})",
                                 seconds, stage->load()))
                  .ToString());
          std::fflush(stderr);
          _exit(kExitFailure);
        }) {}
  ~Watchdog() { Disarm(); }
  void Disarm() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      disarmed_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  bool disarmed_ = false;
  std::thread thread_;  // last: starts after the members it uses exist
};

// Two ranks as threads: allreduce (sum of rank+1) and broadcast from rank 1, checked.
Status ProbeTransport(const std::string& transport, size_t count, double deadline_s) {
  auto store = NewMemoryStore();
  CommOptions co;
  co.transport = transport;
  co.name = "probe-" + transport;
  co.job_id = fmt::format("choir-probe-{}", getpid());
  co.host_id = "choir-probe";  // both ranks on one host: shm is allowed
  co.timeout =
      std::chrono::milliseconds(std::max<int64_t>(1, static_cast<int64_t>(deadline_s * 1000)));
  Status results[2];
  auto rank_main = [&](int rank) {
    auto comm = Communicator::Create(store, rank, 2, co);
    if (!comm.ok()) {
      results[rank] = comm.status();
      return;
    }
    std::vector<float> v(count, static_cast<float>(rank + 1));
    Status s =
        (*comm)->Allreduce(v.data(), v.data(), count, DataType::kFloat32, ReduceOp::kSum).Wait();
    for (size_t i = 0; s.ok() && i < count; ++i) {
      if (v[i] != 3.0f)
        s = Status(Code::kInternal,
                   fmt::format("allreduce gave {} at element {}, expected 3", v[i], i));
    }
    std::vector<int32_t> b(count, rank == 1 ? 7 : 0);
    if (s.ok()) s = (*comm)->Broadcast(b.data(), b.data(), count, DataType::kInt32, 1).Wait();
    for (size_t i = 0; s.ok() && i < count; ++i) {
      if (b[i] != 7)
        s = Status(Code::kInternal,
                   fmt::format("broadcast gave {} at element {}, expected 7", b[i], i));
    }
    results[rank] = s;
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  for (const Status& s : results) {
    if (!s.ok()) return s.WithContext(transport + " probe");
  }
  return Status::Ok();
}

Result<std::string> ProbeJob(const std::string& job, const std::string& registry, double timeout) {
  const diag::RegistryScan scan = diag::ScanRegistry(registry);
  int answering = 0, registered = 0;
  for (const diag::RegistryEntry& e : scan.alive) {
    if (e.job != job) continue;
    ++registered;
    const std::string host = e.address == "0.0.0.0" ? "127.0.0.1" : e.address;
    auto r = diag::HttpGet(host, e.port, "/metrics", timeout);
    if (!r.ok() || r->status != 200) {
      return Status(
          Code::kProbeFailed,
          fmt::format("job {}: rank {} (pid {}) does not answer on {}:{}: {}", job, e.rank, e.pid,
                      host, e.port,
                      r.ok() ? "HTTP " + std::to_string(r->status) : r.status().ToString()));
    }
    ++answering;
  }
  if (registered == 0) {
    return Status(
        Code::kProbeFailed,
        fmt::format(
            "job {}: no live process registered in {} (is it running with CHOIR_METRICS_PORT set?)",
            job, registry));
  }
  return fmt::format("job {}: {} process{} answering", job, answering, answering == 1 ? "" : "es");
}

class ProbeCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_option("--deadline", deadline_, "Seconds for the whole probe (default 10)");
    app.add_option("--transport", transports_,
                   "Comma-separated transports to exercise: shm,tcp (default both)");
    app.add_option("--bytes", bytes_, "Message size per collective (default 64K)");
    app.add_option("--job", job_, "Also require every registered process of this job id to answer");
    app.add_option("--registry", registry_,
                   "Registry directory for --job (default CHOIR_METRICS_REGISTRY)");
    app.footer(
        "Exit 0: healthy (one OK line). Exit 1: unhealthy, one line with the error code and "
        "reason. Exit 2: bad flags.");
  }

  int Run() override {
    if (!(deadline_ > 0 && deadline_ <= 3600))
      return ReportUsageError(*app_, "--deadline must be in (0, 3600] seconds");
    const auto bytes = strings::ParseBytes(bytes_);
    if (!bytes || *bytes < 4 || *bytes > (64u << 20))
      return ReportUsageError(*app_, "--bytes must be a size in 4..64M");
    const std::vector<std::string> transports = strings::Split(transports_, ',');
    for (const std::string& t : transports) {
      if (t != "shm" && t != "tcp")
        return ReportUsageError(*app_, "--transport takes shm, tcp or shm,tcp; got '" + t + "'");
    }
    // The probe's own ranks must neither serve metrics nor register, and TCP stays on loopback.
    for (const auto& [name, value] :
         {std::pair<const char*, const char*>{"CHOIR_METRICS_PORT", "0"},
          {"CHOIR_LISTEN_ADDR", "127.0.0.1"}}) {
      if (Status s = SetSetting(name, value); !s.ok()) return Fail(s);
    }
    std::atomic<const char*> stage{"starting the probe"};
    Watchdog watchdog(deadline_, &stage);
    const int64_t start = NowNanos();
    const size_t count = static_cast<size_t>(*bytes / 4);
    for (const std::string& t : transports) {
      stage = t == "shm" ? "shared-memory collectives" : "loopback TCP collectives";
      const double left = deadline_ - static_cast<double>(NowNanos() - start) * 1e-9;
      if (Status s = ProbeTransport(t, count, left); !s.ok()) {
        watchdog.Disarm();
        return Fail(s);
      }
    }
    std::string job_line;
    if (!job_.empty()) {
      stage = "scraping the job's metrics endpoints";
      const double left = deadline_ - static_cast<double>(NowNanos() - start) * 1e-9;
      const std::string registry =
          registry_.empty() ? FindSetting("CHOIR_METRICS_REGISTRY").value_or(SettingInfo{}).value
                            : registry_;
      auto r = ProbeJob(job_, registry, std::max(0.1, left));
      if (!r.ok()) {
        watchdog.Disarm();
        return Fail(r.status());
      }
      job_line = "; " + *r;
    }
    watchdog.Disarm();
    fmt::print("choir probe: OK {} allreduce+broadcast, 2 ranks, {} in {:.1f} ms{}\n", transports_,
               strings::FormatBytes(*bytes), static_cast<double>(NowNanos() - start) / 1e6,
               job_line);
    return kExitOk;
  }

 private:
  static int Fail(const Status& s) {
    // One line: Kubernetes shows the probe's output in the pod's events.
    std::string line = s.ToString();
    std::replace(line.begin(), line.end(), '\n', ' ');
    fmt::print(stderr, "choir probe: {}\n", line);
    return kExitFailure;
  }

  CLI::App* app_ = nullptr;
  double deadline_ = 10;
  std::string transports_ = "shm,tcp";
  std::string bytes_ = "64K";
  std::string job_, registry_;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(
    ProbeCommand, "probe",
    "Liveness check: tiny collectives over shm and loopback TCP within a deadline");

}  // namespace choir::cli
