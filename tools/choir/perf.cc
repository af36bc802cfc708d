// `choir perf`: the bus-bandwidth benchmark (choir's nccl-tests / hccl_test).
//
//   choir perf [-n N] [--op allreduce|reduce_scatter|allgather|broadcast|reduce|alltoall|all]
//              [--dtype float32] [--reduce-op sum] [--min-bytes 8] [--max-bytes 256M]
//              [--step-factor 2] [--iters N | --time-per-size S] [--warmup N] [--repeat R]
//              [--check] [--algo NAME] [--transport T] [--buffers heap|shared]
//              [--json FILE] [--baseline FILE]
//
// Under `choir run` every rank runs it; with -n N and no launcher around, it
// starts its own N local ranks (`choir run -n N choir perf ...`), so no MPI
// is needed. Times are per operation: each iteration is timed on every rank
// and the operation's time is the slowest rank's; mean, p50 and p99 are over
// iterations. algbw = bytes / mean time; busbw applies nccl-tests' factors:
// allreduce 2(n-1)/n; reduce_scatter, allgather and alltoall (n-1)/n with
// bytes = the whole buffer; broadcast and reduce 1.
//
// --buffers shared takes the send and receive buffers from choir::SharedBuffer
// (memory the ranks of a host read from each other directly); the default is
// ordinary heap memory, like the MPI benchmarks use.
//
// --repeat R measures every size R times and reports the median with its
// spread; --baseline FILE compares with an earlier --json run and calls a
// change real only when it exceeds the spread of both runs.
//
// Thread-safety: runs on the main thread only.
#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cmath>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "algorithms/switch_points.h"
#include "base/clock.h"
#include "base/strings.h"
#include "choir/choir.h"
#include "choir/selftest.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kPerfOps = {"allreduce", "reduce_scatter", "allgather",
                                           "broadcast", "reduce",         "alltoall"};

double BusFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast" || op == "reduce") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// Elements per rank for an operation whose nccl-tests byte count is `bytes`.
size_t CountFor(const std::string& op, uint64_t bytes, size_t es, int n) {
  const bool whole_buffer = op == "reduce_scatter" || op == "allgather" || op == "alltoall";
  return static_cast<size_t>(bytes / es / (whole_buffer ? static_cast<uint64_t>(n) : 1));
}

// A benchmark buffer that only grows: heap memory or a SharedBuffer, zeroed.
class BenchBuffer {
 public:
  Status Reserve(size_t bytes, bool shared) {
    if (bytes <= size_) return Status::Ok();
    if (shared) {
      auto b = SharedBuffer::Allocate(bytes);
      if (!b.ok()) return b.status().WithContext("--buffers shared");
      shared_ = std::move(*b);
      data_ = shared_.as<uint8_t>();
    } else {
      heap_.assign(bytes, 0);
      data_ = heap_.data();
    }
    size_ = bytes;
    return Status::Ok();
  }
  uint8_t* data() const { return data_; }

 private:
  std::vector<uint8_t> heap_;
  SharedBuffer shared_;
  uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double pos = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(pos);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (pos - static_cast<double>(lo));
}

std::string ReadFirstLine(const char* path, const char* prefix) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (strings::StartsWith(line, prefix)) {
      const size_t colon = line.find(':');
      return std::string(strings::Trim(line.substr(colon == std::string::npos ? 0 : colon + 1)));
    }
  }
  return "";
}

// The same-host switch-point table this host's ranks use (CHOIR_SHM_TUNING
// resolved): runs on hosts with different tables choose different algorithms.
const char* SwitchPoints() { return algorithms::SwitchTableName(algorithms::ConfiguredSwitchTable()); }

json MachineDescription(const Communicator& comm) {
  utsname u{};
  uname(&u);
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return json{{"hostname", host},
              {"kernel", std::string(u.sysname) + " " + u.release},
              {"cpu", ReadFirstLine("/proc/cpuinfo", "model name")},
              {"online_cpus", sysconf(_SC_NPROCESSORS_ONLN)},
              {"memory", ReadFirstLine("/proc/meminfo", "MemTotal")},
              {"kernel_isa", KernelIsa()},
              {"switch_points", SwitchPoints()},
              {"choir", BuildString()},
              {"ranks", comm.size()},
              {"topology", json::parse(TopologyToJson(comm.topology()), nullptr, /*allow_exceptions=*/false)}};
}

json SettingsInEffect() {
  json s = json::object();
  for (const SettingInfo& i : ListSettings()) {
    s[i.name] = {{"value", i.value}, {"source", SettingSourceName(i.source)}};
  }
  return s;
}

struct Sample {
  std::string op;
  uint64_t bytes = 0;
  size_t count = 0;
  int iters = 0;
  std::vector<double> mean_us, p50_us, p99_us, algbw, busbw;  // one entry per repeat
  std::string algorithm;                  // the route most calls took, and the next (RouteSummary)
  std::map<std::string, int64_t> routes;  // calls per algorithm name as WorkInfo gives it
  std::string check;  // "ok", "FAILED", or "" when not checked
};

// Calls from this size on count their route one by one: a same-host walk
// may switch between calls ("shm_pipe" and "shm_pipe+cma",
// docs/algorithms.md), and reading WorkInfo costs nothing next to such a
// call; smaller sizes show the first call's.
constexpr uint64_t kRoutesMinBytes = 64 * 1024;

// "shm_pipe", or "shm_pipe (12x +cma)" when 12 calls took another route;
// the most common route first.
std::string RouteSummary(const std::map<std::string, int64_t>& routes) {
  std::vector<std::pair<int64_t, std::string>> by_calls;
  for (const auto& [name, calls] : routes) by_calls.emplace_back(calls, name);
  // Most calls first; equal counts by name, so that the summary is stable.
  std::sort(by_calls.begin(), by_calls.end(), [](const auto& a, const auto& b) {
    return a.first != b.first ? a.first > b.first : a.second < b.second;
  });
  if (by_calls.empty()) return "";
  std::string out = by_calls[0].second;
  if (by_calls.size() > 1) {
    const std::string& main = by_calls[0].second;
    std::string other = by_calls[1].second;
    if (other.rfind(main, 0) == 0) other = other.substr(main.size());
    out += fmt::format(" ({}x {}{})", by_calls[1].first, other, by_calls.size() > 2 ? ", ..." : "");
  }
  return out;
}

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }
double Spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double med = Median(v);
  if (med <= 0) return 0;
  return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / med;
}

class PerfCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_option("-n,--nproc", nproc_, "Start this many local ranks (when not under a launcher)");
    app.add_option("--op", op_, "allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall or all");
    app.add_option("--dtype", dtype_, "Element type (default float32)");
    app.add_option("--reduce-op", reduce_op_, "Reduction (default sum)");
    app.add_option("--min-bytes", min_bytes_, "Smallest size (default 8; K/M/G suffixes)");
    app.add_option("--max-bytes", max_bytes_, "Largest size (default 256M)");
    app.add_option("--step-factor", step_factor_, "Size multiplier between rows (default 2)");
    app.add_option("--iters", iters_, "Timed iterations per size (default: fill --time-per-size)");
    app.add_option("--time-per-size", time_per_size_, "Seconds of timed iterations per size (default 0.2)");
    app.add_option("--warmup", warmup_, "Untimed iterations per size (default 5)");
    app.add_option("--repeat", repeat_, "Measure each size this many times; report median and spread");
    app.add_flag("--check", check_, "Verify every rank's whole output once per size");
    app.add_option("--algo", algo_, "Force an algorithm by name");
    app.add_option("--transport", transport_, "auto, tcp or shm (default: CHOIR_TRANSPORT)");
    app.add_option("--buffers", buffers_, "heap (default) or shared: buffers from choir::SharedBuffer");
    app.add_option("--json", json_path_, "Write every figure, the machine and the settings to FILE");
    app.add_option("--baseline", baseline_path_, "Compare with an earlier --json FILE");
    app.add_option("--root", root_, "Root rank for broadcast and reduce (default 0)");
  }

  int Run() override {
    if (nproc_ > 0 && FindSetting("WORLD_SIZE").value_or(SettingInfo{}).value == "-1") return Relaunch();
    auto dtype = ParseDataType(dtype_);
    if (!dtype.ok()) return ReportUsageError(*app_, dtype.status().message());
    auto rop = ParseReduceOp(reduce_op_);
    if (!rop.ok()) return ReportUsageError(*app_, rop.status().message());
    if (!CheckReduceSupported(*dtype, *rop).ok()) {
      return ReportUsageError(*app_, CheckReduceSupported(*dtype, *rop).message());
    }
    const auto lo = strings::ParseBytes(min_bytes_), hi = strings::ParseBytes(max_bytes_);
    if (!lo || !hi || *lo == 0 || *lo > *hi) {
      return ReportUsageError(*app_, "--min-bytes/--max-bytes must be sizes with 0 < min <= max");
    }
    if (step_factor_ < 1.01) return ReportUsageError(*app_, "--step-factor must be > 1");
    if (buffers_ != "heap" && buffers_ != "shared") {
      return ReportUsageError(*app_, "--buffers must be heap or shared, got '" + buffers_ + "'");
    }
    if (repeat_ < 1 || warmup_ < 0 || iters_ < 0 || time_per_size_ <= 0) {
      return ReportUsageError(*app_, "--repeat >= 1, --warmup >= 0, --iters >= 0, --time-per-size > 0");
    }
    std::vector<std::string> ops = op_ == "all" ? kPerfOps : std::vector<std::string>{op_};
    for (const auto& op : ops) {
      if (std::find(kPerfOps.begin(), kPerfOps.end(), op) == kPerfOps.end()) {
        return ReportUsageError(*app_, "unknown --op '" + op + "'");
      }
    }
    json baseline;
    if (!baseline_path_.empty()) {
      std::ifstream in(baseline_path_);
      baseline = json::parse(in, nullptr, false);
      if (!in || baseline.is_discarded() || !baseline.contains("results")) {
        return ReportUsageError(*app_, "--baseline " + baseline_path_ + " is not a `choir perf --json` file");
      }
    }
    CommOptions co;
    co.transport = transport_;
    auto comm = Communicator::FromEnvironment(co);
    if (!comm.ok()) {
      // Only a missing launch environment calls for the hint about ranks.
      if (std::getenv("RANK") != nullptr) return ReportError(comm.status());
      return ReportError(comm.status().WithContext("choir perf needs ranks: use `choir perf -n N` or `choir run -n N choir perf`"));
    }
    Communicator& c = **comm;
    if (root_ < 0 || root_ >= c.size()) return ReportUsageError(*app_, "--root outside the communicator");
    std::vector<uint64_t> sizes;
    for (double b = static_cast<double>(*lo); b <= static_cast<double>(*hi) * 1.0000001; b *= step_factor_) {
      sizes.push_back(static_cast<uint64_t>(std::llround(b)));
    }
    const size_t es = DataTypeSize(*dtype);
    if (c.rank() == 0) {
      fmt::print("# choir perf: {} ranks, {} {}, {} sizes from {} to {}, {} buffers, {} switch points, {}\n", c.size(),
                 dtype_, reduce_op_, sizes.size(), strings::FormatBytes(*lo), strings::FormatBytes(*hi), buffers_,
                 SwitchPoints(), BuildString());
    }
    std::vector<Sample> samples;
    for (const std::string& op : ops) {
      if (c.rank() == 0) PrintHeader(op);
      for (uint64_t bytes : sizes) {
        const size_t count = CountFor(op, bytes, es, c.size());
        if (count == 0) continue;
        Sample s;
        s.op = op;
        s.count = count;
        s.bytes = static_cast<uint64_t>(count) * es * ((op == "reduce_scatter" || op == "allgather" || op == "alltoall") ? c.size() : 1);
        for (int r = 0; r < repeat_; ++r) {
          Status st = Measure(c, op, *dtype, *rop, count, &s);
          if (!st.ok()) return ReportError(st);
        }
        if (check_) {
          SweepOptions so;
          so.ops = {op};
          so.dtypes = {*dtype};
          so.counts = {count};
          so.in_place = false;
          so.shared_buffers = buffers_ == "shared";
          so.reduce_ops = {*rop};
          so.algorithm = algo_;
          auto cases = RunSweep(c, so);
          if (!cases.ok()) return ReportError(cases.status());
          bool ok = !cases->empty();
          for (const auto& k : *cases) ok = ok && k.ok;
          s.check = ok ? "ok" : "FAILED";
        }
        if (c.rank() == 0) PrintRow(s, baseline);
        samples.push_back(std::move(s));
      }
    }
    if (c.rank() == 0 && !json_path_.empty()) {
      Status st = WriteJson(c, samples, *dtype, *rop);
      if (!st.ok()) return ReportError(st);
    }
    bool all_ok = true;
    for (const auto& s : samples) all_ok = all_ok && s.check != "FAILED";
    return all_ok ? kExitOk : kExitFailure;
  }

 private:
  int Relaunch() {
    // Start our own ranks: choir run -n N <this binary> perf <same flags minus -n>.
    std::vector<std::string> args = {"/proc/self/exe", "run", "-n", std::to_string(nproc_), "--", "/proc/self/exe", "perf"};
    const std::vector<std::string> raw = app_->remaining(true);
    (void)raw;
    for (const auto& [flag, value] : FlagsForChild()) {
      args.push_back(flag);
      if (!value.empty()) args.push_back(value);
    }
    std::vector<char*> argv;
    std::string self;
    char buf[4096] = {0};
    const ssize_t len = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (len > 0) self.assign(buf, static_cast<size_t>(len));
    for (auto& a : args) {
      if (a == "/proc/self/exe" && !self.empty()) a = self;
      argv.push_back(a.data());
    }
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    return ReportError(ErrnoError(Code::kLaunchFailed, errno, "re-executing choir to start ranks"));
  }

  std::vector<std::pair<std::string, std::string>> FlagsForChild() const {
    std::vector<std::pair<std::string, std::string>> f = {
        {"--op", op_}, {"--dtype", dtype_}, {"--reduce-op", reduce_op_}, {"--min-bytes", min_bytes_},
        {"--max-bytes", max_bytes_}, {"--step-factor", fmt::format("{}", step_factor_)},
        {"--iters", std::to_string(iters_)}, {"--time-per-size", fmt::format("{}", time_per_size_)},
        {"--warmup", std::to_string(warmup_)}, {"--repeat", std::to_string(repeat_)},
        {"--root", std::to_string(root_)}, {"--buffers", buffers_}};
    if (check_) f.push_back({"--check", ""});
    if (!algo_.empty()) f.push_back({"--algo", algo_});
    if (!transport_.empty()) f.push_back({"--transport", transport_});
    if (!json_path_.empty()) f.push_back({"--json", json_path_});
    if (!baseline_path_.empty()) f.push_back({"--baseline", baseline_path_});
    return f;
  }

  Work Issue(Communicator& c, const std::string& op, DataType t, ReduceOp rop, size_t count,
             const CallOptions& call) {
    uint8_t* send = send_.data();
    uint8_t* recv = recv_.data();
    if (op == "allreduce") return c.Allreduce(send, recv, count, t, rop, call);
    if (op == "reduce_scatter") return c.ReduceScatter(send, recv, count, t, rop, call);
    if (op == "allgather") return c.Allgather(send, recv, count, t, call);
    // In place, as MPI_Bcast and torch.distributed.broadcast are (the root
    // sends from the buffer it receives into): no extra copy on the root.
    if (op == "broadcast") return c.Broadcast(recv, recv, count, t, root_, call);
    if (op == "reduce") return c.Reduce(send, recv, count, t, rop, root_, call);
    return c.Alltoall(send, recv, count, t, call);
  }

  Status Measure(Communicator& c, const std::string& op, DataType t, ReduceOp rop, size_t count, Sample* s) {
    const size_t es = DataTypeSize(t);
    const size_t n = static_cast<size_t>(c.size());
    const size_t send_elems = (op == "reduce_scatter" || op == "alltoall") ? count * n : count;
    const size_t recv_elems = (op == "allgather" || op == "alltoall") ? count * n : count;
    Status got = send_.Reserve(send_elems * es, buffers_ == "shared");
    if (got.ok()) got = recv_.Reserve(recv_elems * es, buffers_ == "shared");
    // Every rank learns whether every rank has its buffers before any times a
    // collective (one rank failing alone would leave the others waiting).
    int64_t all_got = got.ok() ? 1 : 0;
    CHOIR_RETURN_IF_ERROR(c.Allreduce(&all_got, &all_got, 1, DataType::kInt64, ReduceOp::kMin).Wait());
    if (!got.ok()) return got;
    if (all_got == 0) return Status(Code::kShmError, "another rank could not allocate its --buffers " + buffers_ + " buffers");
    CallOptions call;
    call.algorithm = algo_;
    for (int i = 0; i < warmup_; ++i) CHOIR_RETURN_IF_ERROR(Issue(c, op, t, rop, count, call).Wait());
    // Rank 0 decides the iteration count so that every rank runs the same number.
    int64_t iters = iters_;
    if (iters == 0) {
      const int64_t t0 = NowNanos();
      Work w = Issue(c, op, t, rop, count, call);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      const double one = std::max(1e-7, static_cast<double>(NowNanos() - t0) * 1e-9);
      iters = std::clamp<int64_t>(static_cast<int64_t>(time_per_size_ / one), 5, 100000);
    }
    CHOIR_RETURN_IF_ERROR(c.Broadcast(&iters, &iters, 1, DataType::kInt64, 0).Wait());
    std::vector<double> mine(static_cast<size_t>(iters));
    std::map<std::string, int64_t> routes;
    const bool every_route = s->bytes >= kRoutesMinBytes;
    for (int64_t i = 0; i < iters; ++i) {
      const int64_t t0 = NowNanos();
      Work w = Issue(c, op, t, rop, count, call);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      mine[static_cast<size_t>(i)] = static_cast<double>(NowNanos() - t0) * 1e-3;
      if (i == 0 || every_route) ++routes[w.info().algorithm];
    }
    std::vector<double> all(mine.size() * n);
    CHOIR_RETURN_IF_ERROR(c.Gather(mine.data(), all.data(), mine.size(), DataType::kFloat64, 0).Wait());
    if (c.rank() == 0) {
      std::vector<double> per_op(mine.size(), 0);  // slowest rank per iteration
      for (size_t r = 0; r < n; ++r) {
        for (size_t i = 0; i < mine.size(); ++i) per_op[i] = std::max(per_op[i], all[r * mine.size() + i]);
      }
      const double mean = std::accumulate(per_op.begin(), per_op.end(), 0.0) / static_cast<double>(per_op.size());
      s->iters = static_cast<int>(iters);
      s->mean_us.push_back(mean);
      s->p50_us.push_back(Percentile(per_op, 0.5));
      s->p99_us.push_back(Percentile(per_op, 0.99));
      const double algbw = static_cast<double>(s->bytes) / (mean * 1e-6) / 1e9;
      s->algbw.push_back(algbw);
      s->busbw.push_back(algbw * BusFactor(op, c.size()));
      for (const auto& [name, calls] : routes) s->routes[name] += calls;
      s->algorithm = RouteSummary(s->routes);
    }
    return Status::Ok();
  }

  void PrintHeader(const std::string& op) const {
    fmt::print("#\n# {}\n# {:>12} {:>12} {:>11} {:>11} {:>11} {:>9} {:>9} {:>8}  {:<20} {}\n", op, "bytes",
               "count", "mean(us)", "p50(us)", "p99(us)", "algbw", "busbw", "spread", "algorithm", "check");
  }

  const json* FindBaseline(const json& baseline, const Sample& s) const {
    if (baseline.is_null()) return nullptr;
    for (const json& r : baseline["results"]) {
      if (r.value("op", "") == s.op && r.value("bytes", uint64_t{0}) == s.bytes) return &r;
    }
    return nullptr;
  }

  void PrintRow(const Sample& s, const json& baseline) const {
    const double busbw = Median(s.busbw);
    std::string line = fmt::format("  {:>12} {:>12} {:>11.2f} {:>11.2f} {:>11.2f} {:>9.3f} {:>9.3f} {:>7.1f}%  {:<20} {}",
                                   s.bytes, s.count, Median(s.mean_us), Median(s.p50_us), Median(s.p99_us),
                                   Median(s.algbw), busbw, Spread(s.busbw) * 100, s.algorithm,
                                   s.check.empty() ? "-" : "check=" + s.check);
    if (const json* b = FindBaseline(baseline, s)) {
      const double base = b->value("busbw_median", 0.0);
      const double noise = std::max(b->value("busbw_spread", 0.0), Spread(s.busbw));
      const double change = base > 0 ? busbw / base - 1 : 0;
      const char* verdict = std::fabs(change) <= noise ? "within noise" : (change > 0 ? "FASTER" : "SLOWER");
      line += fmt::format("  vs baseline {:.3f}: {:+.1f}% ({}; noise {:.1f}%)", base, change * 100, verdict, noise * 100);
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }

  Status WriteJson(const Communicator& c, const std::vector<Sample>& samples, DataType t, ReduceOp rop) const {
    json results = json::array();
    for (const Sample& s : samples) {
      results.push_back({{"op", s.op}, {"bytes", s.bytes}, {"count", s.count}, {"dtype", DataTypeName(t)},
                         {"reduce_op", ReduceOpName(rop)}, {"iters", s.iters}, {"mean_us", s.mean_us},
                         {"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"algbw_gbps", s.algbw},
                         {"busbw_gbps", s.busbw}, {"busbw_median", Median(s.busbw)},
                         {"busbw_spread", Spread(s.busbw)}, {"algorithm", s.algorithm}, {"routes", s.routes},
                         {"check", s.check}});
    }
    const json doc = {{"tool", "choir perf"}, {"ranks", c.size()}, {"machine", MachineDescription(c)},
                      {"settings", SettingsInEffect()}, {"repeat", repeat_},
                      {"buffers", buffers_}, {"results", results}};
    std::ofstream out(json_path_);
    out << doc.dump(2) << "\n";
    if (!out) return Status(Code::kSystemError, "cannot write --json file " + json_path_);
    return Status::Ok();
  }

  CLI::App* app_ = nullptr;
  int nproc_ = 0;
  std::string op_ = "allreduce", dtype_ = "float32", reduce_op_ = "sum";
  std::string min_bytes_ = "8", max_bytes_ = "256M";
  double step_factor_ = 2;
  int64_t iters_ = 0;
  double time_per_size_ = 0.2;
  int warmup_ = 5;
  int repeat_ = 1;
  bool check_ = false;
  std::string algo_, transport_, json_path_, baseline_path_;
  int root_ = 0;
  std::string buffers_ = "heap";
  BenchBuffer send_, recv_;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(PerfCommand, "perf", "Measure algbw/busbw of collectives per size (nccl-tests style)");

}  // namespace choir::cli
