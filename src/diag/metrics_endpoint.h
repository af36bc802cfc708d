// The per-process metrics endpoint: http://CHOIR_METRICS_ADDR:PORT/metrics,
// serving RenderPrometheus() (every communicator of this process), plus this
// process's entry in the host registry (diag/registry.h) so that
// `choir exporter` finds it.
//
// Started by the first communicator a process creates, when
// CHOIR_METRICS_PORT is set; it then lives until the process exits (an
// atexit hook stops it and removes the registry file). The endpoint is never
// on a collective's path: it only reads the relaxed counters when scraped.
//
// Thread-safety: EnsureMetricsEndpoint and MetricsEndpointPort may be called
// from any thread; the first successful call wins.
#ifndef CHOIR_DIAG_METRICS_ENDPOINT_H_
#define CHOIR_DIAG_METRICS_ENDPOINT_H_

#include <string>

#include "choir/status.h"

namespace choir::diag {

struct EndpointIdentity {
  std::string job;
  int rank = -1;
  int size = 0;
  std::string host;
};

// Port to bind for the value of CHOIR_METRICS_PORT: -1 = off, 0 = any free
// port ("auto"), else base + local_rank. InvalidSetting for anything else.
Result<int> ParseMetricsPort(const std::string& value, int local_rank);

// Starts the endpoint if the settings ask for it and it is not running yet.
// Returns an error only for an invalid setting; a port that cannot be bound
// is logged as a warning (with its E-number) and metrics stay off, because
// observability must never stop a training job.
Status EnsureMetricsEndpoint(const EndpointIdentity& identity);

// The bound port, or 0 when no endpoint runs in this process.
int MetricsEndpointPort();

}  // namespace choir::diag

#endif  // CHOIR_DIAG_METRICS_ENDPOINT_H_
