// `choir sweep`: every collective x data type x reduce op x count, in place and
// out of place, checked against independently computed values on every rank.
// The job `choir run -n 4 choir sweep` is the quickest proof that a host (or
// a set of hosts) can run choir correctly.
//
//   choir sweep [--ops allreduce,broadcast] [--dtypes float32,int8] [--counts 0,1,1000]
//               [--transport auto|tcp|shm] [--sum-only] [--no-in-place] [--timeout S]
//               [--buffers heap|shared]
//
// Rank 0 prints one table row per collective; every rank prints its own
// failures. Exit 0 when all cases pass on all ranks.
//
// Thread-safety: runs on the main thread only.
#include <fmt/format.h>

#include <cstdlib>
#include <map>
#include <set>

#include "base/strings.h"
#include "choir/choir.h"
#include "choir/selftest.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

class SweepCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--ops", ops_, "Collectives to run (comma-separated; default all)")->delimiter(',');
    app.add_option("--dtypes", dtypes_, "Data types (comma-separated; default all eight)")->delimiter(',');
    app.add_option("--counts", counts_, "Element counts per rank (comma-separated)")->delimiter(',');
    app.add_option("--transport", transport_, "auto, tcp or shm (default: CHOIR_TRANSPORT)");
    app.add_flag("--sum-only", sum_only_, "Only the sum reduction (faster)");
    app.add_flag("--no-in-place", no_in_place_, "Skip the in-place variants");
    app.add_option("--timeout", timeout_s_, "Deadline per collective in seconds (default: CHOIR_TIMEOUT)");
    app.add_option("--buffers", buffers_, "heap (default) or shared: buffers from choir::SharedBuffer");
    app_ = &app;
  }

  int Run() override {
    SweepOptions so;
    so.ops = ops_;
    for (const std::string& d : dtypes_) {
      auto t = ParseDataType(d);
      if (!t.ok()) return ReportUsageError(*app_, t.status().message());
      so.dtypes.push_back(*t);
    }
    // Each count sizes buffers of up to a rank's whole world; a negative one
    // wraps around to the largest size_t.
    constexpr int64_t kMaxCount = int64_t{1} << 28;
    for (const int64_t c : counts_) {
      if (c < 0 || c > kMaxCount) {
        return ReportUsageError(*app_, fmt::format("--counts entries must be 0 to {} elements, got {}", kMaxCount, c));
      }
    }
    if (!counts_.empty()) so.counts.assign(counts_.begin(), counts_.end());
    so.in_place = !no_in_place_;
    so.all_reduce_ops = !sum_only_;
    if (buffers_ != "heap" && buffers_ != "shared") {
      return ReportUsageError(*app_, "--buffers must be heap or shared, got '" + buffers_ + "'");
    }
    so.shared_buffers = buffers_ == "shared";
    // 0 keeps CHOIR_TIMEOUT.
    if (app_->count("--timeout") > 0 && !(timeout_s_ == 0 || (timeout_s_ >= 0.001 && timeout_s_ <= 86400))) {
      return ReportUsageError(*app_,
                              fmt::format("--timeout must be 0 (CHOIR_TIMEOUT) or 0.001 to 86400 seconds, got {}", timeout_s_));
    }
    if (timeout_s_ > 0) so.timeout = std::chrono::milliseconds(static_cast<int64_t>(timeout_s_ * 1000));
    CommOptions co;
    co.transport = transport_;
    auto comm = Communicator::FromEnvironment(co);
    if (!comm.ok()) {
      // Only a missing launch environment calls for the hint about launching.
      if (std::getenv("RANK") != nullptr) return ReportError(comm.status());
      return ReportError(comm.status().WithContext(
          "choir sweep needs the launch environment (start it with `choir run -n N choir sweep`)"));
    }
    Communicator& c = **comm;
    auto cases = RunSweep(c, so);
    if (!cases.ok()) return ReportError(cases.status());
    return Print(c, *cases);
  }

 private:
  int Print(const Communicator& c, const std::vector<SweepCase>& cases) {
    struct Row {
      int total = 0, passed = 0;
      double seconds = 0;
      std::set<std::string> algorithms;
    };
    std::map<std::string, Row> rows;
    std::vector<std::string> order;
    int failed = 0;
    for (const SweepCase& k : cases) {
      if (!rows.count(k.op)) order.push_back(k.op);
      Row& r = rows[k.op];
      ++r.total;
      r.passed += k.ok ? 1 : 0;
      r.seconds += k.seconds;
      if (!k.algorithm.empty()) r.algorithms.insert(k.algorithm);
      if (!k.ok) {
        ++failed;
        if (failed <= 20) {
          fmt::print(stderr, "FAIL {} {} {}{} count {}: {}\n", k.op, k.dtype, k.reduce_op,
                     k.in_place ? " in-place" : "", k.count, k.error);
        }
      }
    }
    if (c.rank() == 0) {
      fmt::print("choir sweep: {} ranks, {} cases (every rank checks its whole output)\n", c.size(), cases.size());
      fmt::print("{:<15} {:>6} {:>7} {:>7}  {:<28} {:>9}\n", "collective", "cases", "passed", "failed",
                 "algorithms", "time");
      for (const std::string& op : order) {
        const Row& r = rows[op];
        std::string algos;
        for (const auto& a : r.algorithms) algos += (algos.empty() ? "" : ",") + a;
        fmt::print("{:<15} {:>6} {:>7} {:>7}  {:<28} {:>7.3f} s\n", op, r.total, r.passed,
                   r.total - r.passed, algos, r.seconds);
      }
      if (failed == 0) {
        fmt::print("ALL OK: {} cases on {} ranks matched the reference\n", cases.size(), c.size());
      } else {
        fmt::print("FAILED: {} of {} cases gave wrong values (details above, per rank)\n", failed, cases.size());
      }
    }
    return failed == 0 ? kExitOk : kExitFailure;
  }

  std::vector<std::string> ops_, dtypes_;
  std::vector<int64_t> counts_;  // signed: "-1" must not wrap around
  std::string transport_;
  std::string buffers_ = "heap";
  bool sum_only_ = false;
  bool no_in_place_ = false;
  double timeout_s_ = 0;
  CLI::App* app_ = nullptr;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(SweepCommand, "sweep",
                          "Check every collective against reference values (run under `choir run`)");

}  // namespace choir::cli
