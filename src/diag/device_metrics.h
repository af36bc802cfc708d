// Accelerator metrics for `choir exporter`, from vendor libraries loaded at
// run time: NVIDIA NVML (libnvidia-ml.so.1) and Huawei Ascend DCMI
// (libdcmi.so). choir never links them: on a host without them the collector
// says so once and reports only choir_exporter_device_library{...} 0.
//
// Reported per device when a library is present: utilisation (ratio 0..1),
// memory used and total (NVML) or memory utilisation (DCMI), temperature and
// power. Written against the vendors' published C APIs; neither library
// exists on choir's test machines, so only the "absent" path is tested (see
// docs/operations.md).
//
// Thread-safety: Collect() may be called from several threads; calls into a
// vendor library are serialized by a mutex.
#ifndef CHOIR_DIAG_DEVICE_METRICS_H_
#define CHOIR_DIAG_DEVICE_METRICS_H_

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "diag/prom_text.h"

namespace choir::diag {

struct DeviceLibraryNames {
  std::vector<std::string> nvml = {"libnvidia-ml.so.1", "libnvidia-ml.so"};
  std::vector<std::string> dcmi = {"libdcmi.so"};
};

class DeviceCollector {
 public:
  explicit DeviceCollector(DeviceLibraryNames names = {});
  ~DeviceCollector();
  DeviceCollector(const DeviceCollector&) = delete;
  DeviceCollector& operator=(const DeviceCollector&) = delete;

  bool nvml_loaded() const;
  bool dcmi_loaded() const;
  // One line per library: "nvml: not found (libnvidia-ml.so.1: cannot open ...)".
  std::vector<std::string> Describe() const;

  std::vector<MetricFamily> Collect();

 private:
  struct Nvml;
  struct Dcmi;
  std::mutex mu_;
  std::unique_ptr<Nvml> nvml_;
  std::unique_ptr<Dcmi> dcmi_;
  std::vector<std::string> description_;
};

}  // namespace choir::diag

#endif  // CHOIR_DIAG_DEVICE_METRICS_H_
