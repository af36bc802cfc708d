// `choir doctor --cluster`: run under `choir run` with one rank per host.
//
// 1. Every rank gathers its host's fingerprint (choir version and build,
//    every setting, the environment variables that steer training stacks,
//    OS, kernel, the interface choir picks and its MTU); rank 0 collects
//    them (Allgather of lengths + AllgatherV of the JSON) and prints one line
//    per differing key with the hosts on each side, majority first.
// 2. Reachability and bandwidth: each host pair in turn does an 8-byte and a
//    --bytes ping-pong (Send/Recv; median round trip); a pair below half the
//    median bandwidth is measured once more and keeps its better figures;
//    rank 0 prints the matrix and flags the pairs still below half the
//    median. The communicator itself connected every
//    pair, so a pair that cannot reach the other fails creation with an error
//    naming both sides.
//
// Thread-safety: runs on the main thread only.
#include "doctor_cluster.h"

#include <fmt/format.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/json_text.h"
#include "base/strings.h"
#include "choir/choir.h"
#include "diag/doctor.h"
#include "subcommand.h"

extern char** environ;

namespace choir::cli {
namespace {

using json = nlohmann::ordered_json;

// Settings that name this rank or host: they differ by design.
const char* const kIdentitySettings[] = {"RANK", "LOCAL_RANK", "CHOIR_HOST_ID",
                                         "CHOIR_LISTEN_ADDR"};
// Environment variables of the stacks that run on choir (their drift causes silent slowdowns).
const char* const kEnvPrefixes[] = {"NCCL_",  "HCCL_",    "GLOO_", "OMP_",    "MKL_", "KMP_",
                                    "TORCH_", "PYTORCH_", "CUDA_", "ASCEND_", "UCX_"};
const char* const kEnvNames[] = {"LD_LIBRARY_PATH", "LD_PRELOAD", "PYTHONPATH"};

std::string OsName() {
  std::ifstream in("/etc/os-release");
  std::string line;
  while (std::getline(in, line)) {
    if (strings::StartsWith(line, "PRETTY_NAME=")) {
      std::string v = line.substr(12);
      v.erase(std::remove(v.begin(), v.end(), '"'), v.end());
      return v;
    }
  }
  return "?";
}

json Fingerprint(const std::string& host) {
  json f = json::object();
  f["host"] = host;
  f["choir.version"] = kVersionString;
  f["choir.build"] = BuildString();
  f["choir.protocol"] = kProtocolVersion;
  f["choir.kernel_isa"] = KernelIsa();
  utsname u{};
  uname(&u);
  f["system.kernel"] = u.release;
  f["system.os"] = OsName();
  f["system.cpus"] = sysconf(_SC_NPROCESSORS_ONLN);
  const json ifs = diag::GatherInterfaceFacts("/sys");
  std::string name = "?";
  json mtu = nullptr;
  if (ifs.contains("chosen") && ifs["chosen"].is_object()) {
    name = ifs["chosen"].value("name", std::string("?"));
    for (const json& i : ifs["list"]) {
      if (i.value("name", std::string()) == name) mtu = i["mtu"];
    }
  }
  f["net.interface"] = name;
  f["net.mtu"] = mtu.is_null() ? json("?") : json(JsonDump(mtu));
  for (const SettingInfo& s : ListSettings()) {
    if (std::any_of(std::begin(kIdentitySettings), std::end(kIdentitySettings),
                    [&](const char* id) { return s.name == id; })) {
      continue;
    }
    f["setting." + s.name] = s.value;
  }
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string kv = *e;
    const size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    const std::string name_part = kv.substr(0, eq);
    const bool relevant =
        std::any_of(std::begin(kEnvPrefixes), std::end(kEnvPrefixes),
                    [&](const char* p) { return strings::StartsWith(name_part, p); }) ||
        std::any_of(std::begin(kEnvNames), std::end(kEnvNames),
                    [&](const char* n) { return name_part == n; });
    if (relevant) f["env." + name_part] = kv.substr(eq + 1);
  }
  return f;
}

struct Difference {
  std::string key;
  std::vector<std::pair<std::string, std::vector<std::string>>> sides;  // value -> hosts
};

std::vector<Difference> Diff(const std::vector<json>& prints,
                             const std::vector<std::string>& hosts) {
  std::vector<std::string> keys;
  for (const json& p : prints) {
    for (const auto& [k, v] : p.items()) {
      if (k != "host" && std::find(keys.begin(), keys.end(), k) == keys.end()) keys.push_back(k);
    }
  }
  std::sort(keys.begin(), keys.end());
  std::vector<Difference> out;
  for (const std::string& key : keys) {
    std::vector<std::pair<std::string, std::vector<std::string>>> sides;
    for (size_t i = 0; i < prints.size(); ++i) {
      const std::string value =
          prints[i].contains(key) ? (prints[i][key].is_string() ? prints[i][key].get<std::string>()
                                                                : JsonDump(prints[i][key]))
                                  : "<unset>";
      auto it =
          std::find_if(sides.begin(), sides.end(), [&](const auto& s) { return s.first == value; });
      if (it == sides.end()) {
        sides.push_back({value, {hosts[i]}});
      } else {
        it->second.push_back(hosts[i]);
      }
    }
    if (sides.size() < 2) continue;
    std::stable_sort(sides.begin(), sides.end(), [](const auto& a, const auto& b) {
      return a.second.size() > b.second.size();
    });
    out.push_back({key, std::move(sides)});
  }
  return out;
}

std::string Join(const std::vector<std::string>& v) {
  std::string out;
  for (const std::string& s : v) out += (out.empty() ? "" : ",") + s;
  return out;
}

// Ping-pong between `a` and `b`: seconds per round trip of `bytes` each way,
// the median of `iters` timed round trips (a round trip that a busy host
// stalled does not move it; a slow link is slow in every round trip).
Result<double> PingPong(Communicator& comm, int a, int b, std::vector<char>& buf, size_t bytes,
                        int iters, int tag) {
  CallOptions call;
  call.timeout = std::chrono::milliseconds(60000);
  const bool first = comm.rank() == a;
  const int peer = first ? b : a;
  std::vector<double> times;
  for (int i = 0; i <= iters; ++i) {  // iteration 0 warms up
    const int64_t t0 = NowNanos();
    if (first) {
      CHOIR_RETURN_IF_ERROR(comm.Send(buf.data(), bytes, DataType::kUint8, peer, tag, call).Wait());
      CHOIR_RETURN_IF_ERROR(comm.Recv(buf.data(), bytes, DataType::kUint8, peer, tag, call).Wait());
    } else {
      CHOIR_RETURN_IF_ERROR(comm.Recv(buf.data(), bytes, DataType::kUint8, peer, tag, call).Wait());
      CHOIR_RETURN_IF_ERROR(comm.Send(buf.data(), bytes, DataType::kUint8, peer, tag, call).Wait());
    }
    if (i > 0) times.push_back(static_cast<double>(NowNanos() - t0) * 1e-9);
  }
  std::nth_element(times.begin(), times.begin() + static_cast<long>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

// Measures every pair (a < b) whose `which` entry is true, in a fixed order
// on every rank, into latency and bandwidth (entry a*n+b, 0 for the pairs
// not measured), the same on every rank afterwards.
Status MeasurePairs(Communicator& comm, const ClusterOptions& options, const std::vector<std::string>& hosts,
                    const std::vector<bool>& which, int tag, std::vector<double>& latency,
                    std::vector<double>& bandwidth) {
  const int n = comm.size();
  const int rank = comm.rank();
  std::vector<char> buf(options.bytes);
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b, tag += 2) {
      const size_t at = static_cast<size_t>(a * n + b);
      if (!which[at] || (rank != a && rank != b)) continue;
      auto small = PingPong(comm, a, b, buf, 8, 20, tag);
      if (!small.ok()) return small.status().WithContext(fmt::format("latency {} <-> {}", hosts[a], hosts[b]));
      auto big = PingPong(comm, a, b, buf, options.bytes, options.iters, tag + 1);
      if (!big.ok()) return big.status().WithContext(fmt::format("bandwidth {} <-> {}", hosts[a], hosts[b]));
      if (rank == a) {
        latency[at] = *small / 2;
        bandwidth[at] = 2.0 * static_cast<double>(options.bytes) / *big;
      }
    }
  }
  // Each entry was set on one rank only: the sums are exact.
  CHOIR_RETURN_IF_ERROR(comm.Allreduce(latency.data(), latency.data(), latency.size(), DataType::kFloat64,
                                       ReduceOp::kSum).Wait());
  return comm.Allreduce(bandwidth.data(), bandwidth.data(), bandwidth.size(), DataType::kFloat64, ReduceOp::kSum)
      .Wait();
}

}  // namespace

int RunDoctorCluster(const ClusterOptions& options) {
  CommOptions co;
  co.name = "doctor-cluster";
  co.host_id = options.host_id;
  auto created = Communicator::FromEnvironment(co);
  if (!created.ok()) {
    return ReportError(
        created.status().WithContext("choir doctor --cluster runs one rank per host under `choir "
                                     "run` (e.g. choir run --nnodes N "
                                     "--nproc-per-node 1 ... choir doctor --cluster)"));
  }
  Communicator& comm = **created;
  const int n = comm.size();
  const int rank = comm.rank();

  // 1. Fingerprints.
  std::string host = options.host_id;
  if (host.empty()) host = FindSetting("CHOIR_HOST_ID").value_or(SettingInfo{}).value;
  if (host.empty()) {
    char name[256] = {0};
    gethostname(name, sizeof(name) - 1);
    host = name;
  }
  const std::string mine = JsonDump(Fingerprint(host));
  int64_t my_length = static_cast<int64_t>(mine.size());
  std::vector<int64_t> lengths(static_cast<size_t>(n));
  Status s = comm.Allgather(&my_length, lengths.data(), 1, DataType::kInt64).Wait();
  if (!s.ok()) return ReportError(s.WithContext("gathering fingerprint sizes"));
  std::vector<size_t> counts;
  for (int64_t l : lengths) counts.push_back(static_cast<size_t>(l));
  std::string all(std::accumulate(counts.begin(), counts.end(), size_t{0}), '\0');
  s = comm.AllgatherV(mine.data(), mine.size(), all.data(), counts, DataType::kUint8).Wait();
  if (!s.ok()) return ReportError(s.WithContext("gathering fingerprints"));
  std::vector<json> prints;
  std::vector<std::string> hosts;
  size_t offset = 0;
  for (int r = 0; r < n; ++r) {
    json p = json::parse(all.substr(offset, counts[static_cast<size_t>(r)]), nullptr, false);
    offset += counts[static_cast<size_t>(r)];
    if (p.is_discarded()) p = json{{"host", "rank" + std::to_string(r)}};
    hosts.push_back(p.value("host", "rank" + std::to_string(r)));
    prints.push_back(std::move(p));
  }
  // Several ranks on one host id: keep the labels apart (counted before any
  // label changes, so that every rank of the host gets its suffix).
  std::map<std::string, int> ranks_of_host;
  for (const std::string& h : hosts) ++ranks_of_host[h];
  for (int r = 0; r < n; ++r) {
    std::string& label = hosts[static_cast<size_t>(r)];
    if (ranks_of_host[label] > 1) label += "#" + std::to_string(r);
  }

  // 2. Latency and bandwidth per pair, in a fixed order on every rank. A
  // pair below slow_ratio x the median is measured once more and keeps its
  // better figures: a link is flagged only when it is slow twice.
  const size_t cells = static_cast<size_t>(n * n);
  std::vector<double> latency(cells, 0), bandwidth(cells, 0);
  std::vector<bool> pairs(cells, true);
  s = MeasurePairs(comm, options, hosts, pairs, 1000, latency, bandwidth);
  if (!s.ok()) return ReportError(s.WithContext("measuring the links"));
  auto median_of = [&] {
    std::vector<double> v;
    for (int a = 0; a < n; ++a) {
      for (int b = a + 1; b < n; ++b) v.push_back(bandwidth[static_cast<size_t>(a * n + b)]);
    }
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
  };
  double median = median_of();
  bool again = false;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) {
      const size_t at = static_cast<size_t>(a * n + b);
      pairs[at] = bandwidth[at] < options.slow_ratio * median;
      again = again || pairs[at];
    }
  }
  if (again) {  // the same decision on every rank: every rank holds the same matrix
    std::vector<double> latency2(cells, 0), bandwidth2(cells, 0);
    s = MeasurePairs(comm, options, hosts, pairs, 1000 + 2 * n * n, latency2, bandwidth2);
    if (!s.ok()) return ReportError(s.WithContext("measuring the slow links again"));
    for (size_t at = 0; at < cells; ++at) {
      if (!pairs[at] || bandwidth2[at] <= bandwidth[at]) continue;
      bandwidth[at] = bandwidth2[at];
      latency[at] = latency2[at];
    }
    median = median_of();
  }
  std::vector<double> all_bw;
  for (int a = 0; a < n; ++a) {
    for (int b = a + 1; b < n; ++b) all_bw.push_back(bandwidth[static_cast<size_t>(a * n + b)]);
  }
  const std::vector<Difference> diffs = Diff(prints, hosts);
  int outliers = 0;
  for (double bw : all_bw) outliers += bw < options.slow_ratio * median ? 1 : 0;

  if (rank == 0) {
    if (options.json) {
      json out;
      out["schema"] = "choir.doctor.cluster/1";
      out["hosts"] = prints;
      json d = json::array();
      for (const Difference& diff : diffs) {
        json sides = json::array();
        for (const auto& [value, on] : diff.sides)
          sides.push_back({{"value", value}, {"hosts", on}});
        d.push_back({{"key", diff.key}, {"sides", sides}});
      }
      out["differences"] = d;
      json links = json::array();
      for (int a = 0; a < n; ++a) {
        for (int b = a + 1; b < n; ++b) {
          const double bw = bandwidth[static_cast<size_t>(a * n + b)];
          links.push_back({{"a", hosts[a]},
                           {"b", hosts[b]},
                           {"latency_seconds", latency[static_cast<size_t>(a * n + b)]},
                           {"bandwidth_bytes_per_second", bw},
                           {"status", bw < options.slow_ratio * median ? "SLOW" : "ok"}});
        }
      }
      out["links"] = links;
      out["median_bandwidth_bytes_per_second"] = median;
      fmt::print("{}\n", JsonDump(out, 2));
    } else {
      fmt::print("choir doctor --cluster: {} hosts: {}\n", n, Join(hosts));
      if (diffs.empty()) {
        fmt::print("fingerprints: all {} keys equal on every host\n",
                   prints.empty() ? 0 : prints[0].size() - 1);
      } else {
        fmt::print("fingerprints: {} key{} differ{}\n", diffs.size(), diffs.size() == 1 ? "" : "s",
                   diffs.size() == 1 ? "s" : "");
        for (const Difference& diff : diffs) {
          std::string line = "DIFF " + diff.key + ":";
          for (size_t i = 0; i < diff.sides.size(); ++i) {
            line += fmt::format("{} '{}' on {}", i == 0 ? "" : " |", diff.sides[i].first,
                                Join(diff.sides[i].second));
          }
          fmt::print("{}\n", line);
        }
      }
      if (n > 1) {
        fmt::print("links (ping-pong; latency one way, bandwidth both ways, {} messages):\n",
                   strings::FormatBytes(options.bytes));
        for (int a = 0; a < n; ++a) {
          for (int b = a + 1; b < n; ++b) {
            const double bw = bandwidth[static_cast<size_t>(a * n + b)];
            fmt::print("  {} <-> {}: reachable, latency {:.1f} us, bandwidth {:.3f} GB/s{}\n",
                       hosts[a], hosts[b], latency[static_cast<size_t>(a * n + b)] * 1e6, bw / 1e9,
                       bw < options.slow_ratio * median
                           ? fmt::format("  SLOW (< {:.0f}% of the median {:.3f} GB/s)",
                                         options.slow_ratio * 100, median / 1e9)
                           : "");
          }
        }
      }
    }
    std::fflush(stdout);
  }
  // Keep the other ranks alive until rank 0 has printed: the launcher stops
  // every rank once one exits with a failure.
  comm.Barrier().Wait().IgnoreError();
  if (diffs.empty() && outliers == 0) return kExitOk;
  if (rank != 0) return kExitFailure;
  return ReportError(
      Status(Code::kClusterMismatch,
             fmt::format("{} fingerprint key{} differ between hosts, {} link{} {} slower than half "
                         "the median; see the DIFF and SLOW lines above",
                         diffs.size(), diffs.size() == 1 ? "" : "s", outliers,
                         outliers == 1 ? "" : "s", outliers == 1 ? "is" : "are")));
}

}  // namespace choir::cli
