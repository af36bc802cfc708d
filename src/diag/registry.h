// The host registry: how `choir exporter` and `choir probe` find the metrics
// endpoints of the choir processes on this host.
//
// Every process that serves metrics writes one small JSON file,
// <CHOIR_METRICS_REGISTRY>/<pid>.json, and removes it at exit. A process that
// is killed cannot remove its file, so readers check that the pid is alive
// and is still the same process (its start time in /proc/<pid>/stat) and
// ignore the entry otherwise. Files are never deleted by readers: an exporter
// in another pid namespace could not tell a live entry from a stale one.
//
// File format (schema "choir.registry/1"):
//   {"schema":"choir.registry/1","pid":1234,"start_time":5678,"job":"j1",
//    "rank":0,"size":4,"local_rank":0,"host":"node7/1a2b3c4d",
//    "address":"127.0.0.1","port":40123,"version":"0.1.0"}
//
// Thread-safety: free functions without shared state.
#ifndef CHOIR_DIAG_REGISTRY_H_
#define CHOIR_DIAG_REGISTRY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "choir/status.h"

namespace choir::diag {

inline constexpr const char* kRegistrySchema = "choir.registry/1";

struct RegistryEntry {
  int pid = 0;
  uint64_t start_time = 0;  // /proc/<pid>/stat field 22 (clock ticks since boot); 0 = unknown
  std::string job;
  int rank = -1;
  int size = 0;
  int local_rank = -1;
  std::string host;
  std::string address;  // what the endpoint is bound to
  int port = 0;
  std::string version;
  std::string file;  // where it was read from (not serialized)
};

std::string RegistryEntryToJson(const RegistryEntry& entry);
// StoreProtocol-free parse: InvalidArgument naming the problem for a malformed file.
Result<RegistryEntry> ParseRegistryEntry(const std::string& text);

// Writes <dir>/<pid>.json atomically (temporary file + rename), creating `dir`
// (mode 1777, like /tmp, so that every user's jobs can register). Returns the path.
Result<std::string> WriteRegistryEntry(const std::string& dir, const RegistryEntry& entry);

// Start time of `pid` from <proc_root>/<pid>/stat; 0 when unreadable.
uint64_t ProcessStartTime(int pid, const std::string& proc_root = "/proc");
// True when `entry.pid` runs and (when both are known) has the recorded start time.
bool RegistryEntryAlive(const RegistryEntry& entry, const std::string& proc_root = "/proc");

struct RegistryScan {
  std::vector<RegistryEntry> alive;     // sorted by (job, rank, pid)
  std::vector<RegistryEntry> stale;     // pid gone or reused
  std::vector<std::string> unreadable;  // "file: reason"
};
// Reads every *.json in `dir`. A missing directory is an empty scan, not an error.
RegistryScan ScanRegistry(const std::string& dir, const std::string& proc_root = "/proc");

}  // namespace choir::diag

#endif  // CHOIR_DIAG_REGISTRY_H_
