// `choir exporter`: the per-host Prometheus exporter (like node_exporter or
// npu-exporter).
//
//   choir exporter [--listen 127.0.0.1:9478] [--registry DIR] [--once]
//                  [--proc-root /proc] [--sys-root /sys] [--shm-path /dev/shm]
//                  [--target-timeout 2]
//
// Serves /metrics with this host's metrics (CPU per core, memory, /dev/shm,
// NUMA, temperatures, NICs), device metrics where NVML or DCMI is present,
// and the metrics of every choir process registered on the host (ranks
// started with CHOIR_METRICS_PORT set). --once prints one scrape to stdout
// and exits (for promtool and cron). Runs until SIGINT or SIGTERM.
//
// Thread-safety: the main thread waits for a signal; HTTP worker threads
// render scrapes (diag::Exporter is thread-safe).
#include "diag/exporter.h"

#include <fmt/format.h>
#include <signal.h>

#include <cstdio>
#include <string>

#include "base/socket.h"
#include "diag/http.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

constexpr const char* kDefaultListen = "127.0.0.1:9478";

class ExporterCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_option(
        "--listen", listen_,
        fmt::format("host:port to serve /metrics on (default {}; port 0 = any)", kDefaultListen));
    app.add_option("--registry", registry_,
                   "Directory where choir processes register (default: CHOIR_METRICS_REGISTRY)");
    app.add_flag("--once", once_, "Print one scrape to stdout and exit");
    app.add_option("--proc-root", paths_.proc,
                   "Where /proc is (default /proc; for containers and tests)");
    app.add_option("--sys-root", paths_.sys, "Where /sys is (default /sys)");
    app.add_option("--shm-path", paths_.shm,
                   "The shared-memory file system to report (default /dev/shm)");
    app.add_option("--target-timeout", target_timeout_,
                   "Seconds to wait for each choir process (default 2)");
    app.footer(
        "Ranks register when started with CHOIR_METRICS_PORT=auto (or a base port). "
        "Scrape this exporter with honor_labels: true so that the job label of choir's "
        "metrics is kept (deploy/prometheus/prometheus.yml).");
  }

  int Run() override {
    if (!(target_timeout_ > 0 && target_timeout_ <= 60)) {  // NaN too
      return ReportUsageError(*app_, "--target-timeout must be in (0, 60] seconds");
    }
    std::string host;
    int port = 0;
    if (!net::SplitHostPort(listen_, &host, &port).ok() || port < 0 || port > 65535) {
      return ReportUsageError(*app_, "--listen '" + listen_ + "' is not host:port");
    }
    diag::ExporterOptions options;
    options.registry_dir = registry_.empty()
                               ? FindSetting("CHOIR_METRICS_REGISTRY").value_or(SettingInfo{}).value
                               : registry_;
    options.host = paths_;
    options.target_timeout_seconds = target_timeout_;
    diag::Exporter exporter(options);
    for (const std::string& line : exporter.devices().Describe()) {
      if (line.find("loaded") == std::string::npos)
        fmt::print(stderr, "choir exporter: {}; device metrics from it are off\n", line);
    }
    if (once_) {
      fmt::print("{}", exporter.Render());
      return kExitOk;
    }
    // Block the stop signals before any thread starts, so that only sigwait sees them.
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, nullptr);
    std::vector<diag::HttpRoute> routes;
    routes.push_back({"/metrics", [&exporter] {
                        diag::HttpReply reply;
                        reply.content_type = "text/plain; version=0.0.4; charset=utf-8";
                        reply.body = exporter.Render();
                        return reply;
                      }});
    routes.push_back({"/", [] {
                        diag::HttpReply reply;
                        reply.content_type = "text/html; charset=utf-8";
                        reply.body =
                            "<html><body><h1>choir exporter</h1><a "
                            "href=\"/metrics\">/metrics</a></body></html>\n";
                        return reply;
                      }});
    auto server = diag::HttpServer::Start(host, port, std::move(routes), /*threads=*/4);
    if (!server.ok())
      return ReportError(server.status().WithContext("choir exporter --listen " + listen_));
    fmt::print("choir exporter: serving http://{}:{}/metrics (registry {})\n", host,
               (*server)->port(), options.registry_dir.empty() ? "off" : options.registry_dir);
    std::fflush(stdout);
    int signal_number = 0;
    sigwait(&stop, &signal_number);
    fmt::print("choir exporter: stopping on signal {}\n", signal_number);
    return kExitOk;
  }

 private:
  CLI::App* app_ = nullptr;
  std::string listen_ = kDefaultListen;
  std::string registry_;
  bool once_ = false;
  diag::HostPaths paths_;
  double target_timeout_ = 2;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(
    ExporterCommand, "exporter",
    "Serve host, device and choir-process metrics for Prometheus on /metrics");

}  // namespace choir::cli
