// `choir topo`: the topology and groups a job would get, and what choir
// would run on them.
//
//   choir topo [-n RANKS_PER_HOST] [--hosts H] [--interleave]     this machine (hwloc)
//   choir topo --synthetic "pack:2 numa:1 core:4 pu:1" [-n ..] [--hosts ..] [--interleave]
//   choir topo --file FILE [-n WORLD]                             a topology file
//   ... [--write FILE] [--json]
//   choir topo --check FILE [-n WORLD] [--json]                   PASS, or the E109 error
//
// For a machine (detected or synthetic) the job is H hosts alike with N ranks
// each, placed the way `choir run` numbers them (host-major; --interleave
// deals ranks round-robin over hosts, the layout that hurts most) and bound
// block-wise to NUMA nodes. The plan comes from ExplainPlan (the cost
// model); while that is not available the levels are still printed with a
// note. docs/topology.md describes the file format and this command.
//
// Thread-safety: runs on the main thread only.
#include <fmt/format.h>

#include <cstdint>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "choir/topology.h"
#include "subcommand.h"
#include "topology/build.h"
#include "topology/machine.h"

namespace choir::cli {
namespace {

using ojson = nlohmann::ordered_json;

constexpr int kMaxRanksPerHost = 4096;  // as `choir run`
constexpr int kMaxHosts = 65536;

std::string FormatSeconds(double s) {
  if (s < 1e-3) return fmt::format("{:.1f} us", s * 1e6);
  if (s < 1) return fmt::format("{:.2f} ms", s * 1e3);
  return fmt::format("{:.3f} s", s);
}

std::string SizeRange(const PlanRow& row) {
  if (row.max_bytes == UINT64_MAX) return strings::FormatBytes(row.min_bytes) + " and up";
  return strings::FormatBytes(row.min_bytes) + " - " + strings::FormatBytes(row.max_bytes);
}

ojson StatusJson(const Status& status) {
  return ojson{{"code", status.number()},
               {"name", GetErrorInfo(status.code()).name},
               {"message", status.message()}};
}

ojson PlaceJson(const RankPlace& place) {
  return ojson{{"host", place.host},
               {"package", place.package},
               {"numa", place.numa},
               {"cores", place.cores}};
}

class TopoCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app.add_option("--file", file_, "Show the topology a topology file describes.");
    app.add_option("--synthetic", synthetic_,
                   "Describe the machine with an hwloc synthetic string instead of detecting it, "
                   "e.g. \"pack:2 numa:1 core:4 pu:1\".");
    n_option_ = app.add_option(
        "-n,--ranks", n_,
        "Ranks per host of the job (default: one per core). With --file or --check: the "
        "world size the file must describe.");
    hosts_option_ = app.add_option("--hosts", hosts_, "Number of hosts alike (default 1).");
    app.add_flag("--interleave", interleave_,
                 "Number ranks round-robin over hosts (rank r on host r % H) instead of "
                 "host-major.");
    app.add_option("--write", write_,
                   "Write what was detected, synthesized or read as a topology file ('-' = "
                   "stdout).");
    app.add_option("--check", check_,
                   "Validate a topology file: print PASS (exit 0) or the numbered error (exit 1).");
    app.add_flag("--json", json_, "Print machine-readable JSON.");
    app.footer(
        "Without --file/--synthetic/--check the machine is this one, read with hwloc. "
        "The file format and the levels are described in docs/topology.md.");
    app_ = &app;
  }

  int Run() override {
    if (const std::optional<std::string> wrong = CheckFlags()) {
      return ReportUsageError(*app_, *wrong);
    }
    if (!check_.empty()) return RunCheck();

    Topology topology;
    std::optional<RankPlace> this_process;
    if (!file_.empty()) {
      Result<Topology> loaded = LoadTopologyFile(file_, n_option_->count() ? n_ : 0);
      if (!loaded.ok()) return ReportError(loaded.status());
      topology = std::move(loaded).value();
    } else {
      Result<Topology> shaped = ShapeOnMachine(this_process);
      if (!shaped.ok()) {
        if (shaped.status().code() == Code::kInvalidArgument) {
          return ReportUsageError(*app_, "--synthetic: " + shaped.status().message());
        }
        return ReportError(shaped.status());
      }
      topology = std::move(shaped).value();
    }

    if (!write_.empty()) {
      const Status written = Write(topology);
      if (!written.ok()) return ReportError(written);
      if (write_ == "-") return kExitOk;  // stdout holds the file only
    }
    const Result<std::vector<PlanRow>> plan = ExplainPlan(topology);
    if (json_) {
      PrintJson(topology, this_process, plan);
    } else {
      PrintText(topology, this_process, plan);
    }
    if (!plan.ok() && plan.status().code() != Code::kNotSupported) return kExitFailure;
    return kExitOk;
  }

 private:
  // A usage mistake in the combination of flags, or nullopt.
  std::optional<std::string> CheckFlags() const {
    // An empty value would silently fall back to this machine's topology.
    for (const char* flag : {"--file", "--check", "--synthetic", "--write"}) {
      const CLI::Option* opt = app_->get_option_no_throw(flag);
      if (opt != nullptr && opt->count() > 0 && !opt->results().empty() && opt->results().back().empty()) {
        return std::string(flag) + " needs a value, got an empty one";
      }
    }
    const int sources = !file_.empty() + !synthetic_.empty() + !check_.empty();
    if (sources > 1) return "use only one of --file, --synthetic and --check";
    const bool shape = hosts_option_->count() > 0 || interleave_;
    if (!check_.empty() && (shape || !write_.empty())) {
      return "--check takes only -n WORLD and --json";
    }
    if (!file_.empty() && shape) {
      return "--hosts and --interleave shape a job on a machine; a topology file already "
             "fixes hosts and ranks";
    }
    if (n_option_->count() > 0) {
      const bool world = !file_.empty() || !check_.empty();
      const int max = world ? topology::kMaxWorldSize : kMaxRanksPerHost;
      if (n_ < 1 || n_ > max) {
        return fmt::format("-n {}: {} must be between 1 and {}", n_,
                           world ? "the world size" : "ranks per host", max);
      }
    }
    if (hosts_ < 1 || hosts_ > kMaxHosts) {
      return fmt::format("--hosts {}: must be between 1 and {}", hosts_, kMaxHosts);
    }
    if (n_option_->count() > 0 && file_.empty() && check_.empty() &&
        static_cast<int64_t>(n_) * hosts_ > topology::kMaxWorldSize) {
      return fmt::format("-n {} --hosts {}: more than {} ranks in all", n_, hosts_,
                         topology::kMaxWorldSize);
    }
    if (!synthetic_.empty() && strings::Trim(synthetic_).empty()) {
      return "--synthetic needs a description such as \"pack:2 numa:1 core:4 pu:1\"";
    }
    return std::nullopt;
  }

  int RunCheck() const {
    const Result<Topology> loaded = LoadTopologyFile(check_, n_option_->count() ? n_ : 0);
    if (json_) {
      ojson out{{"file", check_}, {"pass", loaded.ok()}};
      if (loaded.ok()) {
        out["world_size"] = loaded->world_size;
        out["hosts"] = loaded->hosts.size();
      } else {
        out["error"] = StatusJson(loaded.status());
      }
      fmt::print("{}\n", JsonDump(out, 2));
      return loaded.ok() ? kExitOk : kExitFailure;
    }
    if (!loaded.ok()) return ReportError(loaded.status());
    size_t groups = 0;
    for (const HostInfo& host : loaded->hosts) groups += host.groups.size();
    fmt::print("PASS {}: {} rank{} on {} host{}, {} group{}\n", check_, loaded->world_size,
               loaded->world_size == 1 ? "" : "s", loaded->hosts.size(),
               loaded->hosts.size() == 1 ? "" : "s", groups, groups == 1 ? "" : "s");
    return kExitOk;
  }

  // The job shape on this machine or on the synthetic one.
  Result<Topology> ShapeOnMachine(std::optional<RankPlace>& this_process) const {
    Result<topology::MachineLayout> machine = topology::LoadMachineLayout(synthetic_);
    if (!machine.ok() && !synthetic_.empty()) return machine.status();
    std::string host = "host0";
    std::string source;
    if (synthetic_.empty()) {
      Result<RankPlace> place = DetectPlace();
      if (place.ok()) {
        this_process = *place;
        host = place->host;
      }
      source = fmt::format("detected on {} (hwloc{})", host,
                           machine.ok() ? "" : ": " + machine.status().ToString());
    } else {
      source = fmt::format("synthetic hwloc \"{}\"", synthetic_);
    }
    const topology::MachineLayout* layout = machine.ok() ? &*machine : nullptr;
    const int per_host =
        n_option_->count() ? n_ : (layout != nullptr ? std::max(1, layout->cores) : 1);
    if (static_cast<int64_t>(per_host) * hosts_ > topology::kMaxWorldSize) {
      return InvalidArgument(fmt::format("{} hosts x {} ranks is more than {} ranks", hosts_,
                                         per_host, topology::kMaxWorldSize));
    }
    std::vector<std::string> names = {host};
    for (int h = 1; h < hosts_; ++h) {
      std::string name = fmt::format("host{}", h);
      names.push_back(name == host ? fmt::format("{}-{}", host, h) : name);
    }
    source += fmt::format(", {} host{} x {} rank{}{}", hosts_, hosts_ == 1 ? "" : "s", per_host,
                          per_host == 1 ? "" : "s", interleave_ ? ", interleaved" : "");
    if (hosts_ > 1) source += " (hosts alike)";
    return topology::JobTopology(names, per_host, interleave_, layout, source);
  }

  Status Write(const Topology& topology) const {
    const std::string text = TopologyToJson(topology);
    if (write_ == "-") {
      fmt::print("{}", text);
      return Status::Ok();
    }
    // Written beside the file and renamed over it: a failed write leaves an
    // earlier topology file whole.
    return files::ReplaceFile(write_, text).WithContext("topology file");
  }

  void PrintText(const Topology& topology, const std::optional<RankPlace>& this_process,
                 const Result<std::vector<PlanRow>>& plan) const {
    fmt::print("{}", DescribeTopology(topology));
    if (this_process) {
      fmt::print("this process: host {}, package {}, NUMA {}, cores {}\n", this_process->host,
                 this_process->package < 0 ? "?" : std::to_string(this_process->package),
                 this_process->numa < 0 ? "?" : std::to_string(this_process->numa),
                 this_process->cores.empty() ? "?" : topology::FormatRankList(this_process->cores));
    }
    if (!plan.ok()) {
      fmt::print("plan: not available ({})\n", plan.status().ToString());
      if (plan.status().code() == Code::kNotSupported) {
        fmt::print(
            "  The levels above are what choir's hierarchical algorithms work on; the "
            "algorithm\n  per collective and size appears here once the cost model is built.\n");
      }
    } else {
      PrintPlan(*plan);
    }
    if (!write_.empty()) fmt::print("wrote {}\n", write_);
  }

  static void PrintPlan(const std::vector<PlanRow>& rows) {
    fmt::print("plan (cost model; CHOIR_ALGO overrides apply):\n");
    fmt::print("  {:<16} {:<24} {:<24} {:>12} {:>12}  {}\n", "COLLECTIVE", "SIZES", "ALGORITHM",
               "AT MIN", "AT MAX", "WHY");
    for (const PlanRow& row : rows) {
      fmt::print("  {:<16} {:<24} {:<24} {:>12} {:>12}  {}\n", row.collective, SizeRange(row),
                 row.algorithm, FormatSeconds(row.predicted_seconds_at_min),
                 FormatSeconds(row.predicted_seconds_at_max), row.why);
    }
  }

  void PrintJson(const Topology& topology, const std::optional<RankPlace>& this_process,
                 const Result<std::vector<PlanRow>>& plan) const {
    ojson out;
    out["source"] = topology.source;
    out["topology"] = ojson::parse(TopologyToJson(topology));
    if (this_process) out["this_process"] = PlaceJson(*this_process);
    if (plan.ok()) {
      ojson rows = ojson::array();
      for (const PlanRow& row : *plan) {
        rows.push_back(
            ojson{{"collective", row.collective},
                  {"min_bytes", row.min_bytes},
                  {"max_bytes", row.max_bytes == UINT64_MAX ? ojson() : ojson(row.max_bytes)},
                  {"algorithm", row.algorithm},
                  {"predicted_seconds_at_min", row.predicted_seconds_at_min},
                  {"predicted_seconds_at_max", row.predicted_seconds_at_max},
                  {"why", row.why}});
      }
      out["plan"] = rows;
    } else {
      out["plan"] = nullptr;
      out["plan_error"] = StatusJson(plan.status());
    }
    if (!write_.empty()) out["written"] = write_;
    fmt::print("{}\n", JsonDump(out, 2));
  }

  CLI::App* app_ = nullptr;
  std::string file_;
  std::string synthetic_;
  std::string check_;
  std::string write_;
  int n_ = 0;
  int hosts_ = 1;
  bool interleave_ = false;
  bool json_ = false;
  CLI::Option* n_option_ = nullptr;
  CLI::Option* hosts_option_ = nullptr;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(
    TopoCommand, "topo",
    "Show the topology, groups and plan a job would get; check topology files");

}  // namespace choir::cli
