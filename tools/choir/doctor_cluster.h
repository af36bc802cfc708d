// `choir doctor --cluster`: compare hosts of a job and measure the links
// between them. Declared here so that doctor_host.cc (which owns the
// `choir doctor` flags) can hand over to it.
//
// Thread-safety: runs on the main thread only.
#ifndef CHOIR_TOOLS_CHOIR_DOCTOR_CLUSTER_H_
#define CHOIR_TOOLS_CHOIR_DOCTOR_CLUSTER_H_

#include <cstdint>
#include <string>

namespace choir::cli {

struct ClusterOptions {
  uint64_t bytes = 4 << 20;  // per bandwidth message
  int iters = 5;             // timed round trips per pair
  double slow_ratio = 0.5;   // a pair below this fraction of the median bandwidth is an outlier
  bool json = false;
  std::string host_id;  // overrides this rank's host id ("" = CHOIR_HOST_ID or detected)
};

// Runs on every rank (one per host) under `choir run`; rank 0 prints. Returns
// the exit code: 0 all equal and no outlier, 1 differences or outliers.
int RunDoctorCluster(const ClusterOptions& options);

}  // namespace choir::cli

#endif  // CHOIR_TOOLS_CHOIR_DOCTOR_CLUSTER_H_
