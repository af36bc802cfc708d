#include "diag/exporter.h"

#include <future>
#include <set>

#include "base/logging.h"
#include "choir/version.h"
#include "diag/http.h"
#include "diag/prom_text.h"
#include "diag/registry.h"
#include "transport/tcp/interfaces.h"

namespace choir::diag {
namespace {

struct TargetResult {
  RegistryEntry entry;
  bool ok = false;
  std::string error;
  std::vector<MetricFamily> families;
};

// The address to fetch a registered endpoint from, or "" when it is not local.
std::string LocalFetchAddress(const std::string& address, const std::set<std::string>& local) {
  if (address == "0.0.0.0" || address.empty()) return "127.0.0.1";
  if (address.rfind("127.", 0) == 0 || address == "localhost") return address;
  return local.count(address) != 0 ? address : "";
}

TargetResult Scrape(RegistryEntry entry, const std::string& host, double timeout) {
  TargetResult r;
  r.entry = std::move(entry);
  if (host.empty()) {
    r.error = "address " + r.entry.address + " is not an address of this host";
    return r;
  }
  auto response = HttpGet(host, r.entry.port, "/metrics", timeout);
  if (!response.ok()) {
    r.error = response.status().ToString();
    return r;
  }
  if (response->status != 200) {
    r.error = "HTTP status " + std::to_string(response->status);
    return r;
  }
  auto families = ParsePrometheusText(response->body);
  if (!families.ok()) {
    r.error = "unreadable metrics: " + families.status().message();
    return r;
  }
  r.families = std::move(*families);
  r.ok = true;
  return r;
}

MetricFamily Family(const char* name, const char* type, const char* help) {
  return MetricFamily{name, type, help, {}};
}

}  // namespace

Exporter::Exporter(ExporterOptions options)
    : options_(std::move(options)), host_(options_.host), devices_(options_.devices) {}

std::string Exporter::Render() {
  FamilySet set;
  set.AddAll(host_.Collect());
  set.AddAll(devices_.Collect());

  const RegistryScan scan = ScanRegistry(options_.registry_dir, options_.host.proc);
  std::set<std::string> local;
  for (const transport::Interface& i : transport::ListInterfaces()) local.insert(i.address);
  std::vector<std::future<TargetResult>> pending;
  for (const RegistryEntry& e : scan.alive) {
    pending.push_back(std::async(std::launch::async, Scrape, e, LocalFetchAddress(e.address, local),
                                 options_.target_timeout_seconds));
  }
  MetricFamily up = Family("choir_exporter_target_up", "gauge",
                           "1 when the registered choir process answered this scrape, 0 when it "
                           "did not (died, hung or sent a broken document).");
  for (auto& f : pending) {
    TargetResult r = f.get();
    up.samples.push_back(FormatSample(up.name,
                                      {{"job", r.entry.job},
                                       {"rank", std::to_string(r.entry.rank)},
                                       {"pid", std::to_string(r.entry.pid)}},
                                      r.ok ? 1 : 0));
    if (!r.ok) {
      scrape_errors_.fetch_add(1, std::memory_order_relaxed);
      CHOIR_LOG(Warn, DIAG, "exporter: target job={} rank={} pid={} at {}:{} skipped: {}",
                r.entry.job, r.entry.rank, r.entry.pid, r.entry.address, r.entry.port, r.error);
      continue;
    }
    for (MetricFamily& fam : r.families) {
      const std::string name = fam.name;
      if (!set.Add(std::move(fam))) {
        CHOIR_LOG(Warn, DIAG, "exporter: family {} of pid {} has a conflicting type; dropped", name,
                  r.entry.pid);
      }
    }
  }
  MetricFamily build =
      Family("choir_exporter_build_info", "gauge", "choir exporter version (value 1).");
  build.samples.push_back(
      FormatSample(build.name, {{"version", kVersionString}, {"build", BuildString()}}, 1));
  MetricFamily targets = Family(
      "choir_exporter_targets", "gauge",
      "Registry entries by state: alive (scraped), stale (process gone), unreadable (bad file).");
  targets.samples.push_back(
      FormatSample(targets.name, {{"state", "alive"}}, static_cast<double>(scan.alive.size())));
  targets.samples.push_back(
      FormatSample(targets.name, {{"state", "stale"}}, static_cast<double>(scan.stale.size())));
  targets.samples.push_back(FormatSample(targets.name, {{"state", "unreadable"}},
                                         static_cast<double>(scan.unreadable.size())));
  MetricFamily errors =
      Family("choir_exporter_target_scrape_errors_total", "counter",
             "Registered processes that could not be scraped, since the exporter started.");
  errors.samples.push_back(
      FormatSample(errors.name, {}, static_cast<double>(scrape_errors_.load())));
  MetricFamily problems =
      Family("choir_exporter_host_sources_skipped", "gauge",
             "Host metric sources that could not be read (see the exporter's log).");
  problems.samples.push_back(
      FormatSample(problems.name, {}, static_cast<double>(host_.Problems().size())));
  set.Add(std::move(build));
  set.Add(std::move(up));
  set.Add(std::move(targets));
  set.Add(std::move(errors));
  set.Add(std::move(problems));
  return set.Render();
}

}  // namespace choir::diag
