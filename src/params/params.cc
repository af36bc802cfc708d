#include "params/params.h"

#include <fmt/format.h>

#include <map>
#include <mutex>
#include <optional>
#include <sstream>

#include "base/files.h"
#include "base/logging.h"
#include "base/strings.h"

extern char** environ;

namespace choir {
namespace params {
namespace {

enum class Type { kInt, kBool, kString, kSeconds, kBytes, kEnum };

struct Spec {
  Id id;
  const char* name;
  Type type;
  const char* default_value;
  const char* allowed;
  const char* description;
};

constexpr Spec kSpecs[] = {
#define CHOIR_PARAM(id, name, type, def, allowed, desc) {Id::id, name, Type::type, def, allowed, desc},
#include "params/params.inc"
#undef CHOIR_PARAM
};
constexpr int kNumSpecs = static_cast<int>(Id::kCount);
static_assert(sizeof(kSpecs) / sizeof(kSpecs[0]) == kNumSpecs);

const char* TypeName(Type t) {
  switch (t) {
    case Type::kInt: return "int";
    case Type::kBool: return "bool";
    case Type::kString: return "string";
    case Type::kSeconds: return "seconds";
    case Type::kBytes: return "bytes";
    case Type::kEnum: return "enum";
  }
  return "?";
}

// "" when the number `value` lies in spec.allowed ("min..max", parsed by
// `parse` like the value; empty: any), else the reason.
template <typename Parse>
std::string CheckRange(const Spec& spec, std::string_view value, Parse parse) {
  const std::string_view allowed = spec.allowed;
  const size_t dots = allowed.find("..");
  if (dots == std::string_view::npos) return "";
  const auto v = parse(value), lo = parse(allowed.substr(0, dots)), hi = parse(allowed.substr(dots + 2));
  if (v && lo && hi && *lo <= *v && *v <= *hi) return "";
  return fmt::format("outside {}", allowed);
}

// Returns "" when `value` is valid for `spec`, else the reason.
std::string Validate(const Spec& spec, std::string_view value) {
  switch (spec.type) {
    case Type::kInt:
      if (!strings::ParseInt(value)) return "not an integer";
      return CheckRange(spec, value, [](std::string_view t) { return strings::ParseInt(t); });
    case Type::kBool:
      return strings::ParseBool(value) ? "" : "not a boolean (use 1/0, true/false, on/off)";
    case Type::kSeconds:
      if (!strings::ParseSeconds(value)) return "not a duration (e.g. 30, 250ms, 5m)";
      return CheckRange(spec, value, [](std::string_view t) { return strings::ParseSeconds(t); });
    case Type::kBytes:
      if (!strings::ParseBytes(value)) return "not a byte size (e.g. 4096, 64K, 16M)";
      return CheckRange(spec, value, [](std::string_view t) { return strings::ParseBytes(t); });
    case Type::kEnum: {
      const std::string v = strings::ToLower(strings::Trim(value));
      for (const std::string& allowed : strings::Split(spec.allowed, '|')) {
        if (v == allowed) return "";
      }
      return std::string("not one of ") + spec.allowed;
    }
    case Type::kString:
      if (spec.id == Id::kLogSubsys) {
        unsigned mask = 0;
        if (!log::ParseSubsysMask(value, &mask)) {
          return "not a list of subsystems (INIT,STORE,TCP,SHM,COLL,ALGO,TOPO,PARAMS,LAUNCH,DIAG,TORCH, ALL; ^ excludes)";
        }
      }
      return "";
  }
  return "unknown type";
}

struct Value {
  std::string text;
  SettingSource source = SettingSource::kDefault;
  std::string error;  // non-empty: `text` was rejected; the default applies
  std::string rejected_text;
  SettingSource rejected_source = SettingSource::kDefault;
};

class Registry {
 public:
  static Registry& Get() {
    static Registry* registry = new Registry();  // never destroyed: used until exit
    return *registry;
  }

  Value Lookup(Id id) {
    std::lock_guard<std::mutex> lock(mu_);
    EnsureLoaded();
    return values_[static_cast<int>(id)];
  }

  std::vector<Value> All() {
    std::lock_guard<std::mutex> lock(mu_);
    EnsureLoaded();
    return values_;
  }

  Status SetApi(std::string_view name, std::optional<std::string_view> value) {
    std::lock_guard<std::mutex> lock(mu_);
    const Spec* spec = Find(name);
    if (spec == nullptr) {
      return Status(Code::kInvalidSetting, "unknown setting '" + std::string(name) +
                                               "'; `choir doctor params` lists every setting");
    }
    if (value) {
      const std::string error = Validate(*spec, *value);
      if (!error.empty()) {
        return Status(Code::kInvalidSetting, std::string(spec->name) + "='" + std::string(*value) +
                                                 "' is " + error + ": " + spec->description);
      }
      api_[spec->name] = std::string(strings::Trim(*value));
    } else {
      api_.erase(spec->name);
    }
    loaded_ = false;
    return Status::Ok();
  }

  std::optional<std::string> ApiValue(std::string_view name) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = api_.find(std::string(name));
    if (it == api_.end()) return std::nullopt;
    return it->second;
  }

  void Reload() {
    std::lock_guard<std::mutex> lock(mu_);
    loaded_ = false;
  }

  Status FileStatus() {
    std::lock_guard<std::mutex> lock(mu_);
    EnsureLoaded();
    return file_status_;
  }

  static const Spec* Find(std::string_view name) {
    for (const Spec& s : kSpecs) {
      if (name == s.name) return &s;
    }
    return nullptr;
  }

 private:
  Registry() = default;

  void EnsureLoaded() {
    if (loaded_) return;
    loaded_ = true;
    std::map<std::string, std::string> file_values;
    file_status_ = Status::Ok();
    const char* env_file = std::getenv("CHOIR_CONFIG_FILE");
    std::string file_path = env_file ? env_file : "";
    if (auto it = api_.find("CHOIR_CONFIG_FILE"); it != api_.end()) file_path = it->second;
    if (!file_path.empty()) file_status_ = ReadConfigFile(file_path, &file_values);

    values_.assign(kNumSpecs, Value{});
    for (int i = 0; i < kNumSpecs; ++i) {
      const Spec& spec = kSpecs[i];
      Value& v = values_[i];
      v.text = spec.default_value;
      v.source = SettingSource::kDefault;
      auto consider = [&](const std::string& text, SettingSource source) {
        const std::string error = Validate(spec, text);
        if (error.empty()) {
          v.text = std::string(strings::Trim(text));
          if (spec.type == Type::kEnum) v.text = strings::ToLower(v.text);
          v.source = source;
          v.error.clear();
        } else {
          v.error = error;
          v.rejected_text = text;
          v.rejected_source = source;
        }
      };
      if (auto it = file_values.find(spec.name); it != file_values.end()) {
        consider(it->second, SettingSource::kConfigFile);
      }
      if (const char* env = std::getenv(spec.name)) consider(env, SettingSource::kEnvironment);
      if (auto it = api_.find(spec.name); it != api_.end()) consider(it->second, SettingSource::kApi);
    }
    ApplyLogging();
  }

  static Status ReadConfigFile(const std::string& path, std::map<std::string, std::string>* out) {
    // A regular file of bounded size: a FIFO or /dev/zero named here would
    // block every program that reads the settings, or fill its memory.
    auto text = files::ReadSmallFile(path, 1 << 20);
    if (!text.ok()) {
      return Status(Code::kBadConfigFile, "cannot read CHOIR_CONFIG_FILE: " + text.status().message());
    }
    std::istringstream in(*text);
    std::string line;
    int lineno = 0;
    while (std::getline(in, line)) {
      ++lineno;
      const std::string_view t = strings::Trim(line);
      if (t.empty() || t.front() == '#') continue;
      const size_t eq = t.find('=');
      if (eq == std::string_view::npos) {
        return Status(Code::kBadConfigFile, path + ":" + std::to_string(lineno) +
                                                ": expected KEY=VALUE, got '" + std::string(t) + "'");
      }
      const std::string key(strings::Trim(t.substr(0, eq)));
      if (Find(key) == nullptr) {
        return Status(Code::kBadConfigFile, path + ":" + std::to_string(lineno) +
                                                ": unknown setting '" + key + "'");
      }
      (*out)[key] = std::string(strings::Trim(t.substr(eq + 1)));
    }
    return Status::Ok();
  }

  void ApplyLogging() {
    log::Level level = log::Level::kWarn;
    if (log::ParseLevel(values_[static_cast<int>(Id::kLogLevel)].text, &level)) log::SetLevel(level);
    unsigned mask = log::ALL;  // the value was validated; the default is ALL
    if (log::ParseSubsysMask(values_[static_cast<int>(Id::kLogSubsys)].text, &mask)) log::SetSubsysMask(mask);
  }

  std::mutex mu_;
  bool loaded_ = false;
  std::vector<Value> values_;
  std::map<std::string, std::string> api_;
  Status file_status_;
};

}  // namespace

int64_t GetInt(Id id) {
  return strings::ParseInt(Registry::Get().Lookup(id).text).value_or(0);
}
bool GetBool(Id id) { return strings::ParseBool(Registry::Get().Lookup(id).text).value_or(false); }
double GetSeconds(Id id) {
  return strings::ParseSeconds(Registry::Get().Lookup(id).text).value_or(0);
}
uint64_t GetBytes(Id id) { return strings::ParseBytes(Registry::Get().Lookup(id).text).value_or(0); }
std::string GetString(Id id) { return Registry::Get().Lookup(id).text; }
SettingSource GetSource(Id id) { return Registry::Get().Lookup(id).source; }

Status CheckAll() {
  CHOIR_RETURN_IF_ERROR(Registry::Get().FileStatus());
  const std::vector<Value> values = Registry::Get().All();
  for (int i = 0; i < kNumSpecs; ++i) {
    const Value& v = values[i];
    if (v.error.empty()) continue;
    const Spec& spec = kSpecs[i];
    return Status(Code::kInvalidSetting,
                  std::string(spec.name) + "='" + v.rejected_text + "' (from " +
                      SettingSourceName(v.rejected_source) + ") is " + v.error + ". " +
                      spec.description);
  }
  return Status::Ok();
}

void Reload() { Registry::Get().Reload(); }

ScopedOverride::ScopedOverride(std::string_view name, std::string_view value) : name_(name) {
  if (auto prev = Registry::Get().ApiValue(name)) {
    had_previous_ = true;
    previous_ = *prev;
  }
  Status s = Registry::Get().SetApi(name, value);
  CHOIR_CHECK(s.ok());
}

ScopedOverride::~ScopedOverride() {
  if (had_previous_) {
    Registry::Get().SetApi(name_, previous_).IgnoreError();
  } else {
    Registry::Get().SetApi(name_, std::nullopt).IgnoreError();
  }
}

}  // namespace params

const char* SettingSourceName(SettingSource source) {
  switch (source) {
    case SettingSource::kDefault: return "default";
    case SettingSource::kConfigFile: return "config file";
    case SettingSource::kEnvironment: return "environment";
    case SettingSource::kApi: return "api";
  }
  return "?";
}

std::vector<SettingInfo> ListSettings() {
  std::vector<SettingInfo> out;
  const auto values = params::Registry::Get().All();
  for (int i = 0; i < params::kNumSpecs; ++i) {
    const params::Spec& spec = params::kSpecs[i];
    const params::Value& v = values[i];
    std::string error;
    if (!v.error.empty()) {
      error = "'" + v.rejected_text + "' from " + SettingSourceName(v.rejected_source) +
              " rejected: " + v.error;
    }
    // A secret never leaves the process through a listing: `choir doctor
    // params`, perf's --json and the cluster comparison show only whether
    // it is set.
    const bool secret = static_cast<params::Id>(i) == params::Id::kAuthSecret;
    std::string value = secret && !v.text.empty() ? std::string(kHiddenValue) : v.text;
    if (secret && !error.empty()) error = "rejected: " + v.error;
    out.push_back(SettingInfo{spec.name, params::TypeName(spec.type), spec.default_value,
                              spec.allowed, spec.description, std::move(value), v.source, error});
  }
  return out;
}

Status SetSetting(std::string_view name, std::string_view value) {
  return params::Registry::Get().SetApi(name, value);
}

void ClearSetting(std::string_view name) {
  params::Registry::Get().SetApi(name, std::nullopt).IgnoreError();
}

std::vector<std::string> UnknownSettingsInEnvironment() {
  std::vector<std::string> unknown;
  for (char** e = environ; e && *e; ++e) {
    const std::string_view entry(*e);
    if (!strings::StartsWith(entry, "CHOIR_")) continue;
    const std::string name(entry.substr(0, entry.find('=')));
    if (params::Registry::Find(name) == nullptr) unknown.push_back(name);
  }
  return unknown;
}

}  // namespace choir
