// How `choir` subcommands plug into the binary, and helpers they share.
//
// Every subcommand lives in its own file under tools/choir/ and registers
// itself with one line at namespace scope:
//
//   CHOIR_REGISTER_SUBCOMMAND(PerfCommand, "perf", "Measure bus bandwidth");
//
// Nested commands use a space-separated path ("doctor params"); the parent
// ("doctor") is declared once with CHOIR_REGISTER_COMMAND_GROUP. main.cc
// builds the CLI11 tree from the registry, so adding a subcommand never edits
// main.cc (CMake compiles every tools/choir/*.cc into the binary, which keeps
// the registration objects alive: they are not in a static library the linker
// could drop).
//
// Exit codes shared by every subcommand: 0 success, 1 failure (the Status is
// printed), 2 usage error ("E602 UsageError: ..." plus a --help hint),
// 127 a program that could not be executed; `choir run` also passes through
// its ranks' exit codes.
//
// Thread-safety: the registry is filled during static initialization (before
// main) and only read afterwards; the helpers are called from the main thread.
#ifndef CHOIR_TOOLS_CHOIR_SUBCOMMAND_H_
#define CHOIR_TOOLS_CHOIR_SUBCOMMAND_H_

#include <CLI/CLI.hpp>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "choir/settings.h"
#include "choir/status.h"

namespace choir::cli {

inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitCannotExecute = 127;

// One subcommand. An instance is created for every registered subcommand
// before parsing (so it can bind its flags to members); only the one the user
// named is Run().
class Subcommand {
 public:
  virtual ~Subcommand() = default;
  // Declares flags and positionals on `app`, which already has its name and
  // description.
  virtual void Configure(CLI::App& app) = 0;
  // Runs after a successful parse and returns the process exit code.
  virtual int Run() = 0;
};

using SubcommandFactory = std::unique_ptr<Subcommand> (*)();

struct SubcommandSpec {
  std::string path;           // "run", "doctor params"
  std::string description;    // one line for --help
  SubcommandFactory factory;  // nullptr for a group that only holds subcommands
};

// Every registered subcommand and group, in registration order.
const std::vector<SubcommandSpec>& RegisteredSubcommands();

// Adds one entry to the registry; used through the macros below.
class SubcommandRegistration {
 public:
  SubcommandRegistration(const char* path, const char* description, SubcommandFactory factory);
};

// Prints "E602 UsageError: <what>" and a hint to run `<command path> --help`
// to stderr; returns kExitUsage.
int ReportUsageError(const CLI::App& app, std::string_view what);
// Prints status.ToString() to stderr; returns kExitFailure.
int ReportError(const Status& status);
// ReportUsageError for a UsageError (with the --help hint), else ReportError.
int ReportFailure(const CLI::App& app, const Status& status);
// "choir doctor explain" for the app of `choir doctor explain`.
std::string CommandPath(const CLI::App& app);

// The settings row called `name` (from choir::ListSettings()), if it exists.
std::optional<SettingInfo> FindSetting(std::string_view name);
// True when the setting's value was given by the user (environment, config
// file or API) rather than taken from the table's default.
bool IsSetByUser(const SettingInfo& setting);

// OutOfMemory when `local_ranks` ranks of this host cannot have their
// shared-memory segments with the CHOIR_SHM_* settings in effect
// (transport::Segment::CheckRoom); Ok when `transport` (the ranks' transport,
// "" for CHOIR_TRANSPORT) is tcp and they make none.
Status CheckSharedMemoryRoom(int local_ranks, std::string_view transport);

}  // namespace choir::cli

#define CHOIR_CLI_CONCAT_INNER(a, b) a##b
#define CHOIR_CLI_CONCAT(a, b) CHOIR_CLI_CONCAT_INNER(a, b)

// Registers `Class` (default-constructible, derived from Subcommand) as the
// subcommand at `path`.
#define CHOIR_REGISTER_SUBCOMMAND(Class, path, description)           \
  static const ::choir::cli::SubcommandRegistration CHOIR_CLI_CONCAT( \
      choir_subcommand_registration_, __LINE__)(                      \
      path, description,                                              \
      []() -> std::unique_ptr<::choir::cli::Subcommand> { return std::make_unique<Class>(); })

// Declares a command that only groups subcommands ("doctor"); running it
// without one of them is a usage error.
#define CHOIR_REGISTER_COMMAND_GROUP(path, description)               \
  static const ::choir::cli::SubcommandRegistration CHOIR_CLI_CONCAT( \
      choir_subcommand_registration_, __LINE__)(path, description, nullptr)

#endif  // CHOIR_TOOLS_CHOIR_SUBCOMMAND_H_
