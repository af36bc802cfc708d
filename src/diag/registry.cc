#include "diag/registry.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "base/files.h"
#include "base/json_text.h"

namespace choir::diag {

using json = nlohmann::json;

std::string RegistryEntryToJson(const RegistryEntry& e) {
  return JsonDump(json{{"schema", kRegistrySchema},
                       {"pid", e.pid},
                       {"start_time", e.start_time},
                       {"job", e.job},
                       {"rank", e.rank},
                       {"size", e.size},
                       {"local_rank", e.local_rank},
                       {"host", e.host},
                       {"address", e.address},
                       {"port", e.port},
                       {"version", e.version}});
}

Result<RegistryEntry> ParseRegistryEntry(const std::string& text) {
  const json j = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) return InvalidArgument("not a JSON object");
  if (j.value("schema", std::string()) != kRegistrySchema) {
    return InvalidArgument(std::string("schema is not ") + kRegistrySchema);
  }
  try {
    RegistryEntry e;
    e.pid = j.at("pid").get<int>();
    e.start_time = j.value("start_time", uint64_t{0});
    e.job = j.value("job", std::string());
    e.rank = j.value("rank", -1);
    e.size = j.value("size", 0);
    e.local_rank = j.value("local_rank", -1);
    e.host = j.value("host", std::string());
    e.address = j.at("address").get<std::string>();
    e.port = j.at("port").get<int>();
    e.version = j.value("version", std::string());
    if (e.pid <= 0 || e.port <= 0 || e.port > 65535)
      return InvalidArgument("pid or port out of range");
    return e;
  } catch (const json::exception& ex) {
    return InvalidArgument(std::string("missing or wrong field: ") + ex.what());
  }
}

Result<std::string> WriteRegistryEntry(const std::string& dir, const RegistryEntry& entry) {
  if (mkdir(dir.c_str(), 01777) == 0) {
    chmod(dir.c_str(), 01777);  // mkdir's mode is filtered by the umask
  } else if (errno != EEXIST) {
    return ErrnoError(Code::kSystemError, errno, "creating metrics registry directory " + dir);
  }
  const std::string path = dir + "/" + std::to_string(entry.pid) + ".json";
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << RegistryEntryToJson(entry) << "\n";
    if (!out) return Status(Code::kSystemError, "cannot write metrics registry entry " + tmp);
  }
  chmod(tmp.c_str(), 0644);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    unlink(tmp.c_str());
    return ErrnoError(Code::kSystemError, err, "renaming " + tmp + " to " + path);
  }
  return path;
}

uint64_t ProcessStartTime(int pid, const std::string& proc_root) {
  std::ifstream in(proc_root + "/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) may contain spaces and parentheses: skip past the last ')'.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && fields >> field; ++i) {
    if (i == 22) return std::strtoull(field.c_str(), nullptr, 10);
  }
  return 0;
}

bool RegistryEntryAlive(const RegistryEntry& entry, const std::string& proc_root) {
  if (entry.pid <= 0) return false;
  if (kill(entry.pid, 0) != 0 && errno != EPERM) return false;
  const uint64_t now = ProcessStartTime(entry.pid, proc_root);
  return entry.start_time == 0 || now == 0 || now == entry.start_time;
}

RegistryScan ScanRegistry(const std::string& dir, const std::string& proc_root) {
  RegistryScan scan;
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return scan;
  std::vector<std::string> names;
  while (dirent* ent = readdir(d)) {
    const std::string name = ent->d_name;
    if (name.size() > 5 && name.compare(name.size() - 5, 5, ".json") == 0) names.push_back(name);
  }
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const std::string& name : names) {
    const std::string path = dir + "/" + name;
    // Anyone may write into a shared registry: a directory or FIFO named
    // *.json is reported, never read (a FIFO would block the scan).
    auto text = files::ReadSmallFile(path, 64 << 10);
    if (!text.ok()) {
      // The message names the path already.
      scan.unreadable.push_back(text.status().message());
      continue;
    }
    auto entry = ParseRegistryEntry(*text);
    if (!entry.ok()) {
      scan.unreadable.push_back(path + ": " + entry.status().message());
      continue;
    }
    entry->file = path;
    (RegistryEntryAlive(*entry, proc_root) ? scan.alive : scan.stale).push_back(std::move(*entry));
  }
  std::sort(scan.alive.begin(), scan.alive.end(),
            [](const RegistryEntry& a, const RegistryEntry& b) {
              return std::tie(a.job, a.rank, a.pid) < std::tie(b.job, b.rank, b.pid);
            });
  return scan;
}

}  // namespace choir::diag
