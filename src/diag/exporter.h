// One scrape of `choir exporter`: host metrics, device metrics, and the
// metrics of every live choir process registered on this host, merged into a
// single valid Prometheus document.
//
// Targets are fetched in parallel, each bounded by a timeout. A target that
// does not answer, answers with an error, or dies mid-scrape (a cut-off
// document) contributes nothing but choir_exporter_target_up 0 with its job,
// rank and pid; the rest of the scrape is unaffected. Registered endpoints
// are only fetched on loopback or on this host's own addresses, so a forged
// registry file cannot make the exporter fetch from elsewhere.
//
// Thread-safety: Render() may be called from several threads at once.
#ifndef CHOIR_DIAG_EXPORTER_H_
#define CHOIR_DIAG_EXPORTER_H_

#include <atomic>
#include <string>

#include "diag/device_metrics.h"
#include "diag/host_metrics.h"

namespace choir::diag {

struct ExporterOptions {
  std::string registry_dir;  // CHOIR_METRICS_REGISTRY
  HostPaths host;
  double target_timeout_seconds = 2;
  DeviceLibraryNames devices;
};

class Exporter {
 public:
  explicit Exporter(ExporterOptions options);

  std::string Render();

  const DeviceCollector& devices() const { return devices_; }
  const HostCollector& host() const { return host_; }

 private:
  const ExporterOptions options_;
  HostCollector host_;
  DeviceCollector devices_;
  std::atomic<uint64_t> scrape_errors_{0};
};

}  // namespace choir::diag

#endif  // CHOIR_DIAG_EXPORTER_H_
