// `choir doctor`: the per-host inspection run before every change.
//
//   choir doctor [--json] [--report DIR] [--root DIR | --facts FILE] [--port N]...
//   choir doctor --cluster [--bytes 4M] [--iters 5]      (under `choir run`, one rank per host)
//
// Prints one line per check (PASS/WARN/FAIL) and, for every non-PASS, its
// cause and fix. --report DIR keeps a dated snapshot (the field's practice
// of recording the host before each change): DIR/choir-doctor-HOST-TIME.json.
// --facts re-judges saved facts (a report or a bare facts object) without
// reading this host; --root reads /proc, /sys, /etc and /dev/shm under DIR.
// Exit code 1 (E603 HostCheckFailed) when a check FAILs; WARNs exit 0.
//
// Thread-safety: runs on the main thread only.
#include <fmt/format.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/files.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "diag/doctor.h"
#include "doctor_cluster.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

using json = nlohmann::ordered_json;

class DoctorCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_flag("--json", json_,
                 "Print the report as JSON (schema choir.doctor/1, docs/operations.md)");
    app.add_option("--report", report_dir_,
                   "Also write the JSON report to DIR/choir-doctor-HOST-TIME.json");
    app.add_option("--root", root_,
                   "Read /proc, /sys, /etc and /dev/shm under DIR (tests, containers)");
    app.add_option("--facts", facts_file_,
                   "Judge saved facts (a --json report or facts object) instead of this host");
    app.add_option("--port", ports_, "Also check that this TCP port is free (repeatable)");
    app.add_flag("--cluster", cluster_set_,
                 "Compare every host of the job and measure links (run under `choir run`)");
    app.add_option("--bytes", cluster_bytes_,
                   "--cluster: message size of the bandwidth test (default 4M)");
    app.add_option("--iters", cluster_.iters,
                   "--cluster: timed round trips per host pair (default 5)");
    app.add_option("--host-id", cluster_.host_id,
                   "--cluster: this rank's host id (default CHOIR_HOST_ID or detected)");
  }

  int Run() override {
    if (cluster_flag_()) return RunCluster();
    if (!root_.empty() && !facts_file_.empty())
      return ReportUsageError(*app_, "give --root or --facts, not both");
    if (app_->count("--root") > 0) {
      // A mistyped root would otherwise read as a host where nothing can be read.
      struct stat st {};
      const bool exists = stat(root_.c_str(), &st) == 0;
      const int err = errno;
      if (!exists || !S_ISDIR(st.st_mode)) {
        return ReportUsageError(
            *app_, fmt::format("--root {}: {}; give the directory that holds the proc, sys, etc "
                               "and dev/shm to read",
                               root_, exists ? "not a directory" : std::strerror(err)));
      }
    }
    for (int p : ports_) {
      if (p < 1 || p > 65535)
        return ReportUsageError(*app_, fmt::format("--port {} is outside 1..65535", p));
    }
    json facts;
    if (!facts_file_.empty()) {
      auto text = files::ReadSmallFile(facts_file_, 16 << 20);
      if (!text.ok()) return ReportUsageError(*app_, "--facts: " + text.status().message());
      facts = json::parse(*text, nullptr, /*allow_exceptions=*/false);
      if (facts.is_discarded() || !facts.is_object()) {
        return ReportUsageError(
            *app_,
            "--facts " + facts_file_ +
                " is not a readable JSON object (a `choir doctor --json` report or its \"facts\")");
      }
      if (facts.contains("facts") && facts["facts"].is_object()) facts = json(facts["facts"]);
    } else {
      diag::DoctorRoots roots;
      if (!root_.empty()) {
        roots.proc = root_ + "/proc";
        roots.sys = root_ + "/sys";
        roots.etc = root_ + "/etc";
        roots.shm = root_ + "/dev/shm";
      }
      roots.extra_ports = ports_;
      facts = diag::GatherHostFacts(roots);
    }
    std::vector<diag::CheckResult> checks;
    json report;
    try {
      checks = diag::JudgeHostFacts(facts);
      report = diag::DoctorReport(facts, checks);
    } catch (const json::exception& e) {
      // A --facts file written by hand (or by another version) with a field
      // of the wrong type.
      return ReportUsageError(*app_, "--facts " + facts_file_ + ": a field has the wrong type (" + e.what() +
                                         "); give a `choir doctor --json` report of this version");
    }
    if (json_) {
      fmt::print("{}\n", JsonDump(report, 2));
    } else {
      PrintText(report, checks);
    }
    if (!report_dir_.empty()) {
      const Status written = WriteReport(report);
      if (!written.ok()) return ReportError(written);
    }
    const int failed = report["summary"]["fail"].get<int>();
    if (failed == 0) return kExitOk;
    std::string names;
    for (const diag::CheckResult& c : checks) {
      if (c.verdict == diag::Verdict::kFail) names += (names.empty() ? "" : ", ") + c.id;
    }
    return ReportError(Status(
        Code::kHostCheckFailed,
        fmt::format("{} check{} failed on this host: {}", failed, failed == 1 ? "" : "s", names)));
  }

 private:
  bool cluster_flag_() const { return cluster_set_; }

  int RunCluster() {
    const auto bytes = strings::ParseBytes(cluster_bytes_);
    if (!bytes || *bytes < 8 || *bytes > (1ull << 30))
      return ReportUsageError(*app_, "--bytes must be a size in 8..1G");
    if (cluster_.iters < 1 || cluster_.iters > 1000)
      return ReportUsageError(*app_, "--iters must be in 1..1000");
    if (!report_dir_.empty() || !facts_file_.empty() || !root_.empty()) {
      return ReportUsageError(*app_,
                              "--cluster cannot be combined with --report, --facts or --root");
    }
    cluster_.bytes = *bytes;
    cluster_.json = json_;
    return RunDoctorCluster(cluster_);
  }

  static void PrintText(const json& report, const std::vector<diag::CheckResult>& checks) {
    fmt::print("choir doctor: host {}, {}\n", report["host"].get<std::string>(),
               report["time"].get<std::string>());
    size_t width = 0;
    for (const diag::CheckResult& c : checks) width = std::max(width, c.title.size());
    for (const diag::CheckResult& c : checks) {
      fmt::print("{}  {:<{}}  {}\n", diag::VerdictName(c.verdict), c.title, width, c.summary);
      if (c.verdict == diag::Verdict::kPass) continue;
      fmt::print("      cause: {}\n      fix:   {}\n", c.cause, c.fix);
    }
    fmt::print("summary: {} PASS, {} WARN, {} FAIL\n", report["summary"]["pass"].get<int>(),
               report["summary"]["warn"].get<int>(), report["summary"]["fail"].get<int>());
  }

  Status WriteReport(const json& report) const {
    std::string stamp = report["time"].get<std::string>();
    stamp.erase(std::remove(stamp.begin(), stamp.end(), ':'), stamp.end());
    stamp.erase(std::remove(stamp.begin(), stamp.end(), '-'), stamp.end());
    std::string host = report["host"].get<std::string>();
    for (char& c : host) {
      if (c == '/' || c == ' ') c = '_';
    }
    mkdir(report_dir_.c_str(), 0755);
    const std::string path = report_dir_ + "/choir-doctor-" + host + "-" + stamp + ".json";
    const Status wrote =
        files::ReplaceFile(path, JsonDump(report, 2) + "\n");
    if (!wrote.ok()) {
      return wrote.WithContext("the doctor report (does --report name a writable directory?)");
    }
    fmt::print(stderr, "choir doctor: report written to {}\n", path);
    return Status::Ok();
  }

  CLI::App* app_ = nullptr;
  bool json_ = false;
  std::string report_dir_, root_, facts_file_;
  std::vector<int> ports_;
  bool cluster_set_ = false;
  std::string cluster_bytes_ = "4M";
  ClusterOptions cluster_;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(
    DoctorCommand, "doctor",
    "Check this host (or, with --cluster, every host of a job); explain errors and settings.");

}  // namespace choir::cli
