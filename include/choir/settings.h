// Inspecting and setting choir's CHOIR_* settings from a program.
//
// Every setting is declared once, with a type, default and description; this
// header lets tools list them (`choir doctor params`) and lets programs set
// them with the highest precedence (API > environment > config file > default).
//
// Thread-safety: all functions may be called from any thread. Settings are
// read by components when they are created; changing one later does not
// affect communicators that already exist.
#ifndef CHOIR_SETTINGS_H_
#define CHOIR_SETTINGS_H_

#include <string>
#include <string_view>
#include <vector>

#include "choir/status.h"

namespace choir {

enum class SettingSource { kDefault, kConfigFile, kEnvironment, kApi };
const char* SettingSourceName(SettingSource source);

struct SettingInfo {
  std::string name;           // "CHOIR_TIMEOUT"
  std::string type;           // "seconds", "bytes", "int", "bool", "string", "enum"
  std::string default_value;
  std::string allowed;        // "auto|tcp|shm" for enums, else ""
  std::string description;
  std::string value;          // effective value (as text)
  SettingSource source;
  std::string error;          // why the given value was rejected ("" when fine)
};

// What ListSettings() shows as the value of a secret setting that is set
// (CHOIR_AUTH_SECRET): listings go into files and reports.
inline constexpr std::string_view kHiddenValue = "(set, hidden)";

// Every setting in table order; secret values replaced by kHiddenValue.
std::vector<SettingInfo> ListSettings();

// Sets a setting with API precedence. InvalidSetting for an unknown name or a value
// that does not parse as the setting's type.
Status SetSetting(std::string_view name, std::string_view value);
// Removes an API override (the environment/file/default applies again).
void ClearSetting(std::string_view name);

// Unknown CHOIR_* variables found in the environment (likely typos).
std::vector<std::string> UnknownSettingsInEnvironment();

}  // namespace choir

#endif  // CHOIR_SETTINGS_H_
