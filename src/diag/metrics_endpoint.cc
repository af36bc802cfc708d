#include "diag/metrics_endpoint.h"

#include <unistd.h>

#include <cstdlib>
#include <memory>
#include <mutex>

#include "base/logging.h"
#include "base/strings.h"
#include "choir/version.h"
#include "diag/http.h"
#include "diag/metrics.h"
#include "diag/registry.h"
#include "params/params.h"

namespace choir::diag {
namespace {

// Prometheus' text exposition format, version 0.0.4.
constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

struct Endpoint {
  std::unique_ptr<HttpServer> server;
  std::string registry_file;
};

std::mutex g_endpoint_mu;
Endpoint* g_endpoint = nullptr;  // leaked on purpose: stopped by StopAtExit, never destroyed

void StopAtExit() {
  std::lock_guard<std::mutex> lock(g_endpoint_mu);
  if (g_endpoint == nullptr) return;
  if (!g_endpoint->registry_file.empty()) unlink(g_endpoint->registry_file.c_str());
  g_endpoint->server.reset();
}

}  // namespace

Result<int> ParseMetricsPort(const std::string& value, int local_rank) {
  const std::string v = strings::ToLower(strings::Trim(value));
  if (v.empty() || v == "0" || v == "off") return -1;
  if (v == "auto") return 0;
  const auto base = strings::ParseInt(v);
  const int64_t port = base ? *base + std::max(0, local_rank) : -1;
  if (!base || *base < 1 || port > 65535) {
    return Status(Code::kInvalidSetting,
                  "CHOIR_METRICS_PORT='" + value +
                      "' is not a port: use empty/0 (off), 'auto' (any free port) or a port N in "
                      "1..65535 (each rank binds N + LOCAL_RANK)");
  }
  return static_cast<int>(port);
}

Status EnsureMetricsEndpoint(const EndpointIdentity& identity) {
  std::lock_guard<std::mutex> lock(g_endpoint_mu);
  if (g_endpoint != nullptr) return Status::Ok();
  const int local_rank = static_cast<int>(params::GetInt(params::Id::kLocalRank));
  CHOIR_ASSIGN_OR_RETURN(int port,
                         ParseMetricsPort(params::GetString(params::Id::kMetricsPort), local_rank));
  if (port < 0) return Status::Ok();
  const std::string addr = params::GetString(params::Id::kMetricsAddr);
  std::vector<HttpRoute> routes;
  routes.push_back({"/metrics", [] {
                      HttpReply reply;
                      reply.content_type = kPrometheusContentType;
                      reply.body = RenderPrometheus();
                      return reply;
                    }});
  auto server = HttpServer::Start(addr, port, std::move(routes), /*threads=*/1);
  if (!server.ok()) {
    CHOIR_LOG(Warn, DIAG,
              "metrics endpoint off: {} (CHOIR_METRICS_PORT={}); the job runs on without it",
              server.status().ToString(), params::GetString(params::Id::kMetricsPort));
    return Status::Ok();
  }
  auto endpoint = std::make_unique<Endpoint>();
  endpoint->server = std::move(*server);
  const std::string dir = params::GetString(params::Id::kMetricsRegistry);
  if (!dir.empty()) {
    RegistryEntry entry;
    entry.pid = static_cast<int>(getpid());
    entry.start_time = ProcessStartTime(entry.pid);
    entry.job = identity.job;
    entry.rank = identity.rank;
    entry.size = identity.size;
    entry.local_rank = local_rank;
    entry.host = identity.host;
    entry.address = addr;
    entry.port = endpoint->server->port();
    entry.version = kVersionString;
    auto file = WriteRegistryEntry(dir, entry);
    if (file.ok()) {
      endpoint->registry_file = *file;
    } else {
      CHOIR_LOG(Warn, DIAG, "metrics endpoint not registered for `choir exporter`: {}",
                file.status().ToString());
    }
  }
  CHOIR_LOG(
      Info, DIAG, "metrics on http://{}:{}/metrics{}", addr, endpoint->server->port(),
      endpoint->registry_file.empty() ? "" : " (registered in " + endpoint->registry_file + ")");
  g_endpoint = endpoint.release();
  std::atexit(StopAtExit);
  return Status::Ok();
}

int MetricsEndpointPort() {
  std::lock_guard<std::mutex> lock(g_endpoint_mu);
  return g_endpoint != nullptr && g_endpoint->server != nullptr ? g_endpoint->server->port() : 0;
}

}  // namespace choir::diag
