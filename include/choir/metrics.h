// Metrics of this process's communicators, in the Prometheus text format.
//
// Every communicator keeps always-on counters (operations, bytes, durations,
// algorithms, errors, per-peer traffic, late arrivals); this renders all of
// them with HELP and TYPE lines, ready to serve on /metrics.
//
// Thread-safety: may be called from any thread at any time.
#ifndef CHOIR_METRICS_H_
#define CHOIR_METRICS_H_

#include <string>

namespace choir {

std::string RenderMetrics();

}  // namespace choir

#endif  // CHOIR_METRICS_H_
