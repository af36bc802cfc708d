// `choir doctor params` and `choir doctor explain`: settings and error
// explanations.
//
//   choir doctor params [--json]         every setting, its effective value and source
//   choir doctor explain CODE            one error from the table (401, E401, CollectiveMismatch)
//   choir doctor explain --all [--markdown]   the whole table (docs/errors.md is this output)
//
// `choir doctor` itself (host checks, --cluster) lives in doctor_host.cc and
// doctor_cluster.cc.
//
// Thread-safety: runs on the main thread only.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "base/json_text.h"
#include "base/strings.h"
#include "choir/settings.h"
#include "choir/status.h"
#include "params/params.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

// Splits `text` into lines of at most `width` characters at spaces (a longer
// word gets a line of its own).
std::vector<std::string> Wrap(std::string_view text, size_t width) {
  std::vector<std::string> lines;
  std::string line;
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t end = std::min(text.find(' ', pos), text.size());
    const std::string_view word = text.substr(pos, end - pos);
    if (!line.empty() && line.size() + 1 + word.size() > width) {
      lines.push_back(std::move(line));
      line.clear();
    }
    if (!line.empty()) line += ' ';
    line += word;
    pos = end + 1;
  }
  if (!line.empty() || lines.empty()) lines.push_back(std::move(line));
  return lines;
}

// The closest known setting name, when it is close enough to be a typo of `name`.
std::string SuggestSetting(std::string_view name, const std::vector<SettingInfo>& settings) {
  std::string best;
  size_t best_distance = 4;  // more edits than this is not a typo
  for (const SettingInfo& s : settings) {
    const size_t d = strings::EditDistance(name, s.name);
    if (d < best_distance) {
      best_distance = d;
      best = s.name;
    }
  }
  return best;
}

class DoctorParamsCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app.add_flag("--json", json_, "Print machine-readable JSON instead of a table.");
    app.footer(
        "Precedence: api > environment > config file (CHOIR_CONFIG_FILE) > default. "
        "Exit code 1 when a setting has a value that was rejected.");
  }

  int Run() override {
    const std::vector<SettingInfo> settings = ListSettings();
    const std::vector<std::string> unknown = UnknownSettingsInEnvironment();
    std::vector<std::string> invalid;
    for (const SettingInfo& s : settings) {
      if (!s.error.empty()) invalid.push_back(s.name);
    }
    // A config file that cannot be read is ignored by this listing (every
    // source then shows as default) but fails every rank: say so.
    const Status file = params::CheckAll();
    const bool file_bad = file.code() == Code::kBadConfigFile;
    if (json_) {
      PrintJson(settings, unknown, invalid.empty() && !file_bad);
    } else {
      PrintTable(settings, unknown);
    }
    if (file_bad) return ReportError(file);
    if (invalid.empty()) return kExitOk;
    std::string names;
    for (const std::string& n : invalid) names += (names.empty() ? "" : ", ") + n;
    const bool one = invalid.size() == 1;
    const Status status(
        Code::kInvalidSetting,
        fmt::format("{} {} rejected (see '! INVALID' above); fix or unset {}. Until then the "
                    "value from the next source in precedence is used",
                    names, one ? "has a value that was" : "have values that were",
                    one ? "it" : "them"));
    return ReportError(status);
  }

 private:
  static void PrintTable(const std::vector<SettingInfo>& settings,
                         const std::vector<std::string>& unknown) {
    constexpr size_t kMaxValueWidth = 16;
    constexpr size_t kLineWidth = 120;
    size_t name_width = 4;
    size_t value_width = 5;
    for (const SettingInfo& s : settings) {
      name_width = std::max(name_width, s.name.size());
      value_width = std::max(value_width, std::min(s.value.size(), kMaxValueWidth));
    }
    constexpr size_t kSourceWidth = 11;  // "environment"
    const size_t description_column = name_width + value_width + kSourceWidth + 6;
    const size_t description_width =
        std::max<size_t>(40, kLineWidth > description_column ? kLineWidth - description_column : 0);
    const std::string indent(description_column, ' ');

    fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "NAME", name_width, "VALUE", value_width, "SOURCE",
               kSourceWidth, "DESCRIPTION");
    for (const SettingInfo& s : settings) {
      std::string description = s.description;
      if (!s.allowed.empty()) {
        description += (s.allowed.find("..") != std::string::npos ? " Range: " : " One of: ") + s.allowed + ".";
      }
      description += " Type " + s.type + ", default '" + s.default_value + "'.";
      const std::vector<std::string> lines = Wrap(description, description_width);
      const std::string shown_value = s.value.empty() ? "\"\"" : s.value;
      if (shown_value.size() > value_width) {
        // A long value gets its own line so the columns stay aligned.
        fmt::print("{:<{}}  {}\n", s.name, name_width, shown_value);
        fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", "", name_width, "", value_width,
                   SettingSourceName(s.source), kSourceWidth, lines[0]);
      } else {
        fmt::print("{:<{}}  {:<{}}  {:<{}}  {}\n", s.name, name_width, shown_value, value_width,
                   SettingSourceName(s.source), kSourceWidth, lines[0]);
      }
      for (size_t i = 1; i < lines.size(); ++i) fmt::print("{}{}\n", indent, lines[i]);
      if (!s.error.empty()) {
        fmt::print("{:<{}}  ! INVALID: {}; in effect: '{}' from {}\n", "", name_width, s.error,
                   s.value, SettingSourceName(s.source));
      }
    }
    for (const std::string& name : unknown) {
      const std::string suggestion = SuggestSetting(name, settings);
      fmt::print("warning: {} is set in the environment but is not a choir setting{}\n", name,
                 suggestion.empty() ? "" : "; did you mean " + suggestion + "?");
    }
  }

  static void PrintJson(const std::vector<SettingInfo>& settings,
                        const std::vector<std::string>& unknown, bool ok) {
    nlohmann::ordered_json out;
    out["ok"] = ok;
    nlohmann::ordered_json rows = nlohmann::ordered_json::array();
    for (const SettingInfo& s : settings) {
      rows.push_back({{"name", s.name},
                      {"value", s.value},
                      {"source", SettingSourceName(s.source)},
                      {"type", s.type},
                      {"default", s.default_value},
                      {"allowed", s.allowed},
                      {"description", s.description},
                      {"error", s.error}});
    }
    out["settings"] = std::move(rows);
    out["unknown_environment"] = unknown;
    fmt::print("{}\n", JsonDump(out, 2));
  }

  bool json_ = false;
};

class DoctorExplainCommand : public Subcommand {
 public:
  void Configure(CLI::App& app) override {
    app_ = &app;
    app.add_option("code", code_, "Error number or name: 401, E401 or CollectiveMismatch.");
    app.add_flag("--all", all_, "Explain every error in the table.");
    app.add_flag("--markdown", markdown_, "Print Markdown (docs/errors.md is `--all --markdown`).");
  }

  int Run() override {
    if (all_ && !code_.empty()) {
      return ReportUsageError(*app_, "give either an error code or --all, not both");
    }
    if (all_) {
      if (markdown_) {
        PrintMarkdownDocument();
      } else {
        bool first = true;
        for (const ErrorInfo& info : AllErrorInfos()) {
          if (info.code == Code::kOk) continue;
          if (!first) fmt::print("\n");
          first = false;
          PrintText(info);
        }
      }
      return kExitOk;
    }
    if (code_.empty()) {
      return ReportUsageError(*app_,
                              "give an error code (401, E401 or CollectiveMismatch) or --all");
    }
    const ErrorInfo* info = FindErrorInfo(std::string_view(code_));
    if (info == nullptr) {
      return ReportUsageError(
          *app_, fmt::format("'{}' is not a choir error code; give a number (401), an E-number "
                             "(E401) or a name (CollectiveMismatch); 'choir doctor explain --all' "
                             "lists them all",
                             code_));
    }
    if (markdown_) {
      PrintMarkdownEntry(*info);
    } else {
      PrintText(*info);
    }
    return kExitOk;
  }

 private:
  static void PrintText(const ErrorInfo& info) {
    constexpr size_t kWidth = 78;
    fmt::print("E{} {} ({})\n", info.number, info.name,
               info.retryable ? "retryable: may succeed if tried again" : "not retryable");
    for (const std::string& line : Wrap(info.summary, kWidth)) fmt::print("  {}\n", line);
    fmt::print("Likely causes:\n");
    for (const std::string& line : Wrap(info.causes, kWidth)) fmt::print("  {}\n", line);
    fmt::print("Fix:\n");
    for (const std::string& line : Wrap(info.fix, kWidth)) fmt::print("  {}\n", line);
  }

  static std::string EscapeCell(std::string_view text) {
    std::string out;
    for (char c : text) {
      if (c == '|') out += '\\';
      out += c;
    }
    return out;
  }

  static std::string Anchor(const ErrorInfo& info) {
    std::string anchor = fmt::format("e{}-{}", info.number, info.name);
    std::transform(anchor.begin(), anchor.end(), anchor.begin(),
                   [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
    return anchor;
  }

  static void PrintMarkdownEntry(const ErrorInfo& info) {
    fmt::print("## E{} {}\n\n", info.number, info.name);
    fmt::print("{}{}\n\n", info.summary,
               info.retryable ? " Retryable: the operation may succeed if tried again." : "");
    fmt::print("**Likely causes.** {}\n\n", info.causes);
    fmt::print("**Fix.** {}\n", info.fix);
  }

  static void PrintMarkdownDocument() {
    fmt::print(
        "# choir error codes\n\n"
        "<!-- Generated by `choir doctor explain --all --markdown` from "
        "include/choir/error_codes.h. Do not edit by hand: a test fails when this file and the "
        "table differ. -->\n\n"
        "Every choir error prints as `E<number> <Name>: <message>`, where the message names "
        "what failed (rank, peer, address, collective, elapsed time). "
        "`choir doctor explain CODE` prints one entry of this page. Numbers are stable: a number "
        "is never reused for another error.\n\n"
        "| Numbers | Area |\n"
        "|---|---|\n"
        "| 1xx | bad input: arguments, settings, config file |\n"
        "| 2xx | rendezvous store |\n"
        "| 3xx | connections and transports |\n"
        "| 4xx | collectives |\n"
        "| 5xx | system and internal |\n"
        "| 6xx | launcher and tools |\n\n"
        "*Retryable* errors may succeed when the whole operation is tried again "
        "(a peer that was not up yet, a full /dev/shm that was cleaned).\n\n"
        "| Code | Name | Retryable | Summary |\n"
        "|---|---|---|---|\n");
    for (const ErrorInfo& info : AllErrorInfos()) {
      if (info.code == Code::kOk) continue;
      fmt::print("| [E{}](#{}) | {} | {} | {} |\n", info.number, Anchor(info), info.name,
                 info.retryable ? "yes" : "no", EscapeCell(info.summary));
    }
    for (const ErrorInfo& info : AllErrorInfos()) {
      if (info.code == Code::kOk) continue;
      fmt::print("\n");
      PrintMarkdownEntry(info);
    }
  }

  CLI::App* app_ = nullptr;
  std::string code_;
  bool all_ = false;
  bool markdown_ = false;
};

}  // namespace

CHOIR_REGISTER_SUBCOMMAND(DoctorParamsCommand, "doctor params",
                          "Print every CHOIR_* setting: effective value, source, description.");
CHOIR_REGISTER_SUBCOMMAND(DoctorExplainCommand, "doctor explain",
                          "Explain an error code: summary, likely causes and fix.");

}  // namespace choir::cli
