// Host metrics for `choir exporter`, read from /proc and /sys: CPU time per
// core, memory, /dev/shm, NUMA nodes, temperatures (thermal zones and
// hwmon), NIC byte and error counters, MTU and link state.
//
// Every read can fail (a container without /sys/class/hwmon, a file that
// vanishes, a permission error): the metric is skipped, the source is logged
// once (DIAG, warn) and listed by Problems(), and collection goes on. The
// roots are settable so tests can point them at a fake tree.
//
// Thread-safety: Collect() may be called from several threads at once (the
// "logged once" set is guarded by a mutex).
#ifndef CHOIR_DIAG_HOST_METRICS_H_
#define CHOIR_DIAG_HOST_METRICS_H_

#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "diag/prom_text.h"

namespace choir::diag {

struct HostPaths {
  std::string proc = "/proc";
  std::string sys = "/sys";
  std::string shm = "/dev/shm";
};

class HostCollector {
 public:
  explicit HostCollector(HostPaths paths);

  // Appends one family per host metric; a family whose source is unreadable
  // has no samples (and its source is reported once).
  std::vector<MetricFamily> Collect();

  // Sources skipped so far ("/sys/class/hwmon: No such file or directory").
  std::vector<std::string> Problems() const;

 private:
  void Skip(const std::string& source, const std::string& why);
  void CollectCpu(MetricFamily* cpu);
  void CollectMemory(MetricFamily* total, MetricFamily* available, MetricFamily* free);
  void CollectShm(MetricFamily* size, MetricFamily* free);
  void CollectNuma(MetricFamily* nodes, MetricFamily* total, MetricFamily* free);
  void CollectTemperatures(MetricFamily* temperature);
  void CollectNetwork(std::vector<MetricFamily>* out);

  const HostPaths paths_;
  mutable std::mutex mu_;
  std::set<std::string> problems_;
};

}  // namespace choir::diag

#endif  // CHOIR_DIAG_HOST_METRICS_H_
