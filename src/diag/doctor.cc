#include "diag/doctor.h"

#include <dirent.h>
#include <fmt/format.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/statvfs.h>
#include <sys/utsname.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>

#include "algorithms/switch_points.h"
#include "base/socket.h"
#include "base/strings.h"
#include "choir/settings.h"
#include "choir/version.h"
#include "diag/core_copy.h"
#include "diag/metrics_endpoint.h"
#include "transport/tcp/interfaces.h"

namespace choir::diag {
namespace {

using json = nlohmann::ordered_json;

constexpr uint64_t kMiB = 1024 * 1024;
constexpr uint64_t kGiB = 1024 * kMiB;
constexpr int kExporterPort = 9478;

// Trimmed whole file, or nullopt.
std::optional<std::string> Read(const std::string& path) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return std::nullopt;
  return std::string(strings::Trim(ss.str()));
}

json ReadInt(const std::string& path) {
  auto text = Read(path);
  if (!text) return nullptr;
  auto v = strings::ParseInt(*text);
  return v ? json(*v) : json(nullptr);
}

std::string SettingValue(const std::vector<SettingInfo>& settings, const std::string& name) {
  for (const SettingInfo& s : settings) {
    if (s.name == name) return s.value;
  }
  return "";
}

json OsRelease(const std::string& etc) {
  auto text = Read(etc + "/os-release");
  if (!text) return nullptr;
  std::istringstream in(*text);
  std::string line;
  while (std::getline(in, line)) {
    if (strings::StartsWith(line, "PRETTY_NAME=")) {
      std::string v = line.substr(12);
      if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
      return v;
    }
  }
  return nullptr;
}

json Meminfo(const std::string& proc) {
  auto text = Read(proc + "/meminfo");
  if (!text) return nullptr;
  json out = json::object();
  std::istringstream in(*text);
  std::string key;
  int64_t value = 0;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (fields >> key >> value && !key.empty() && key.back() == ':')
      out[key.substr(0, key.size() - 1)] = value;
  }
  return out;
}

int CountNumaNodes(const std::string& sys) {
  DIR* d = opendir((sys + "/devices/system/node").c_str());
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.size() > 4 && strings::StartsWith(name, "node") && strings::ParseInt(name.substr(4)))
      ++n;
  }
  closedir(d);
  return n;
}

json Limit(int resource) {
  rlimit r{};
  if (getrlimit(resource, &r) != 0) return nullptr;
  auto v = [](rlim_t x) { return x == RLIM_INFINITY ? json(-1) : json(static_cast<int64_t>(x)); };
  return json{{"soft", v(r.rlim_cur)}, {"hard", v(r.rlim_max)}};
}

// pid and command of the process listening on TCP `port`, from /proc/net/tcp and /proc/*/fd.
json PortHolder(const std::string& proc, int port) {
  std::set<std::string> inodes;
  for (const char* table : {"/net/tcp", "/net/tcp6"}) {
    std::ifstream in(proc + table);
    std::string line;
    std::getline(in, line);  // header
    while (std::getline(in, line)) {
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retr, uid, timeout, inode;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retr >> uid >> timeout >>
            inode))
        continue;
      const size_t colon = local.rfind(':');
      if (colon == std::string::npos || state != "0A") continue;  // 0A = LISTEN
      if (std::strtol(local.substr(colon + 1).c_str(), nullptr, 16) == port)
        inodes.insert("socket:[" + inode + "]");
    }
  }
  if (inodes.empty()) return nullptr;
  DIR* d = opendir(proc.c_str());
  if (d == nullptr) return nullptr;
  json holder = nullptr;
  while (dirent* e = readdir(d)) {
    if (!strings::ParseInt(e->d_name)) continue;
    const std::string fd_dir = proc + "/" + e->d_name + "/fd";
    DIR* fds = opendir(fd_dir.c_str());
    if (fds == nullptr) continue;
    while (dirent* f = readdir(fds)) {
      char target[128] = {0};
      const ssize_t n = readlink((fd_dir + "/" + f->d_name).c_str(), target, sizeof(target) - 1);
      if (n > 0 && inodes.count(std::string(target, static_cast<size_t>(n))) != 0) {
        holder = json{{"pid", std::atoi(e->d_name)},
                      {"command", Read(proc + "/" + e->d_name + "/comm").value_or("?")}};
        break;
      }
    }
    closedir(fds);
    if (!holder.is_null()) break;
  }
  closedir(d);
  return holder;
}

json PortFacts(const std::string& proc, int port, const std::string& purpose) {
  json p = {{"port", port}, {"purpose", purpose}};
  auto fd = net::Listen("127.0.0.1", port, 1);
  p["free"] = fd.ok();
  if (!fd.ok()) {
    p["error"] = fd.status().ToString();
    p["holder"] = PortHolder(proc, port);
  }
  return p;
}

}  // namespace

json GatherInterfaceFacts(const std::string& sys) {
  const std::vector<SettingInfo> settings = ListSettings();
  json list = json::array();
  const std::vector<transport::Interface> all = transport::ListInterfaces();
  for (const transport::Interface& i : all) {
    list.push_back({{"name", i.name},
                    {"address", i.address},
                    {"up", i.up},
                    {"loopback", i.loopback},
                    {"mtu", ReadInt(sys + "/class/net/" + i.name + "/mtu")}});
  }
  json chosen = nullptr;
  const std::string forced = SettingValue(settings, "CHOIR_LISTEN_ADDR");
  const std::string ifname = SettingValue(settings, "CHOIR_SOCKET_IFNAME");
  std::string master = SettingValue(settings, "MASTER_ADDR");
  const std::string store = SettingValue(settings, "CHOIR_STORE_ADDR");
  int port = 0;
  if (!store.empty()) net::SplitHostPort(store, &master, &port).IgnoreError();
  std::string address, reason, error;
  if (!forced.empty()) {
    address = forced;
    reason = "CHOIR_LISTEN_ADDR";
  } else if (!ifname.empty()) {
    auto found = transport::FindInterface(ifname, all);
    if (found.ok()) {
      address = found->address;
      reason = "CHOIR_SOCKET_IFNAME=" + ifname;
    } else {
      error = found.status().ToString();
    }
  } else {
    auto source = transport::SourceAddressFor(master);
    address = source.ok() ? *source : "127.0.0.1";
    reason = "route to the store host " + master;
  }
  if (!address.empty()) {
    std::string name;
    for (const transport::Interface& i : all) {
      if (i.address == address) name = i.name;
    }
    chosen = {{"name", name}, {"address", address}, {"reason", reason}};
  }
  return json{{"list", list},
              {"chosen", chosen},
              {"socket_ifname", ifname},
              {"master_addr", master},
              {"error", error}};
}

const char* VerdictName(Verdict v) {
  switch (v) {
    case Verdict::kPass:
      return "PASS";
    case Verdict::kWarn:
      return "WARN";
    case Verdict::kFail:
      return "FAIL";
  }
  return "?";
}

json GatherHostFacts(const DoctorRoots& roots) {
  json f;
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  f["hostname"] = host;
  utsname u{};
  uname(&u);
  f["os"] = OsRelease(roots.etc);
  f["kernel"] = std::string(u.release);
  f["machine"] = std::string(u.machine);
  cpu_set_t set;
  CPU_ZERO(&set);
  const int affinity = sched_getaffinity(0, sizeof(set), &set) == 0 ? CPU_COUNT(&set) : -1;
  const int numa = CountNumaNodes(roots.sys);
  f["cpu"] = {{"online", sysconf(_SC_NPROCESSORS_ONLN)},
              {"affinity", affinity},
              {"numa_nodes", numa >= 0 ? json(numa) : json(nullptr)}};
  const json mem = Meminfo(roots.proc);
  if (mem.is_null()) {
    f["hugepages"] = nullptr;
  } else {
    f["hugepages"] = {{"total", mem.value("HugePages_Total", int64_t{0})},
                      {"free", mem.value("HugePages_Free", int64_t{0})},
                      {"size_kb", mem.value("Hugepagesize", int64_t{0})}};
  }
  auto thp = Read(roots.sys + "/kernel/mm/transparent_hugepage/enabled");
  f["transparent_hugepages"] = thp ? json(*thp) : json(nullptr);
  f["swappiness"] = ReadInt(roots.proc + "/sys/vm/swappiness");
  f["limits"] = {{"nofile", Limit(RLIMIT_NOFILE)}, {"memlock", Limit(RLIMIT_MEMLOCK)}};
  struct statvfs st {};
  if (statvfs(roots.shm.c_str(), &st) == 0) {
    f["shm"] = {{"path", roots.shm},
                {"size_bytes", static_cast<uint64_t>(st.f_blocks) * st.f_frsize},
                {"free_bytes", static_cast<uint64_t>(st.f_bavail) * st.f_frsize}};
  } else {
    f["shm"] = nullptr;
  }
  const CoreCopy copy = MeasureCoreCopy();
  if (copy.measured) {
    f["core_copy"] = {{"measured", true},
                      {"writer_cpu", copy.writer_cpu},
                      {"reader_cpu", copy.reader_cpu},
                      {"cross_gbps", copy.cross_gbps},
                      {"own_gbps", copy.own_gbps}};
  } else {
    f["core_copy"] = {{"measured", false}, {"why_not", copy.why_not}};
  }
  const std::vector<SettingInfo> settings = ListSettings();
  f["interfaces"] = GatherInterfaceFacts(roots.sys);
  const std::string cs = roots.sys + "/devices/system/clocksource/clocksource0/";
  auto current = Read(cs + "current_clocksource");
  auto available = Read(cs + "available_clocksource");
  f["clocksource"] = {{"current", current ? json(*current) : json(nullptr)},
                      {"available", available ? json(*available) : json(nullptr)}};
  json ports = json::array();
  const int master_port =
      static_cast<int>(strings::ParseInt(SettingValue(settings, "MASTER_PORT")).value_or(29500));
  ports.push_back(PortFacts(roots.proc, master_port, "MASTER_PORT (PyTorch store)"));
  ports.push_back(PortFacts(roots.proc, master_port + 1, "MASTER_PORT+1 (choir store)"));
  ports.push_back(PortFacts(roots.proc, kExporterPort, "choir exporter default"));
  auto metrics = ParseMetricsPort(SettingValue(settings, "CHOIR_METRICS_PORT"), 0);
  if (metrics.ok() && *metrics > 0)
    ports.push_back(PortFacts(roots.proc, *metrics, "CHOIR_METRICS_PORT"));
  for (int p : roots.extra_ports) ports.push_back(PortFacts(roots.proc, p, "--port"));
  f["ports"] = ports;
  f["choir"] = {{"version", kVersionString},
                {"build", BuildString()},
                {"kernel_isa", KernelIsa()},
                {"switch_points", algorithms::SwitchTableName(
                                      algorithms::SwitchTableFor(SettingValue(settings, "CHOIR_SHM_TUNING")))},
                {"protocol", kProtocolVersion}};
  json user_set = json::object();
  json invalid = json::array();
  for (const SettingInfo& s : settings) {
    if (s.source != SettingSource::kDefault)
      user_set[s.name] = {{"value", s.value}, {"source", SettingSourceName(s.source)}};
    if (!s.error.empty()) invalid.push_back({{"name", s.name}, {"error", s.error}});
  }
  f["settings"] = {{"user_set", user_set},
                   {"invalid", invalid},
                   {"unknown_environment", UnknownSettingsInEnvironment()}};
  return f;
}

namespace {

// Helpers that keep each judge short: facts may be null or of a wrong type.
const json* Get(const json& f, std::initializer_list<const char*> path) {
  const json* j = &f;
  for (const char* key : path) {
    if (!j->is_object() || !j->contains(key) || (*j)[key].is_null()) return nullptr;
    j = &(*j)[key];
  }
  return j;
}

int64_t Int(const json* j, int64_t fallback) {
  return j != nullptr && j->is_number() ? j->get<int64_t>() : fallback;
}
std::string Str(const json* j) {
  return j != nullptr && j->is_string() ? j->get<std::string>() : "";
}

CheckResult Unreadable(const char* id, const char* title, const char* what) {
  return {id,
          title,
          Verdict::kWarn,
          std::string(what) + " could not be read",
          "doctor has no facts for this check (the file is missing or not readable here, e.g. in a "
          "container)",
          "run `choir doctor` on the host itself, or as a user that can read it"};
}

std::string Bytes(uint64_t b) { return strings::FormatBytes(b); }

}  // namespace

std::vector<CheckResult> JudgeHostFacts(const json& f) {
  std::vector<CheckResult> out;
  {  // OS and kernel
    const std::string os = Str(Get(f, {"os"}));
    const std::string kernel = Str(Get(f, {"kernel"}));
    if (kernel.empty()) {
      out.push_back(Unreadable("os", "OS and kernel", "the kernel release"));
    } else {
      out.push_back({"os", "OS and kernel", Verdict::kPass,
                     (os.empty() ? "unknown OS" : os) + ", kernel " + kernel, "", ""});
    }
  }
  {  // CPU and NUMA
    const int64_t online = Int(Get(f, {"cpu", "online"}), -1);
    const int64_t affinity = Int(Get(f, {"cpu", "affinity"}), -1);
    const int64_t numa = Int(Get(f, {"cpu", "numa_nodes"}), -1);
    CheckResult c{"cpu",
                  "CPU and NUMA",
                  Verdict::kPass,
                  fmt::format("{} CPUs online, {} usable by this process, {} NUMA node(s)", online,
                              affinity, numa < 0 ? std::string("?") : std::to_string(numa)),
                  "",
                  ""};
    if (online > 0 && affinity > 0 && affinity < online) {
      c.verdict = Verdict::kWarn;
      c.cause =
          "this process may only run on part of the CPUs (taskset, cgroup cpuset or a container "
          "limit); ranks started from here inherit it and compete for those CPUs";
      c.fix =
          "start choir from an unrestricted shell, or size -n to the CPUs you were given; `taskset "
          "-p $$` shows the mask";
    }
    out.push_back(c);
  }
  {  // hugepages
    const json* hp = Get(f, {"hugepages"});
    if (hp == nullptr || !hp->is_object()) {
      out.push_back(Unreadable("hugepages", "Huge pages", "/proc/meminfo"));
    } else {
      const int64_t total = Int(Get(*hp, {"total"}), 0), free = Int(Get(*hp, {"free"}), 0);
      CheckResult c{
          "hugepages",
          "Huge pages",
          Verdict::kPass,
          fmt::format("{} reserved, {} free (size {} kB); transparent huge pages: {}", total, free,
                      Int(Get(*hp, {"size_kb"}), 0), Str(Get(f, {"transparent_hugepages"}))),
          "",
          ""};
      if (total > 0 && free == 0) {
        c.verdict = Verdict::kWarn;
        c.cause =
            "every reserved huge page is in use; programs that expect them fall back to small "
            "pages or fail";
        c.fix = "reserve more (sysctl vm.nr_hugepages=N) or find the holder in /proc/*/smaps";
      }
      out.push_back(c);
    }
  }
  {  // swappiness
    const json* s = Get(f, {"swappiness"});
    if (s == nullptr) {
      out.push_back(Unreadable("swappiness", "Swappiness", "/proc/sys/vm/swappiness"));
    } else {
      CheckResult c{"swappiness",
                    "Swappiness",
                    Verdict::kPass,
                    fmt::format("vm.swappiness = {}", Int(s, 0)),
                    "",
                    ""};
      if (Int(s, 0) > 10) {
        c.verdict = Verdict::kWarn;
        c.cause =
            "the kernel swaps out idle pages of training processes (optimizer state, pinned "
            "buffers) early, which shows up as step-time spikes";
        c.fix = "sysctl -w vm.swappiness=1 (persist it in /etc/sysctl.d/)";
      }
      out.push_back(c);
    }
  }
  {  // open files
    const json* n = Get(f, {"limits", "nofile", "soft"});
    if (n == nullptr) {
      out.push_back(Unreadable("nofile", "Open files limit", "RLIMIT_NOFILE"));
    } else {
      const int64_t soft = Int(n, 0);
      CheckResult c{
          "nofile",
          "Open files limit",
          Verdict::kPass,
          fmt::format("ulimit -n = {}", soft < 0 ? std::string("unlimited") : std::to_string(soft)),
          "",
          ""};
      if (soft >= 0 && soft < 1024) {
        c.verdict = Verdict::kFail;
      } else if (soft >= 0 && soft < 65536) {
        c.verdict = Verdict::kWarn;
      }
      if (c.verdict != Verdict::kPass) {
        c.cause =
            "every rank holds sockets to its peers, shared-memory segments and the store; large "
            "jobs (and data loaders) run out of descriptors and fail with E306/E501";
        c.fix =
            "raise it: `ulimit -n 1048576`, LimitNOFILE= in the systemd unit, or nofile in "
            "/etc/security/limits.conf";
      }
      out.push_back(c);
    }
  }
  {  // memlock
    const json* m = Get(f, {"limits", "memlock", "soft"});
    if (m == nullptr) {
      out.push_back(Unreadable("memlock", "Locked memory limit", "RLIMIT_MEMLOCK"));
    } else {
      const int64_t soft = Int(m, 0);
      CheckResult c{"memlock",
                    "Locked memory limit",
                    Verdict::kPass,
                    fmt::format("ulimit -l = {}", soft < 0 ? std::string("unlimited")
                                                           : Bytes(static_cast<uint64_t>(soft))),
                    "",
                    ""};
      if (soft >= 0 && static_cast<uint64_t>(soft) < 64 * kMiB) {
        c.verdict = Verdict::kWarn;
        c.cause =
            "pinned (registered) memory for RDMA and device DMA needs a high locked-memory limit; "
            "small limits make registration fail";
        c.fix =
            "set memlock to unlimited: `ulimit -l unlimited`, LimitMEMLOCK=infinity, or docker "
            "--ulimit memlock=-1";
      }
      out.push_back(c);
    }
  }
  {  // /dev/shm
    const json* s = Get(f, {"shm"});
    if (s == nullptr || !s->is_object()) {
      out.push_back(Unreadable("shm", "/dev/shm", "/dev/shm"));
    } else {
      const uint64_t size = static_cast<uint64_t>(Int(Get(*s, {"size_bytes"}), 0));
      const uint64_t free = static_cast<uint64_t>(Int(Get(*s, {"free_bytes"}), 0));
      CheckResult c{
          "shm", "/dev/shm", Verdict::kPass, fmt::format("{} free of {}", Bytes(free), Bytes(size)),
          "",    ""};
      if (size < 256 * kMiB || free < 64 * kMiB) {
        c.verdict = Verdict::kFail;
      } else if (free < kGiB || free * 10 < size) {
        c.verdict = Verdict::kWarn;
      }
      if (c.verdict != Verdict::kPass) {
        c.cause =
            "choir's shared-memory transport and PyTorch's data loaders allocate in /dev/shm; when "
            "it is small (containers default to 64 MB) or full, ranks fail with E305 ShmError";
        c.fix =
            "enlarge it (docker --shm-size=16g, Kubernetes emptyDir medium: Memory, or mount -o "
            "remount,size=16G /dev/shm) and delete stale files; or force CHOIR_TRANSPORT=tcp";
      }
      out.push_back(c);
    }
  }
  {  // interfaces
    const json* ifs = Get(f, {"interfaces"});
    if (ifs == nullptr || !ifs->is_object()) {
      out.push_back(Unreadable("interfaces", "Network interfaces", "the interface list"));
    } else {
      std::string listing;
      if (const json* list = Get(*ifs, {"list"}); list != nullptr && list->is_array()) {
        for (const json& i : *list) {
          listing += fmt::format("{}{} {} {} mtu {}", listing.empty() ? "" : "; ",
                                 Str(Get(i, {"name"})), Str(Get(i, {"address"})),
                                 i.value("up", false) ? "up" : "DOWN", Int(Get(i, {"mtu"}), -1));
        }
      }
      const json* chosen = Get(*ifs, {"chosen"});
      const std::string error = Str(Get(*ifs, {"error"}));
      CheckResult c{"interfaces", "Network interfaces", Verdict::kPass, listing, "", ""};
      if (!error.empty() || chosen == nullptr) {
        c.verdict = Verdict::kFail;
        c.summary += "; choir would pick: nothing";
        c.cause = "CHOIR_SOCKET_IFNAME='" + Str(Get(*ifs, {"socket_ifname"})) +
                  "' matches no up interface with an IPv4 address: ranks fail with E308 "
                  "InterfaceNotFound (" +
                  error + ")";
        c.fix =
            "list interfaces with `ip -br addr` and fix CHOIR_SOCKET_IFNAME (prefix list, ^ "
            "excludes, = exact)";
      } else {
        const std::string name = Str(Get(*chosen, {"name"}));
        const std::string addr = Str(Get(*chosen, {"address"}));
        const std::string master = Str(Get(*ifs, {"master_addr"}));
        c.summary += fmt::format("; choir would pick {} {} ({})", name.empty() ? "?" : name, addr,
                                 Str(Get(*chosen, {"reason"})));
        const bool chosen_loopback = strings::StartsWith(addr, "127.");
        const bool master_loopback = strings::StartsWith(master, "127.") || master == "localhost";
        if (chosen_loopback && !master_loopback) {
          c.verdict = Verdict::kWarn;
          c.cause = "choir would listen on loopback while the store host " + master +
                    " is remote: peers on other hosts cannot connect (E300 ConnectTimeout)";
          c.fix =
              "set CHOIR_SOCKET_IFNAME to the data interface (e.g. =eth0) or MASTER_ADDR to an "
              "address on it";
        } else {
          for (const char* bad : {"docker", "virbr", "veth", "br-", "cni", "flannel"}) {
            if (strings::StartsWith(name, bad)) {
              c.verdict = Verdict::kWarn;
              c.cause = "choir would use the virtual/bridge interface " + name +
                        ", which peers on other hosts usually cannot reach";
              c.fix =
                  "set CHOIR_SOCKET_IFNAME to the data interface, e.g. "
                  "CHOIR_SOCKET_IFNAME=^docker,lo,veth";
            }
          }
        }
      }
      out.push_back(c);
    }
  }
  {  // copies between cores
    const json* cc = Get(f, {"core_copy"});
    const json* measured = cc == nullptr ? nullptr : Get(*cc, {"measured"});
    if (measured == nullptr || !measured->is_boolean()) {
      out.push_back(Unreadable("core_copy", "Copies between cores", "the copy between two CPUs"));
    } else if (!measured->get<bool>()) {
      out.push_back({"core_copy", "Copies between cores", Verdict::kPass,
                     "not measured: " + Str(Get(*cc, {"why_not"})), "", ""});
    } else {
      const json* cross = Get(*cc, {"cross_gbps"});
      const json* own = Get(*cc, {"own_gbps"});
      const double x = cross != nullptr && cross->is_number() ? cross->get<double>() : 0;
      const double o = own != nullptr && own->is_number() ? own->get<double>() : 0;
      CheckResult c{"core_copy",
                    "Copies between cores",
                    Verdict::kPass,
                    fmt::format("CPU {} copies what CPU {} just wrote at {:.1f} GB/s, what it wrote itself at {:.1f}",
                                Int(Get(*cc, {"reader_cpu"}), -1), Int(Get(*cc, {"writer_cpu"}), -1), x, o),
                    "",
                    ""};
      // Eight runs on the AMD VM: 0.75-0.86 of the copy within a core in
      // seven, 0.30 in one, when its pipe collectives ran up to 3x slower
      // (docs/performance-log.md).
      if (o > 0 && x < 0.4 * o) {
        c.verdict = Verdict::kWarn;
        c.cause = fmt::format(
            "data moves between these CPUs at {:.0f} % of the speed of a copy within one: they do not share a "
            "cache (other sockets or core complexes, or virtual CPUs placed so); same-host collectives that "
            "pass data through the caches (shm_pipe) ran up to 3x slower on such CPUs than on CPUs that do",
            100 * x / o);
        c.fix =
            "run a host's ranks on CPUs that share a last-level cache (choir run binds one rank per CPU in "
            "order; `lscpu -e` shows the caches); on a VM, pin its virtual CPUs to one core complex, and "
            "run `choir doctor` again: the figure can change from one start to the next";
      }
      out.push_back(c);
    }
  }
  {  // clock source
    const std::string current = Str(Get(f, {"clocksource", "current"}));
    if (current.empty()) {
      out.push_back(Unreadable("clocksource", "Clock source", "the clock source"));
    } else {
      CheckResult c{"clocksource", "Clock source", Verdict::kPass, current, "", ""};
      static const char* kFast[] = {"tsc", "kvm-clock", "arch_sys_counter",
                                    "hyperv_clocksource_tsc_page", "xen"};
      if (std::none_of(std::begin(kFast), std::end(kFast),
                       [&](const char* k) { return current == k; })) {
        c.verdict = Verdict::kWarn;
        c.cause = "the " + current +
                  " clock source makes every clock read a slow system call; timeouts, metrics and "
                  "profilers read the clock often";
        c.fix = "use tsc if available (" + Str(Get(f, {"clocksource", "available"})) +
                "): echo tsc > /sys/devices/system/clocksource/clocksource0/current_clocksource";
      }
      out.push_back(c);
    }
  }
  {  // ports
    const json* ports = Get(f, {"ports"});
    CheckResult c{"ports", "choir ports", Verdict::kPass, "", "", ""};
    std::string busy;
    if (ports != nullptr && ports->is_array()) {
      for (const json& p : *ports) {
        const bool free = p.value("free", false);
        std::string holder;
        if (const json* h = Get(p, {"holder"}))
          holder =
              fmt::format(" by pid {} ({})", Int(Get(*h, {"pid"}), 0), Str(Get(*h, {"command"})));
        c.summary += fmt::format("{}{} {}", c.summary.empty() ? "" : "; ", Int(Get(p, {"port"}), 0),
                                 free ? "free" : "IN USE" + holder);
        if (!free)
          busy += fmt::format("{}{} ({}){}", busy.empty() ? "" : ", ", Int(Get(p, {"port"}), 0),
                              Str(Get(p, {"purpose"})), holder);
      }
    }
    if (!busy.empty()) {
      c.verdict = Verdict::kWarn;
      c.cause = "ports choir uses by default are taken: " + busy +
                "; a job using them fails with E307 AddressInUse (often a stale process of an "
                "earlier run)";
      c.fix =
          "stop the holder if it is stale (`ss -ltnp 'sport = :PORT'` shows it), or give the job "
          "another --master-port";
    }
    out.push_back(c);
  }
  {  // choir build; the same-host switch points are missing from older builds' facts
    const std::string switch_points = Str(Get(f, {"choir", "switch_points"}));
    CheckResult c{
        "choir",
        "choir build",
        Verdict::kPass,
        fmt::format("choir {} ({}), kernels {}, {}protocol {}", Str(Get(f, {"choir", "version"})),
                    Str(Get(f, {"choir", "build"})), Str(Get(f, {"choir", "kernel_isa"})),
                    switch_points.empty() ? "" : switch_points + " switch points, ",
                    Int(Get(f, {"choir", "protocol"}), 0)),
        "",
        ""};
    out.push_back(c);
  }
  {  // settings
    CheckResult c{"settings", "Settings in effect", Verdict::kPass, "", "", ""};
    if (const json* set = Get(f, {"settings", "user_set"}); set != nullptr && set->is_object()) {
      for (const auto& [name, v] : set->items()) {
        c.summary += fmt::format("{}{}={} ({})", c.summary.empty() ? "" : ", ", name,
                                 Str(Get(v, {"value"})), Str(Get(v, {"source"})));
      }
    }
    if (c.summary.empty()) c.summary = "all defaults";
    std::string invalid, unknown;
    if (const json* inv = Get(f, {"settings", "invalid"}); inv != nullptr && inv->is_array()) {
      for (const json& i : *inv)
        invalid += fmt::format("{}{}: {}", invalid.empty() ? "" : "; ", Str(Get(i, {"name"})),
                               Str(Get(i, {"error"})));
    }
    if (const json* unk = Get(f, {"settings", "unknown_environment"});
        unk != nullptr && unk->is_array()) {
      for (const json& u : *unk)
        unknown += (unknown.empty() ? "" : ", ") + (u.is_string() ? u.get<std::string>() : "?");
    }
    if (!invalid.empty()) {
      c.verdict = Verdict::kFail;
      c.cause = "rejected values (E105 InvalidSetting; communicators refuse to start): " + invalid;
      c.fix =
          "fix or unset them; `choir doctor params` shows every setting, its type and its source";
    } else if (!unknown.empty()) {
      c.verdict = Verdict::kWarn;
      c.cause =
          "CHOIR_* variables that are not choir settings (typos are silently ignored): " + unknown;
      c.fix = "correct the names; `choir doctor params` suggests the closest setting";
    }
    out.push_back(c);
  }
  return out;
}

json DoctorReport(const json& facts, const std::vector<CheckResult>& checks) {
  json report;
  report["schema"] = kDoctorSchema;
  report["host"] = facts.value("hostname", std::string("?"));
  const auto now = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y-%m-%dT%H:%M:%SZ", &tm);
  report["time"] = stamp;
  int counts[3] = {0, 0, 0};
  json list = json::array();
  for (const CheckResult& c : checks) {
    ++counts[static_cast<int>(c.verdict)];
    json j = {{"id", c.id},
              {"title", c.title},
              {"status", VerdictName(c.verdict)},
              {"summary", c.summary}};
    if (c.verdict != Verdict::kPass) {
      j["cause"] = c.cause;
      j["fix"] = c.fix;
    }
    list.push_back(std::move(j));
  }
  report["summary"] = {{"pass", counts[0]}, {"warn", counts[1]}, {"fail", counts[2]}};
  report["checks"] = std::move(list);
  report["facts"] = facts;
  return report;
}

}  // namespace choir::diag
