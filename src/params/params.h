// Settings registry: typed access to the table in params.inc.
//
// Values are resolved once, on first use, from (highest first) API overrides,
// the environment, the config file (CHOIR_CONFIG_FILE) and the table default.
// An unparsable value is reported by CheckAll() with an InvalidSetting error
// naming the variable; getters then return the default. Unknown CHOIR_*
// environment variables are warned about once.
//
// Hot paths must not call getters: components copy what they need at creation.
//
// Thread-safety: every function may be called from any thread.
#ifndef CHOIR_PARAMS_PARAMS_H_
#define CHOIR_PARAMS_PARAMS_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "choir/settings.h"
#include "choir/status.h"

namespace choir::params {

enum class Id : int {
#define CHOIR_PARAM(id, name, type, def, allowed, desc) id,
#include "params/params.inc"
#undef CHOIR_PARAM
  kCount
};

int64_t GetInt(Id id);
bool GetBool(Id id);
double GetSeconds(Id id);
uint64_t GetBytes(Id id);
std::string GetString(Id id);  // also for kEnum
// Where the effective value came from.
SettingSource GetSource(Id id);

// First invalid setting (environment, file or API), or OK.
Status CheckAll();

// Re-reads environment and config file (tests and `choir doctor`).
void Reload();

// Test helper: overrides one setting for the lifetime of the object.
class ScopedOverride {
 public:
  ScopedOverride(std::string_view name, std::string_view value);
  ~ScopedOverride();
  ScopedOverride(const ScopedOverride&) = delete;
  ScopedOverride& operator=(const ScopedOverride&) = delete;

 private:
  std::string name_;
  bool had_previous_ = false;
  std::string previous_;
};

}  // namespace choir::params

#endif  // CHOIR_PARAMS_PARAMS_H_
