// `choir perf`: the bus-bandwidth benchmark (choir's nccl-tests / hccl_test).
//
//   choir perf [-n N] [--op allreduce|reduce_scatter|allgather|broadcast|reduce|alltoall|gather|scatter|all|LIST]
//              [--dtype float32|all|LIST] [--reduce-op sum|all|LIST] [--min-bytes 8] [--max-bytes 256M]
//              [--step-factor 2] [--iters N | --time-per-size S] [--warmup N] [--repeat R]
//              [--check] [--algo NAME] [--transport T] [--buffers heap|shared]
//              [--buffer-offset B] [--in-place] [--root R] [--json FILE] [--baseline FILE]
//
// Under `choir run` every rank runs it; with -n N and no launcher around, it
// starts its own N local ranks (`choir run -n N choir perf ...`), so no MPI
// is needed. Times are per operation: each iteration is timed on every rank
// and the operation's time is the slowest rank's; mean, p50 and p99 are over
// iterations; every launch first runs kLaunchWarmupCalls untimed 8-byte
// allreduces, and every timed loop ends in an untimed barrier (the MPI and
// gloo benchmarks of benchmarks/ do the same). algbw = bytes / mean time;
// busbw applies nccl-tests' factors: allreduce 2(n-1)/n; reduce_scatter,
// allgather, alltoall, gather and scatter (n-1)/n with bytes = the whole
// buffer (the root's, for gather and scatter); broadcast and reduce 1.
// --root names the root of broadcast, reduce, gather and scatter.
//
// --dtype and --reduce-op take a comma list or `all`, as --op does
// (nccl-tests' -d all -o all): every op runs with every type, and the ops
// that reduce (allreduce, reduce_scatter, reduce) with every reduce op too;
// a pair choir does not reduce (a bitwise op on a floating-point type) is
// left out and named in the header and --json, and a list that leaves an op
// nothing to measure is refused.
//
// --buffers shared takes the send and receive buffers from choir::SharedBuffer
// (memory the ranks of a host read from each other directly); the default is
// ordinary heap memory, like the MPI benchmarks use, starting on a page as
// theirs do. --buffer-offset B starts the heap buffers B bytes past the page
// instead (16: where a plain malloc's large blocks start), to time the
// buffers an application may really pass.
//
// --in-place times every collective in place, with nccl-tests' placements:
// the output is the input (allreduce, alltoall; reduce at the root), the
// rank's block of the input (reduce_scatter; scatter at the root) or the
// input is the rank's block of the output (allgather; gather at the root).
// torch.distributed's all_reduce, the most common call of a training job,
// is always in place. Broadcast is timed in place either way (the root
// sends from the buffer it receives into, as MPI_Bcast does).
//
// --repeat R measures every size R times and reports the median with its
// spread; --baseline FILE compares with an earlier --json run and calls a
// change real only when it exceeds the spread of both runs, and judges none
// unless both measured every size at least kMinRepeatsForVerdict (3) times.
//
// Every flag is checked before a rank starts (CheckFlags): a mistake gets one
// numbered error, not one per rank, and nothing is measured for nothing. That
// includes the --json target, the --baseline file, --algo for every --op, and
// whether the host has the memory the largest size needs.
//
// Thread-safety: runs on the main thread only.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "algorithms/algorithms.h"
#include "algorithms/op.h"
#include "algorithms/switch_points.h"
#include "base/clock.h"
#include "base/files.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "choir/choir.h"
#include "choir/selftest.h"
#include "perf_baseline.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

using json = nlohmann::json;

const std::vector<std::string> kPerfOps = {"allreduce", "reduce_scatter", "allgather", "broadcast",
                                           "reduce",    "alltoall",       "gather",    "scatter"};

// kPerfOps as the timed loop tells them apart, in the same order.
enum class PerfOp { kAllreduce, kReduceScatter, kAllgather, kBroadcast, kReduce, kAlltoall, kGather, kScatter };

// `op`, one of kPerfOps (checked when the flags are read).
PerfOp OpOf(const std::string& op) {
  return static_cast<PerfOp>(std::find(kPerfOps.begin(), kPerfOps.end(), op) - kPerfOps.begin());
}

double BusFactor(const std::string& op, int n) {
  if (op == "allreduce") return 2.0 * (n - 1) / n;
  if (op == "broadcast" || op == "reduce") return 1.0;
  return static_cast<double>(n - 1) / n;
}

// Whether the nccl-tests byte count of `op` is the whole buffer of all ranks
// (the root's whole buffer for gather and scatter).
bool WholeBuffer(const std::string& op) {
  return op == "reduce_scatter" || op == "allgather" || op == "alltoall" || op == "gather" || op == "scatter";
}

// Elements per rank for an operation whose nccl-tests byte count is `bytes`.
size_t CountFor(const std::string& op, uint64_t bytes, size_t es, int n) {
  return static_cast<size_t>(bytes / es / (WholeBuffer(op) ? static_cast<uint64_t>(n) : 1));
}

// Elements of a rank's send and receive buffers for `count` (CountFor). In
// place, allreduce, allgather and alltoall use the receive buffer alone and
// reduce_scatter the send buffer; broadcast uses the receive buffer alone
// either way. The rooted ops keep both: the root's placement differs from
// the other ranks'.
size_t SendElems(const std::string& op, size_t count, int n, bool in_place) {
  if (op == "broadcast" || (in_place && (op == "allreduce" || op == "allgather" || op == "alltoall"))) return 0;
  return op == "reduce_scatter" || op == "alltoall" || op == "scatter" ? count * static_cast<size_t>(n) : count;
}
size_t RecvElems(const std::string& op, size_t count, int n, bool in_place) {
  if (in_place && op == "reduce_scatter") return 0;
  return op == "allgather" || op == "alltoall" || op == "gather" ? count * static_cast<size_t>(n) : count;
}

// Bounds on counts that size the benchmark's own memory (every iteration's
// time is kept and gathered on rank 0).
constexpr int64_t kMaxIters = 1000000;
// Untimed 8-byte allreduces every rank runs once, before the first size:
// with more ranks than CPUs the first few dozen calls after a launch ran
// several times slower than the rest (the ranks settling on the CPUs), and
// the first size of every launch took 1.6x-1.9x its time elsewhere. The
// MPI and gloo benchmarks run the same.
constexpr int kLaunchWarmupCalls = 100;
constexpr int64_t kMaxWarmup = 1000000;
constexpr int kMaxRepeat = 1000;
constexpr double kMaxTimePerSize = 3600;

// A benchmark buffer that only grows: heap memory or a SharedBuffer, zeroed.
// Heap buffers start `offset` bytes past a page: by default on it, as
// coll_bench's (benchmarks/mpi) do, so that choir and the MPIs copy between
// the same alignments.
class BenchBuffer {
 public:
  static constexpr size_t kPage = 4096;
  Status Reserve(size_t bytes, bool shared, size_t offset = 0) {
    if (bytes <= size_) return Status::Ok();
    if (shared) {
      auto b = SharedBuffer::Allocate(bytes);
      if (!b.ok()) return b.status().WithContext("--buffers shared");
      shared_ = std::move(*b);
      data_ = shared_.as<uint8_t>();
    } else {
      heap_.reset();  // the old buffer goes first: no moment with both
      data_ = nullptr;
      size_ = 0;
      void* p = nullptr;
      if (posix_memalign(&p, kPage, offset + bytes) != 0) {
        return Status(Code::kOutOfMemory, "allocating " + strings::FormatBytes(bytes) + " of heap buffer failed");
      }
      heap_.reset(static_cast<uint8_t*>(p));
      std::memset(p, 0, offset + bytes);
      data_ = heap_.get() + offset;
    }
    size_ = bytes;
    return Status::Ok();
  }
  uint8_t* data() const { return data_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> heap_;
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

// One table of the run: an op with one element type and, for the ops that
// reduce, one reduce op (the others take the first of --reduce-op, unused).
struct PerfCase {
  std::string op;
  DataType dtype = DataType::kFloat32;
  ReduceOp rop = ReduceOp::kSum;
  bool reduces = false;
  // The reduce op's name in the header, --json and the baseline's rows;
  // "" for an op that does not reduce.
  std::string RopName() const { return reduces ? ReduceOpName(rop) : ""; }
};

struct Sample {
  PerfCase what;
  uint64_t bytes = 0;
  size_t count = 0;
  int iters = 0;
  std::vector<double> mean_us, p50_us, p99_us, algbw, busbw;  // one entry per repeat
  std::string algorithm;                  // the route most calls took, and the next (RouteSummary)
  std::map<std::string, int64_t> routes;  // calls per algorithm name as WorkInfo gives it
  std::string check;  // "ok", "FAILED", or "" when not checked
};

// Calls from this size on count their route one by one: a same-host walk
// may switch between calls ("shm_pipe" and "shm_pipe+cma", and
// "shm_pipe+stream" for streaming staging; docs/algorithms.md), and
// reading WorkInfo costs nothing next to such a call; smaller sizes show
// the first call's.
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

// How a run placed its outputs, for the header and its notes.
const char* Placement(bool in_place) { return in_place ? "in place" : "out of place"; }

double Median(std::vector<double> v) { return Percentile(std::move(v), 0.5); }
double Spread(const std::vector<double>& v) {
  if (v.size() < 2) return 0;
  const double med = Median(v);
  if (med <= 0) return 0;
  return (*std::max_element(v.begin(), v.end()) - *std::min_element(v.begin(), v.end())) / med;
}

// A whole-number setting (WORLD_SIZE), 0 when unset or not a number.
int SettingInt(const char* name) {
  const auto v = FindSetting(name);
  return v ? static_cast<int>(strings::ParseInt(v->value).value_or(0)) : 0;
}

// A whole-number environment variable (LOCAL_WORLD_SIZE), 0 when unset.
int EnvInt(const char* name) {
  const char* v = std::getenv(name);
  return v == nullptr ? 0 : static_cast<int>(strings::ParseInt(v).value_or(0));
}

// Whether `path` can take the --json file, checked before anything runs.
Status CheckJsonTarget(const std::string& path) {
  const Status s = files::CheckReplaceable(path);
  if (s.ok()) return s;
  return Status(Code::kUsageError, "--json " + path + ": " + s.message() + "; give a file in a directory you can write");
}

// The entries of a list flag (`flag` given as `text`): `all` for every one
// of `every`, or names separated by commas, each read by `parse`, in the
// order given, without repeats. UsageError naming the flag and the entry.
template <typename T, typename Parse>
Result<std::vector<T>> ParseList(const char* flag, const std::string& text, const std::vector<T>& every,
                                 Parse parse) {
  std::vector<T> out;
  for (const std::string& entry : strings::Split(text, ',')) {
    const std::string name(strings::Trim(entry));
    if (name.empty()) {
      return Status(Code::kUsageError,
                    fmt::format("{} '{}' has an empty entry; give names separated by commas, or all", flag, text));
    }
    std::vector<T> named = every;
    if (strings::ToLower(name) != "all") {
      auto one = parse(name);
      if (!one.ok()) {
        return Status(Code::kUsageError, fmt::format("{}: {} (or all, or a comma list of them)", flag,
                                                     one.status().message()));
      }
      named = {*one};
    }
    for (const T& v : named) {
      if (std::find(out.begin(), out.end(), v) == out.end()) out.push_back(v);
    }
  }
  return out;
}

class PerfCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_option("-n,--nproc", nproc_, "Start this many local ranks (when not under a launcher)");
    app.add_option("--op", op_,
                   "allreduce, reduce_scatter, allgather, broadcast, reduce, alltoall, gather, scatter, all, "
                   "or a comma list");
    app.add_option("--dtype", dtype_, "Element type, all, or a comma list (default float32)");
    app.add_option("--reduce-op", reduce_op_,
                   "Reduction of allreduce, reduce_scatter and reduce, all, or a comma list (default sum)");
    app.add_option("--min-bytes", min_bytes_, "Smallest size (default 8; K/M/G suffixes)");
    app.add_option("--max-bytes", max_bytes_, "Largest size (default 256M)");
    app.add_option("--step-factor", step_factor_, "Size multiplier between rows (default 2)");
    app.add_option("--iters", iters_, "Timed iterations per size (default: fill --time-per-size; at most 1000000)");
    app.add_option("--time-per-size", time_per_size_,
                   "Seconds of timed iterations per size (default 0.2; at most 1000000 iterations)");
    app.add_option("--warmup", warmup_, "Untimed iterations per size (default 5)");
    app.add_option("--repeat", repeat_, "Measure each size this many times; report median and spread");
    app.add_flag("--check", check_,
                 "Verify every rank's whole output once per size (rooted ops: with --root's root)");
    app.add_option("--algo", algo_, "Force an algorithm by name");
    app.add_option("--transport", transport_, "auto, tcp or shm (default: CHOIR_TRANSPORT)");
    app.add_option("--buffers", buffers_, "heap (default) or shared: buffers from choir::SharedBuffer");
    app.add_option("--buffer-offset", buffer_offset_,
                   "Heap buffers start this many bytes past a page (default 0; 16: where malloc's large blocks start)");
    app.add_flag("--in-place", in_place_,
                 "Time every collective in place (nccl-tests' placements; broadcast is in place either way)");
    app.add_option("--json", json_path_, "Write every figure, the machine and the settings to FILE");
    app.add_option("--baseline", baseline_path_,
                   "Compare with an earlier --json FILE (changes are judged when both runs used --repeat 3 or more)");
    app.add_option("--root", root_, "Root rank for broadcast, reduce, gather and scatter (default 0)");
  }

  int Run() override {
    if (app_->count("--nproc") > 0 && nproc_ < 1) {
      return ReportUsageError(*app_, fmt::format("-n must be at least 1, got {}", nproc_));
    }
    const bool launch_own = nproc_ > 0 && FindSetting("WORLD_SIZE").value_or(SettingInfo{}).value == "-1";
    // The ranks check again (their flags are the same): a run under `choir
    // run` has no launcher-side check, and they need the parsed values.
    const int world = launch_own ? nproc_ : SettingInt("WORLD_SIZE");
    const int local = launch_own ? nproc_ : std::max(1, EnvInt("LOCAL_WORLD_SIZE"));
    if (Status flags = CheckFlags(world); !flags.ok()) return ReportFailure(*app_, flags);
    if (launch_own) {
      if (Status memory = CheckMemory(world, local); !memory.ok()) return ReportError(memory);
      if (Status files = CheckFiles(); !files.ok()) return ReportFailure(*app_, files);
      // The ranks' shared-memory segments grow with the square of -n.
      if (Status room = CheckSharedMemoryRoom(nproc_, transport_); !room.ok()) {
        return ReportError(room.WithContext(fmt::format("choir perf -n {}", nproc_)));
      }
      return Relaunch();
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
    if (world <= 0) {
      // Not known before the communicator existed: the checks that need it.
      if (Status flags = CheckFlags(c.size()); !flags.ok()) return ReportFailure(*app_, flags);
    }
    // Checks that differ between ranks (rank 0's files; memory, which a rank
    // checking after another allocated would see smaller) end in a vote
    // before anyone allocates, so that no rank stops alone.
    Status mine = CheckMemory(c.size(), local);
    if (mine.ok() && c.rank() == 0) mine = CheckFiles();
    int64_t first_failed = mine.ok() ? c.size() : c.rank();
    if (Status s = c.Allreduce(&first_failed, &first_failed, 1, DataType::kInt64, ReduceOp::kMin).Wait(); !s.ok()) {
      return ReportError(s);
    }
    if (!mine.ok()) return ReportFailure(*app_, mine);
    if (first_failed < c.size()) {
      return ReportError(Status(Code::kRemoteError, fmt::format("rank {} refused to run (its message says why)", first_failed)));
    }
    for (int i = 0; i < kLaunchWarmupCalls; ++i) {
      int64_t x = c.rank();
      if (Status s = c.Allreduce(&x, &x, 1, DataType::kInt64, ReduceOp::kMin).Wait(); !s.ok()) return ReportError(s);
    }
    if (c.rank() == 0) {
      fmt::print("# choir perf: {} ranks, {} {}, {} sizes from {} to {}, {} buffers{}, {}, {} switch points, {}\n",
                 c.size(), fmt::join(DtypeNames(), ","), fmt::join(RopNames(), ","), sizes_.size(),
                 strings::FormatBytes(sizes_.front()), strings::FormatBytes(sizes_.back()), buffers_,
                 buffer_offset_ > 0 ? fmt::format(" {} bytes past a page", buffer_offset_) : "", Placement(in_place_),
                 SwitchPoints(), BuildString());
      if (!not_measured_.empty()) fmt::print("{}\n", NotMeasuredNote());
      if (baseline_ && baseline_->buffers != buffers_) {
        fmt::print("# baseline {} used {} buffers, this run {}\n", baseline_->path, baseline_->buffers, buffers_);
      }
      if (baseline_ && baseline_->in_place != in_place_) {
        fmt::print("# baseline {} was timed {}, this run {}\n", baseline_->path, Placement(baseline_->in_place),
                   Placement(in_place_));
      }
      if (baseline_ && baseline_->launch_warmup_calls != kLaunchWarmupCalls) {
        fmt::print("# baseline {} ran {} untimed 8-byte allreduces before its first size, this run {} (with more "
                   "ranks than CPUs a launch's first size took up to 1.9x its time without them)\n",
                   baseline_->path, baseline_->launch_warmup_calls, kLaunchWarmupCalls);
      }
      if (baseline_ && baseline_->buffer_offset != buffer_offset_) {
        fmt::print("# baseline {} started its heap buffers {} bytes past a page, this run {}\n", baseline_->path,
                   baseline_->buffer_offset, buffer_offset_);
      }
      if (baseline_ && !NoiseMeasured()) fmt::print("{}\n", VerdictNote());
      // Only when the baseline has rows of a rooted op this run measures.
      auto rooted_row = [&](const BaselineRow& r) {
        algorithms::CollKind kind{};
        return std::find(ops_.begin(), ops_.end(), r.op) != ops_.end() && algorithms::ParseCollKind(r.op, &kind) &&
               algorithms::IsRooted(kind);
      };
      const bool rooted = baseline_ && std::any_of(baseline_->rows.begin(), baseline_->rows.end(), rooted_row);
      if (rooted && baseline_->root >= 0 && baseline_->root != root_) {
        fmt::print("# baseline {} measured the rooted ops with root {}, this run with root {}\n", baseline_->path,
                   baseline_->root, root_);
      }
    }
    std::vector<Sample> samples;
    size_t unmatched = 0;  // rows without a baseline row
    for (const PerfCase& k : cases_) {
      const std::string& op = k.op;
      const size_t es = DataTypeSize(k.dtype);
      if (c.rank() == 0) PrintHeader(k);
      size_t last_count = 0;
      for (uint64_t bytes : sizes_) {
        const size_t count = CountFor(op, bytes, es, c.size());
        // Sizes that round to the same element count would measure one row twice.
        if (count == 0 || count == last_count) continue;
        last_count = count;
        Sample s;
        s.what = k;
        s.count = count;
        s.bytes = static_cast<uint64_t>(count) * es * (WholeBuffer(op) ? static_cast<uint64_t>(c.size()) : 1);
        for (int r = 0; r < repeat_; ++r) {
          Status st = Measure(c, op, k.dtype, k.rop, count, &s);
          if (!st.ok()) return ReportError(st);
        }
        if (check_) {
          SweepOptions so;
          so.ops = {op};
          so.dtypes = {k.dtype};
          so.counts = {count};
          // The placement measured, and only it (broadcast, timed in place
          // either way, is checked in place only with --in-place).
          so.in_place = in_place_;
          so.out_of_place = !in_place_;
          so.shared_buffers = buffers_ == "shared";
          so.reduce_ops = {k.rop};
          so.algorithm = algo_;
          so.root = root_;  // the root measured
          auto cases = RunSweep(c, so);
          if (!cases.ok()) return ReportError(cases.status());
          bool ok = !cases->empty();
          for (const auto& one : *cases) ok = ok && one.ok;
          s.check = ok ? "ok" : "FAILED";
        }
        if (c.rank() == 0) {
          PrintRow(s);
          if (baseline_ && FindInBaseline(s) == nullptr) ++unmatched;
        }
        samples.push_back(std::move(s));
      }
    }
    if (c.rank() == 0 && baseline_ && unmatched > 0) {
      fmt::print("# {} of {} rows have no row of the same op, type, reduce op and bytes in the baseline {}\n", unmatched,
                 samples.size(), baseline_->path);
    }
    if (c.rank() == 0 && !json_path_.empty()) {
      Status st = WriteJson(c, samples);
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
    for (const std::string& arg : FlagsForChild()) args.push_back(arg);
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

  // The flags the user gave, as given, but -n: the ranks must parse exactly
  // what this process checked. An empty value stays an argument; a flag
  // goes as --flag=VALUE (--check=false stays false).
  std::vector<std::string> FlagsForChild() const {
    std::vector<std::string> f;
    for (const CLI::Option* opt : app_->get_options()) {
      const std::string name = opt->get_name();
      if (opt->count() == 0 || name == "--nproc" || name == "--help") continue;
      for (const std::string& value : opt->results()) {
        if (opt->get_expected_max() == 0) {
          f.push_back(name + "=" + value);
        } else {
          f.push_back(name);
          f.push_back(value);
        }
      }
    }
    return f;
  }

  // The text given for `flag` (the last one when repeated), for messages:
  // a number too large for its type reads back as the type's limit.
  std::string Given(const char* flag) const {
    const CLI::Option* opt = app_->get_option_no_throw(flag);
    return opt != nullptr && !opt->results().empty() ? opt->results().back() : "(default)";
  }

  // Parses and checks every flag into what the run uses (dtypes_, rops_,
  // ops_, cases_, not_measured_, sizes_, baseline_). `world`: the run's ranks, 0 or
  // less while not known (the checks that need it run again once the
  // communicator exists).
  Status CheckFlags(int world) {
    auto usage = [](std::string what) { return Status(Code::kUsageError, std::move(what)); };
    std::vector<DataType> every_dtype;
    for (int i = 0; i < kNumDataTypes; ++i) every_dtype.push_back(static_cast<DataType>(i));
    std::vector<ReduceOp> every_rop;
    for (int i = 0; i < kNumReduceOps; ++i) every_rop.push_back(static_cast<ReduceOp>(i));
    auto dtypes = ParseList("--dtype", dtype_, every_dtype, [](std::string_view name) { return ParseDataType(name); });
    if (!dtypes.ok()) return dtypes.status();
    auto rops = ParseList("--reduce-op", reduce_op_, every_rop, [](std::string_view name) { return ParseReduceOp(name); });
    if (!rops.ok()) return rops.status();
    dtypes_ = std::move(*dtypes);
    rops_ = std::move(*rops);

    ops_.clear();
    for (const std::string& entry : strings::Split(op_, ',')) {
      const std::string name(strings::Trim(entry));
      if (name.empty()) return usage("--op '" + op_ + "' has an empty entry; give op names separated by commas");
      const std::vector<std::string> named = name == "all" ? kPerfOps : std::vector<std::string>{name};
      for (const std::string& op : named) {
        if (std::find(kPerfOps.begin(), kPerfOps.end(), op) == kPerfOps.end()) {
          return usage(fmt::format("unknown --op '{}'; give {}, all, or a comma list of them", op,
                                   fmt::join(kPerfOps, ", ")));
        }
        if (std::find(ops_.begin(), ops_.end(), op) == ops_.end()) ops_.push_back(op);
      }
    }
    cases_.clear();
    not_measured_.clear();
    for (const std::string& op : ops_) {
      const bool reduces = PerfOpReduces(op);
      Status refused;  // the first pair choir does not reduce, for an op left with none
      size_t measured = 0;
      for (DataType t : dtypes_) {
        for (ReduceOp r : reduces ? rops_ : std::vector<ReduceOp>{rops_.front()}) {
          if (Status st = reduces ? CheckReduceSupported(t, r) : Status::Ok(); !st.ok()) {
            if (refused.ok()) refused = st;
            if (std::find(not_measured_.begin(), not_measured_.end(), std::make_pair(t, r)) == not_measured_.end()) {
              not_measured_.emplace_back(t, r);
            }
            continue;
          }
          cases_.push_back(PerfCase{op, t, r, reduces});
          ++measured;
        }
      }
      if (measured == 0) {
        return usage(fmt::format("--dtype {} with --reduce-op {} leaves {} nothing to measure: {}", dtype_,
                                 reduce_op_, op, refused.message()));
      }
    }
    if (!algo_.empty()) {
      for (const std::string& op : ops_) {
        algorithms::CollKind kind;
        if (!algorithms::ParseCollKind(op, &kind)) return Status(Code::kInternal, "no collective named " + op);
        if (algorithms::FindAlgorithm(kind, algo_) == nullptr) {
          std::vector<std::string> names;
          for (const algorithms::Algorithm* a : algorithms::AlgorithmsFor(kind)) names.push_back(a->name);
          // The list ends the line: scripts read it after "available: ".
          return usage(fmt::format("--algo {} does not run {} (force an algorithm on one --op at a time); "
                                   "available: {}",
                                   algo_, op, fmt::join(names, ", ")));
        }
      }
    }

    const auto lo = strings::ParseBytes(min_bytes_), hi = strings::ParseBytes(max_bytes_);
    if (!lo) return usage("--min-bytes '" + min_bytes_ + "' is not a size (examples: 8, 64K, 256M)");
    if (!hi) return usage("--max-bytes '" + max_bytes_ + "' is not a size (examples: 8, 64K, 256M)");
    if (*lo == 0) return usage("--min-bytes must be at least 1 byte, got '" + min_bytes_ + "'");
    constexpr uint64_t kMaxBytes = uint64_t{1} << 46;  // beyond any host's memory, within a double's integers
    if (*hi > kMaxBytes) return usage("--max-bytes must be at most " + strings::FormatBytes(kMaxBytes));
    if (*lo > *hi) {
      return usage(fmt::format("--min-bytes {} is above --max-bytes {}", strings::FormatBytes(*lo),
                               strings::FormatBytes(*hi)));
    }
    if (!std::isfinite(step_factor_) || step_factor_ < 1.01) {
      return usage(fmt::format("--step-factor must be a number of at least 1.01, got {}", Given("--step-factor")));
    }
    sizes_.clear();
    for (double b = static_cast<double>(*lo); b <= static_cast<double>(*hi) * 1.0000001; b *= step_factor_) {
      const auto bytes = static_cast<uint64_t>(std::llround(b));
      if (sizes_.empty() || bytes != sizes_.back()) sizes_.push_back(bytes);
    }

    if (repeat_ < 1 || repeat_ > kMaxRepeat) {
      return usage(fmt::format("--repeat must be 1 to {}, got {}", kMaxRepeat, Given("--repeat")));
    }
    if (warmup_ < 0 || warmup_ > kMaxWarmup) {
      return usage(fmt::format("--warmup must be 0 to {}, got {}", kMaxWarmup, Given("--warmup")));
    }
    if (iters_ < 0 || iters_ > kMaxIters) {
      return usage(fmt::format("--iters must be 1 to {} (0: fill --time-per-size), got {}", kMaxIters, Given("--iters")));
    }
    if (!std::isfinite(time_per_size_) || time_per_size_ <= 0 || time_per_size_ > kMaxTimePerSize) {
      return usage(fmt::format("--time-per-size must be more than 0 and at most {} seconds, got {}",
                               kMaxTimePerSize, Given("--time-per-size")));
    }
    if (iters_ > 0 && app_->count("--time-per-size") > 0) {
      return usage("give --iters or --time-per-size, not both");
    }
    if (buffers_ != "heap" && buffers_ != "shared") {
      return usage("--buffers must be heap or shared, got '" + buffers_ + "'");
    }
    if (buffer_offset_ < 0 || buffer_offset_ >= static_cast<int64_t>(BenchBuffer::kPage)) {
      return usage(fmt::format("--buffer-offset must be 0 to {} bytes, got {}", BenchBuffer::kPage - 1,
                               Given("--buffer-offset")));
    }
    if (buffer_offset_ > 0 && buffers_ != "heap") {
      return usage("--buffer-offset places heap buffers; SharedBuffers (--buffers shared) start on a page");
    }
    if (root_ < 0 || (world > 0 && root_ >= world)) {
      return usage(world > 0 ? fmt::format("--root must be a rank from 0 to {}, got {}", world - 1, root_)
                             : fmt::format("--root must be a rank (0 or more), got {}", root_));
    }
    if (transport_ != "" && transport_ != "auto" && transport_ != "tcp" && transport_ != "shm") {
      return usage("--transport must be auto, tcp or shm, got '" + transport_ + "'");
    }
    if (world <= 0) return Status::Ok();
    world_ = world;
    for (const PerfCase& k : cases_) {
      const size_t es = DataTypeSize(k.dtype);
      bool any = false;
      for (uint64_t bytes : sizes_) any = any || CountFor(k.op, bytes, es, world) > 0;
      if (!any) {
        const uint64_t least = es * (WholeBuffer(k.op) ? static_cast<uint64_t>(world) : 1);
        return usage(fmt::format("no size up to --max-bytes {} holds one {} element per rank for {} with {} ranks; "
                                 "raise --max-bytes to at least {}",
                                 max_bytes_, DataTypeName(k.dtype), k.op, world, least));
      }
    }
    return Status::Ok();
  }

  // The --json target and the --baseline file, which only rank 0 uses (and
  // the process that starts the ranks, on rank 0's host): UsageError naming
  // the file. After CheckFlags with the world known.
  Status CheckFiles() {
    if (!json_path_.empty()) CHOIR_RETURN_IF_ERROR(CheckJsonTarget(json_path_));
    if (!baseline_path_.empty()) {
      auto b = LoadBaseline(baseline_path_, PerfRunShape{world_, ops_, DtypeNames(), RopNames()});
      if (!b.ok()) return b.status();
      baseline_ = std::move(*b);
    }
    return Status::Ok();
  }

  // OutOfMemory when the buffers of the largest size, for `local` ranks on
  // this host, exceed its available memory. After CheckFlags(world, ...).
  Status CheckMemory(int world, int local) const {
    uint64_t most = 0;  // bytes of send and receive buffers one rank needs at the largest size
    for (const PerfCase& k : cases_) {
      const size_t es = DataTypeSize(k.dtype);
      const size_t count = CountFor(k.op, sizes_.back(), es, world);
      most = std::max<uint64_t>(
          most, (SendElems(k.op, count, world, in_place_) + RecvElems(k.op, count, world, in_place_)) * es);
    }
    // --check keeps reference copies as large as the buffers.
    const uint64_t per_rank = check_ ? 2 * most : most;
    const uint64_t host = per_rank * static_cast<uint64_t>(std::max(local, 1));
    const uint64_t available = files::ReadMeminfoBytes("MemAvailable");  // 0: unknown
    if (available > 0 && host > available) {
      return Status(Code::kOutOfMemory,
                    fmt::format("the largest size, --max-bytes {}, needs {} per rank for its buffers{}, {} for the "
                                "{} ranks on this host, but {} of memory is available: lower --max-bytes or "
                                "start fewer ranks",
                                max_bytes_, strings::FormatBytes(per_rank), check_ ? " and --check's copies" : "",
                                strings::FormatBytes(host), std::max(local, 1), strings::FormatBytes(available)));
    }
    return Status::Ok();
  }

  // `op` is resolved once per size (OpOf): the timed loop compares no
  // strings, as the MPI benchmark's switches on an int.
  Work Issue(Communicator& c, PerfOp op, DataType t, ReduceOp rop, size_t count, const CallOptions& call) {
    uint8_t* send = send_.data();
    uint8_t* recv = recv_.data();
    if (in_place_) {
      const size_t block = count * DataTypeSize(t);
      const size_t mine = static_cast<size_t>(c.rank()) * block, root = static_cast<size_t>(root_) * block;
      const bool at_root = c.rank() == root_;
      switch (op) {
        case PerfOp::kAllreduce: return c.Allreduce(recv, recv, count, t, rop, call);
        case PerfOp::kReduceScatter: return c.ReduceScatter(send, send + mine, count, t, rop, call);
        case PerfOp::kAllgather: return c.Allgather(recv + mine, recv, count, t, call);
        case PerfOp::kBroadcast: break;  // in place either way (below)
        case PerfOp::kReduce: return c.Reduce(at_root ? recv : send, recv, count, t, rop, root_, call);
        case PerfOp::kAlltoall: return c.Alltoall(recv, recv, count, t, call);
        case PerfOp::kGather: return c.Gather(at_root ? recv + root : send, recv, count, t, root_, call);
        case PerfOp::kScatter: return c.Scatter(send, at_root ? send + root : recv, count, t, root_, call);
      }
    }
    switch (op) {
      case PerfOp::kAllreduce: return c.Allreduce(send, recv, count, t, rop, call);
      case PerfOp::kReduceScatter: return c.ReduceScatter(send, recv, count, t, rop, call);
      case PerfOp::kAllgather: return c.Allgather(send, recv, count, t, call);
      // In place, as MPI_Bcast and torch.distributed.broadcast are (the root
      // sends from the buffer it receives into): no extra copy on the root.
      case PerfOp::kBroadcast: return c.Broadcast(recv, recv, count, t, root_, call);
      case PerfOp::kReduce: return c.Reduce(send, recv, count, t, rop, root_, call);
      case PerfOp::kAlltoall: return c.Alltoall(send, recv, count, t, call);
      case PerfOp::kGather: return c.Gather(send, recv, count, t, root_, call);
      case PerfOp::kScatter: return c.Scatter(send, recv, count, t, root_, call);
    }
    return c.Scatter(send, recv, count, t, root_, call);  // not reached: every PerfOp has its case
  }

  Status Measure(Communicator& c, const std::string& op, DataType t, ReduceOp rop, size_t count, Sample* s) {
    const size_t es = DataTypeSize(t);
    const size_t n = static_cast<size_t>(c.size());
    const bool shared = buffers_ == "shared";
    const auto offset = static_cast<size_t>(buffer_offset_);
    Status got = send_.Reserve(SendElems(op, count, c.size(), in_place_) * es, shared, offset);
    if (got.ok()) got = recv_.Reserve(RecvElems(op, count, c.size(), in_place_) * es, shared, offset);
    // Every rank learns whether every rank has its buffers before any times a
    // collective (one rank failing alone would leave the others waiting).
    int64_t all_got = got.ok() ? 1 : 0;
    CHOIR_RETURN_IF_ERROR(c.Allreduce(&all_got, &all_got, 1, DataType::kInt64, ReduceOp::kMin).Wait());
    if (!got.ok()) return got;
    if (all_got == 0) return Status(Code::kShmError, "another rank could not allocate its --buffers " + buffers_ + " buffers");
    CallOptions call;
    call.algorithm = algo_;
    const PerfOp which = OpOf(op);
    for (int64_t i = 0; i < warmup_; ++i) CHOIR_RETURN_IF_ERROR(Issue(c, which, t, rop, count, call).Wait());
    // Rank 0 decides the iteration count so that every rank runs the same number.
    int64_t iters = iters_;
    if (iters == 0) {
      const int64_t t0 = NowNanos();
      Work w = Issue(c, which, t, rop, count, call);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      const double one = std::max(1e-7, static_cast<double>(NowNanos() - t0) * 1e-9);
      iters = std::clamp<int64_t>(static_cast<int64_t>(time_per_size_ / one), 5, kMaxIters);
    }
    CHOIR_RETURN_IF_ERROR(c.Broadcast(&iters, &iters, 1, DataType::kInt64, 0).Wait());
    std::vector<double> mine(static_cast<size_t>(iters));
    std::map<std::string, int64_t> routes;
    const bool every_route = s->bytes >= kRoutesMinBytes;
    for (int64_t i = 0; i < iters; ++i) {
      const int64_t t0 = NowNanos();
      Work w = Issue(c, which, t, rop, count, call);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      mine[static_cast<size_t>(i)] = static_cast<double>(NowNanos() - t0) * 1e-3;
      if (i == 0 || every_route) {
        const WorkInfo info = w.info();
        ++routes[info.algorithm + (info.streaming_stages ? "+stream" : "")];
      }
    }
    // No rank leaves the timed loop before all have finished it: one that
    // went on to the gather below and the next size's buffers took the CPU
    // from a rank still in its last call (with more ranks than CPUs a last
    // call took up to 1.4 ms where the others took 5-10 us). The MPI and
    // gloo benchmarks do the same.
    CHOIR_RETURN_IF_ERROR(c.Barrier().Wait());
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

  // "# allreduce float32 sum", "# allgather float32", then the columns.
  void PrintHeader(const PerfCase& k) const {
    fmt::print("#\n# {} {}{}\n# {:>12} {:>12} {:>11} {:>11} {:>11} {:>9} {:>9} {:>8}  {:<20} {}\n", k.op,
               DataTypeName(k.dtype), k.reduces ? " " + k.RopName() : "", "bytes", "count", "mean(us)", "p50(us)",
               "p99(us)", "algbw", "busbw", "spread", "algorithm", "check");
  }

  const BaselineRow* FindInBaseline(const Sample& s) const {
    return baseline_->Find(s.what.op, DataTypeName(s.what.dtype), s.what.RopName(), s.bytes);
  }

  std::vector<std::string> DtypeNames() const {
    std::vector<std::string> names;
    for (DataType t : dtypes_) names.emplace_back(DataTypeName(t));
    return names;
  }
  std::vector<std::string> RopNames() const {
    std::vector<std::string> names;
    for (ReduceOp r : rops_) names.emplace_back(ReduceOpName(r));
    return names;
  }

  // The header's line on the pairs left out: "band with float16,float32;
  // bor with float16,float32", a reduce op at a time.
  std::string NotMeasuredNote() const {
    std::vector<std::string> parts;
    for (ReduceOp r : rops_) {
      std::vector<std::string> types;
      for (const auto& [t, op] : not_measured_) {
        if (op == r) types.emplace_back(DataTypeName(t));
      }
      if (!types.empty()) parts.push_back(fmt::format("{} with {}", ReduceOpName(r), fmt::join(types, ",")));
    }
    return fmt::format("# not measured, as choir does not reduce them: {}", fmt::join(parts, "; "));
  }

  void PrintRow(const Sample& s) const {
    const double busbw = Median(s.busbw);
    std::string line = fmt::format("  {:>12} {:>12} {:>11.2f} {:>11.2f} {:>11.2f} {:>9.3f} {:>9.3f} {:>7.1f}%  {:<20} {}",
                                   s.bytes, s.count, Median(s.mean_us), Median(s.p50_us), Median(s.p99_us),
                                   Median(s.algbw), busbw, Spread(s.busbw) * 100, s.algorithm,
                                   s.check.empty() ? "-" : "check=" + s.check);
    if (const BaselineRow* b = baseline_ ? FindInBaseline(s) : nullptr) {
      const double base = b->busbw_median;
      const double change = base > 0 ? busbw / base - 1 : 0;
      if (!NoiseMeasured()) {
        line += fmt::format("  vs baseline {:.3f}: {:+.1f}% (not judged)", base, change * 100);
      } else {
        const double noise = std::max(b->busbw_spread, Spread(s.busbw));
        const char* verdict = std::fabs(change) <= noise ? "within noise" : (change > 0 ? "FASTER" : "SLOWER");
        line += fmt::format("  vs baseline {:.3f}: {:+.1f}% ({}; noise {:.1f}%)", base, change * 100, verdict,
                            noise * 100);
      }
    }
    fmt::print("{}\n", line);
    std::fflush(stdout);
  }

  // Whether both this run and the baseline measured every size often enough
  // for their spread to tell a change from noise.
  bool NoiseMeasured() const {
    return baseline_ && repeat_ >= kMinRepeatsForVerdict && baseline_->repeat >= kMinRepeatsForVerdict;
  }

  // The header's note when !NoiseMeasured(): how often each side measured,
  // and which side must measure again for a verdict.
  std::string VerdictNote() const {
    auto times = [](int n) { return fmt::format("{} time{}", n, n == 1 ? "" : "s"); };
    const std::string measured = baseline_->repeat > 0
                                     ? "measured each size " + times(baseline_->repeat)
                                     : "does not say how often it measured each size";
    const bool base_short = baseline_->repeat < kMinRepeatsForVerdict;
    const bool run_short = repeat_ < kMinRepeatsForVerdict;
    const std::string what = base_short && run_short ? "measure the baseline and this run"
                             : base_short            ? "measure the baseline again"
                                                     : "run this one";
    return fmt::format("# baseline {} {}, this run {}: changes are shown but not judged; {} with --repeat {} or "
                       "more to tell a change from noise",
                       baseline_->path, measured, times(repeat_), what, kMinRepeatsForVerdict);
  }

  Status WriteJson(const Communicator& c, const std::vector<Sample>& samples) const {
    json results = json::array();
    for (const Sample& s : samples) {
      results.push_back({{"op", s.what.op}, {"bytes", s.bytes}, {"count", s.count}, {"dtype", DataTypeName(s.what.dtype)},
                         {"reduce_op", s.what.RopName()}, {"iters", s.iters}, {"mean_us", s.mean_us},
                         {"p50_us", s.p50_us}, {"p99_us", s.p99_us}, {"algbw_gbps", s.algbw},
                         {"busbw_gbps", s.busbw}, {"busbw_median", Median(s.busbw)},
                         {"busbw_spread", Spread(s.busbw)}, {"algorithm", s.algorithm}, {"routes", s.routes},
                         {"check", s.check}});
    }
    json not_measured = json::array();
    for (const auto& [t, r] : not_measured_) {
      not_measured.push_back({{"dtype", DataTypeName(t)}, {"reduce_op", ReduceOpName(r)},
                              {"why", CheckReduceSupported(t, r).message()}});
    }
    const json doc = {{"tool", "choir perf"}, {"ranks", c.size()}, {"machine", MachineDescription(c)},
                      {"settings", SettingsInEffect()}, {"repeat", repeat_},
                      {"buffers", buffers_}, {"buffer_offset", buffer_offset_}, {"in_place", in_place_},
                      {"root", root_},
                      {"launch_warmup_calls", kLaunchWarmupCalls}, {"not_measured", not_measured},
                      {"results", results}};
    // Text that is not UTF-8 (a hostname, a setting) is replaced, not thrown on.
    const std::string text = JsonDump(doc, 2) + "\n";
    return files::ReplaceFile(json_path_, text);
  }

  CLI::App* app_ = nullptr;
  int nproc_ = 0;
  std::string op_ = "allreduce", dtype_ = "float32", reduce_op_ = "sum";
  std::string min_bytes_ = "8", max_bytes_ = "256M";
  double step_factor_ = 2;
  int64_t iters_ = 0;
  double time_per_size_ = 0.2;
  int64_t warmup_ = 5;
  int repeat_ = 1;
  bool check_ = false;
  std::string algo_, transport_, json_path_, baseline_path_;
  int root_ = 0;
  std::string buffers_ = "heap";
  int64_t buffer_offset_ = 0;
  bool in_place_ = false;
  // What CheckFlags made of the flags.
  std::vector<DataType> dtypes_;
  std::vector<ReduceOp> rops_;
  std::vector<std::string> ops_;
  std::vector<PerfCase> cases_;  // the tables, in the order they run: op, then type, then reduce op
  std::vector<std::pair<DataType, ReduceOp>> not_measured_;  // pairs choir does not reduce, left out
  std::vector<uint64_t> sizes_;
  std::optional<Baseline> baseline_;
  int world_ = 0;  // ranks of the run, once known
  BenchBuffer send_, recv_;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(PerfCommand, "perf", "Measure algbw/busbw of collectives per size (nccl-tests style)");

}  // namespace choir::cli
