// Logging: CHOIR_LOG(level, SUBSYS, "fmt {}", args...).
//
// Lines look like `host:pid [rank] LEVEL SUBSYS message` and go to stderr.
// The level is checked before any formatting, so a disabled log line costs one
// relaxed atomic load. Levels and subsystem filters come from the settings
// CHOIR_LOG_LEVEL and CHOIR_LOG_SUBSYS (applied by src/params on first use).
// Nothing above TRACE belongs on a hot path: counters go to metrics.
//
// Thread-safety: all functions may be called from any thread.
#ifndef CHOIR_BASE_LOGGING_H_
#define CHOIR_BASE_LOGGING_H_

#include <fmt/format.h>

#include <atomic>
#include <string>
#include <string_view>

namespace choir::log {

enum class Level : int { kTrace = 0, kDebug = 1, kInfo = 2, kWarn = 3, kError = 4, kOff = 5 };

// Subsystems, filterable with CHOIR_LOG_SUBSYS=TCP,SHM (or ^TCP to exclude).
enum Subsys : unsigned {
  INIT = 1u << 0,
  STORE = 1u << 1,
  TCP = 1u << 2,
  SHM = 1u << 3,
  COLL = 1u << 4,
  ALGO = 1u << 5,
  TOPO = 1u << 6,
  PARAMS = 1u << 7,
  LAUNCH = 1u << 8,
  DIAG = 1u << 9,
  TORCH = 1u << 10,
  ALL = ~0u,
};

extern std::atomic<int> g_level;
extern std::atomic<unsigned> g_subsys_mask;

inline bool Enabled(Level level, unsigned subsys) {
  return static_cast<int>(level) >= g_level.load(std::memory_order_relaxed) &&
         (subsys & g_subsys_mask.load(std::memory_order_relaxed)) != 0;
}

void SetLevel(Level level);
void SetSubsysMask(unsigned mask);
// Parses "INFO", "warn", ... ; false on an unknown name.
bool ParseLevel(std::string_view text, Level* level);
// Parses "TCP,SHM" or "^STORE" into a mask; false on an unknown name.
bool ParseSubsysMask(std::string_view text, unsigned* mask);
// The rank shown in log prefixes of this process (-1: none yet).
void SetProcessRank(int rank);

void Write(Level level, unsigned subsys, std::string_view message);

}  // namespace choir::log

#define CHOIR_LOG(level, subsys, ...)                                                   \
  do {                                                                                  \
    if (::choir::log::Enabled(::choir::log::Level::k##level, ::choir::log::subsys)) {   \
      ::choir::log::Write(::choir::log::Level::k##level, ::choir::log::subsys,          \
                          fmt::format(__VA_ARGS__));                                    \
    }                                                                                   \
  } while (0)

// For programming errors only (never for anything a peer or the user can cause).
#define CHOIR_CHECK(cond)                                                               \
  do {                                                                                  \
    if (!(cond)) ::choir::log::CheckFailed(__FILE__, __LINE__, #cond);                  \
  } while (0)

namespace choir::log {
[[noreturn]] void CheckFailed(const char* file, int line, const char* cond);
}

#endif  // CHOIR_BASE_LOGGING_H_
