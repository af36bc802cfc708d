#include "diag/host_metrics.h"

#include <dirent.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/logging.h"
#include "base/strings.h"

namespace choir::diag {
namespace {

// Whole file, or false when it cannot be read.
bool ReadFile(const std::string& path, std::string* out) {
  std::ifstream in(path);
  if (!in) return false;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return false;
  *out = ss.str();
  return true;
}

bool ReadNumber(const std::string& path, double* value) {
  std::string text;
  if (!ReadFile(path, &text)) return false;
  const auto v = strings::ParseDouble(strings::Trim(text));
  if (!v) return false;
  *value = *v;
  return true;
}

// Entries of `dir` whose names start with `prefix`, sorted; false when unreadable.
bool ListDir(const std::string& dir, const std::string& prefix, std::vector<std::string>* names) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return false;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name == "." || name == "..") continue;
    if (strings::StartsWith(name, prefix)) names->push_back(name);
  }
  closedir(d);
  std::sort(names->begin(), names->end());
  return true;
}

MetricFamily Family(const char* name, const char* type, const char* help) {
  return MetricFamily{name, type, help, {}};
}

}  // namespace

HostCollector::HostCollector(HostPaths paths) : paths_(std::move(paths)) {}

void HostCollector::Skip(const std::string& source, const std::string& why) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string problem = source + ": " + why;
  if (problems_.insert(problem).second) {
    CHOIR_LOG(Warn, DIAG, "host metrics: skipping {} (reported once)", problem);
  }
}

std::vector<std::string> HostCollector::Problems() const {
  std::lock_guard<std::mutex> lock(mu_);
  return {problems_.begin(), problems_.end()};
}

void HostCollector::CollectCpu(MetricFamily* cpu) {
  const std::string path = paths_.proc + "/stat";
  std::string text;
  if (!ReadFile(path, &text)) return Skip(path, std::strerror(errno));
  static const char* kModes[] = {"user",   "nice", "system",  "idle",
                                 "iowait", "irq",  "softirq", "steal"};
  const double tick = static_cast<double>(std::max(1L, sysconf(_SC_CLK_TCK)));
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    // Per-core lines only ("cpu0 ..."); the aggregate "cpu " line is their sum.
    if (line.size() < 4 || line.compare(0, 3, "cpu") != 0 || line[3] == ' ') continue;
    std::istringstream fields(line);
    std::string name;
    fields >> name;
    const std::string core = name.substr(3);
    for (const char* mode : kModes) {
      double ticks = 0;
      if (!(fields >> ticks)) break;
      cpu->samples.push_back(
          FormatSample(cpu->name, {{"cpu", core}, {"mode", mode}}, ticks / tick));
    }
  }
}

void HostCollector::CollectMemory(MetricFamily* total, MetricFamily* available,
                                  MetricFamily* free) {
  const std::string path = paths_.proc + "/meminfo";
  std::string text;
  if (!ReadFile(path, &text)) return Skip(path, std::strerror(errno));
  if (const auto v = strings::MeminfoBytes(text, "MemTotal")) total->samples.push_back(FormatSample(total->name, {}, *v));
  if (const auto v = strings::MeminfoBytes(text, "MemAvailable")) {
    available->samples.push_back(FormatSample(available->name, {}, *v));
  }
  if (const auto v = strings::MeminfoBytes(text, "MemFree")) free->samples.push_back(FormatSample(free->name, {}, *v));
}

void HostCollector::CollectShm(MetricFamily* size, MetricFamily* free) {
  struct statvfs st {};
  if (statvfs(paths_.shm.c_str(), &st) != 0) return Skip(paths_.shm, std::strerror(errno));
  const double frsize = static_cast<double>(st.f_frsize);
  size->samples.push_back(FormatSample(size->name, {}, static_cast<double>(st.f_blocks) * frsize));
  free->samples.push_back(FormatSample(free->name, {}, static_cast<double>(st.f_bavail) * frsize));
}

void HostCollector::CollectNuma(MetricFamily* nodes, MetricFamily* total, MetricFamily* free) {
  const std::string dir = paths_.sys + "/devices/system/node";
  std::vector<std::string> names;
  if (!ListDir(dir, "node", &names)) return Skip(dir, std::strerror(errno));
  int count = 0;
  for (const std::string& name : names) {
    if (name.size() < 5 || !strings::ParseInt(name.substr(4))) continue;  // "node0", not "possible"
    ++count;
    const std::string path = dir + "/" + name + "/meminfo";
    std::string text;
    if (!ReadFile(path, &text)) {
      Skip(path, std::strerror(errno));
      continue;
    }
    const std::string node = name.substr(4);
    if (const auto v = strings::MeminfoBytes(text, "MemTotal")) {
      total->samples.push_back(FormatSample(total->name, {{"node", node}}, *v));
    }
    if (const auto v = strings::MeminfoBytes(text, "MemFree")) {
      free->samples.push_back(FormatSample(free->name, {{"node", node}}, *v));
    }
  }
  nodes->samples.push_back(FormatSample(nodes->name, {}, count));
}

void HostCollector::CollectTemperatures(MetricFamily* temperature) {
  const std::string thermal = paths_.sys + "/class/thermal";
  std::vector<std::string> zones;
  if (ListDir(thermal, "thermal_zone", &zones)) {
    for (const std::string& zone : zones) {
      double milli = 0;
      const std::string path = thermal + "/" + zone + "/temp";
      if (!ReadNumber(path, &milli)) {
        Skip(path, "unreadable");
        continue;
      }
      std::string type;
      ReadFile(thermal + "/" + zone + "/type", &type);
      temperature->samples.push_back(FormatSample(
          temperature->name, {{"sensor", zone}, {"type", std::string(strings::Trim(type))}},
          milli / 1000));
    }
  } else {
    Skip(thermal, std::strerror(errno));
  }
  const std::string hwmon = paths_.sys + "/class/hwmon";
  std::vector<std::string> chips;
  if (!ListDir(hwmon, "hwmon", &chips)) return Skip(hwmon, std::strerror(errno));
  for (const std::string& chip : chips) {
    std::string chip_name;
    ReadFile(hwmon + "/" + chip + "/name", &chip_name);
    std::vector<std::string> inputs;
    ListDir(hwmon + "/" + chip, "temp", &inputs);
    for (const std::string& input : inputs) {
      if (input.size() < 7 || input.compare(input.size() - 6, 6, "_input") != 0) continue;
      double milli = 0;
      const std::string path = hwmon + "/" + chip + "/" + input;
      if (!ReadNumber(path, &milli)) {
        Skip(path, "unreadable");
        continue;
      }
      const std::string sensor = chip + "/" + input.substr(0, input.size() - 6);
      temperature->samples.push_back(FormatSample(
          temperature->name, {{"sensor", sensor}, {"type", std::string(strings::Trim(chip_name))}},
          milli / 1000));
    }
  }
}

void HostCollector::CollectNetwork(std::vector<MetricFamily>* out) {
  struct Counter {
    const char* file;
    MetricFamily family;
  };
  std::vector<Counter> counters = {
      {"statistics/rx_bytes", Family("choir_host_network_receive_bytes_total", "counter",
                                     "Bytes received per interface.")},
      {"statistics/tx_bytes",
       Family("choir_host_network_transmit_bytes_total", "counter", "Bytes sent per interface.")},
      {"statistics/rx_errors", Family("choir_host_network_receive_errors_total", "counter",
                                      "Receive errors per interface.")},
      {"statistics/tx_errors", Family("choir_host_network_transmit_errors_total", "counter",
                                      "Transmit errors per interface.")},
      {"statistics/rx_dropped", Family("choir_host_network_receive_drops_total", "counter",
                                       "Received packets dropped per interface.")},
      {"mtu", Family("choir_host_network_mtu_bytes", "gauge", "MTU per interface.")},
  };
  MetricFamily up = Family("choir_host_network_up", "gauge",
                           "1 when the interface is administratively up (IFF_UP), else 0.");
  const std::string dir = paths_.sys + "/class/net";
  std::vector<std::string> names;
  if (!ListDir(dir, "", &names)) {
    Skip(dir, std::strerror(errno));
  }
  for (const std::string& dev : names) {
    // Skip files such as bonding_masters: interfaces are directories (or links to them).
    struct stat st {};
    if (stat((dir + "/" + dev).c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) continue;
    for (Counter& c : counters) {
      double v = 0;
      const std::string path = dir + "/" + dev + "/" + c.file;
      if (ReadNumber(path, &v)) {
        c.family.samples.push_back(FormatSample(c.family.name, {{"device", dev}}, v));
      } else {
        Skip(path, "unreadable");
      }
    }
    std::string flags;
    if (ReadFile(dir + "/" + dev + "/flags", &flags)) {
      const unsigned long f = std::strtoul(std::string(strings::Trim(flags)).c_str(), nullptr, 16);
      up.samples.push_back(FormatSample(up.name, {{"device", dev}}, (f & 1u) ? 1 : 0));
    }
  }
  for (Counter& c : counters) out->push_back(std::move(c.family));
  out->push_back(std::move(up));
}

std::vector<MetricFamily> HostCollector::Collect() {
  std::vector<MetricFamily> out;
  MetricFamily cpu = Family("choir_host_cpu_seconds_total", "counter",
                            "CPU time per core and mode (rate() gives utilisation).");
  CollectCpu(&cpu);
  out.push_back(std::move(cpu));
  MetricFamily total =
      Family("choir_host_memory_total_bytes", "gauge", "Physical memory (MemTotal).");
  MetricFamily available = Family("choir_host_memory_available_bytes", "gauge",
                                  "Memory available for new work (MemAvailable).");
  MetricFamily free = Family("choir_host_memory_free_bytes", "gauge", "Unused memory (MemFree).");
  CollectMemory(&total, &available, &free);
  out.push_back(std::move(total));
  out.push_back(std::move(available));
  out.push_back(std::move(free));
  MetricFamily shm_size =
      Family("choir_host_shm_size_bytes", "gauge",
             "Size of the /dev/shm file system (choir's shared-memory transport lives there).");
  MetricFamily shm_free = Family("choir_host_shm_free_bytes", "gauge", "Free space in /dev/shm.");
  CollectShm(&shm_size, &shm_free);
  out.push_back(std::move(shm_size));
  out.push_back(std::move(shm_free));
  MetricFamily nodes = Family("choir_host_numa_nodes", "gauge", "NUMA nodes of the host.");
  MetricFamily numa_total =
      Family("choir_host_numa_memory_total_bytes", "gauge", "Memory per NUMA node.");
  MetricFamily numa_free =
      Family("choir_host_numa_memory_free_bytes", "gauge", "Free memory per NUMA node.");
  CollectNuma(&nodes, &numa_total, &numa_free);
  out.push_back(std::move(nodes));
  out.push_back(std::move(numa_total));
  out.push_back(std::move(numa_free));
  MetricFamily temperature = Family("choir_host_temperature_celsius", "gauge",
                                    "Temperature per sensor (thermal zones and hwmon).");
  CollectTemperatures(&temperature);
  out.push_back(std::move(temperature));
  CollectNetwork(&out);
  return out;
}

}  // namespace choir::diag
