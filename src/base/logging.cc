#include "base/logging.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "base/strings.h"

namespace choir::log {

std::atomic<int> g_level{static_cast<int>(Level::kWarn)};
std::atomic<unsigned> g_subsys_mask{ALL};

namespace {
std::atomic<int> g_rank{-1};

struct SubsysName {
  const char* name;
  unsigned bit;
};
constexpr SubsysName kSubsysNames[] = {
    {"INIT", INIT}, {"STORE", STORE}, {"TCP", TCP},       {"SHM", SHM},
    {"COLL", COLL}, {"ALGO", ALGO},   {"TOPO", TOPO},     {"PARAMS", PARAMS},
    {"LAUNCH", LAUNCH}, {"DIAG", DIAG}, {"TORCH", TORCH},
};

const char* LevelName(Level level) {
  switch (level) {
    case Level::kTrace: return "TRACE";
    case Level::kDebug: return "DEBUG";
    case Level::kInfo: return "INFO";
    case Level::kWarn: return "WARN";
    case Level::kError: return "ERROR";
    case Level::kOff: return "OFF";
  }
  return "?";
}

const char* SubsysLabel(unsigned subsys) {
  for (const auto& s : kSubsysNames) {
    if (s.bit == subsys) return s.name;
  }
  return "CHOIR";
}

const std::string& HostName() {
  static const std::string name = [] {
    char buf[256] = {0};
    if (gethostname(buf, sizeof(buf) - 1) != 0) return std::string("?");
    return std::string(buf);
  }();
  return name;
}
}  // namespace

void SetLevel(Level level) { g_level.store(static_cast<int>(level), std::memory_order_relaxed); }
void SetSubsysMask(unsigned mask) { g_subsys_mask.store(mask, std::memory_order_relaxed); }
void SetProcessRank(int rank) { g_rank.store(rank, std::memory_order_relaxed); }

bool ParseLevel(std::string_view text, Level* level) {
  const std::string t = strings::ToLower(strings::Trim(text));
  for (int i = 0; i <= static_cast<int>(Level::kOff); ++i) {
    if (t == strings::ToLower(LevelName(static_cast<Level>(i)))) {
      *level = static_cast<Level>(i);
      return true;
    }
  }
  if (t == "warning") {
    *level = Level::kWarn;
    return true;
  }
  return false;
}

bool ParseSubsysMask(std::string_view text, unsigned* mask) {
  text = strings::Trim(text);
  if (text.empty() || text == "ALL" || text == "all") {
    *mask = ALL;
    return true;
  }
  bool exclude = false;
  if (text.front() == '^') {
    exclude = true;
    text.remove_prefix(1);
  }
  unsigned bits = 0;
  for (const std::string& piece : strings::Split(text, ',')) {
    const std::string upper = [&] {
      std::string u(strings::Trim(piece));
      for (char& c : u) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
      return u;
    }();
    bool found = false;
    for (const auto& s : kSubsysNames) {
      if (upper == s.name) {
        bits |= s.bit;
        found = true;
      }
    }
    if (!found) return false;
  }
  *mask = exclude ? (ALL & ~bits) : bits;
  return true;
}

void Write(Level level, unsigned subsys, std::string_view message) {
  static std::mutex mu;
  const int rank = g_rank.load(std::memory_order_relaxed);
  std::string line = rank >= 0 ? fmt::format("{}:{} [{}] {} {} {}\n", HostName(), getpid(), rank,
                                             LevelName(level), SubsysLabel(subsys), message)
                               : fmt::format("{}:{} [-] {} {} {}\n", HostName(), getpid(),
                                             LevelName(level), SubsysLabel(subsys), message);
  std::lock_guard<std::mutex> lock(mu);
  std::fwrite(line.data(), 1, line.size(), stderr);
  std::fflush(stderr);
}

void CheckFailed(const char* file, int line, const char* cond) {
  Write(Level::kError, ALL, fmt::format("CHECK failed at {}:{}: {}", file, line, cond));
  std::abort();
}

}  // namespace choir::log
