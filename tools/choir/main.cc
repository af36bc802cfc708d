// Entry point of the `choir` command-line tool: builds the CLI11 command tree
// from the subcommands that registered themselves (see subcommand.h), parses
// the command line, and runs the one the user named.
//
// Thread-safety: single-threaded until a subcommand starts threads of its own.
#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "choir/version.h"
#include "subcommand.h"

namespace choir::cli {
namespace {

// The innermost subcommand the parser reached, also after a parse error, so
// that usage errors point at the right --help.
CLI::App* DeepestParsed(CLI::App* app) {
  for (CLI::App* sub : app->get_subcommands()) {
    if (sub->parsed()) return DeepestParsed(sub);
  }
  return app;
}

// "explain, params" for `choir doctor`.
std::string SubcommandNames(CLI::App& app) {
  std::string names;
  for (const CLI::App* sub : app.get_subcommands({})) {
    names += (names.empty() ? "" : ", ") + sub->get_name();
  }
  return names;
}

int Main(int argc, char** argv) {
  CLI::App app{"choir: collective communication for distributed training on CPU clusters.",
               "choir"};
  app.require_subcommand(1);
  app.set_version_flag("--version", BuildString());
  app.footer(
      "Exit codes: 0 success, 1 failure (an E<number> error is printed), 2 usage error, "
      "127 program not executable; `choir run` returns the exit code of the first failed rank.");

  // Parents sort before their children ("doctor" < "doctor params").
  std::vector<SubcommandSpec> specs = RegisteredSubcommands();
  std::stable_sort(
      specs.begin(), specs.end(),
      [](const SubcommandSpec& a, const SubcommandSpec& b) { return a.path < b.path; });

  std::map<std::string, CLI::App*> apps_by_path;
  std::map<const CLI::App*, std::unique_ptr<Subcommand>> commands;
  for (const SubcommandSpec& spec : specs) {
    const size_t space = spec.path.rfind(' ');
    CLI::App* parent = &app;
    std::string leaf = spec.path;
    if (space != std::string::npos) {
      const std::string parent_path = spec.path.substr(0, space);
      auto it = apps_by_path.find(parent_path);
      if (it == apps_by_path.end()) {
        it = apps_by_path.emplace(parent_path, app.add_subcommand(parent_path, "")).first;
      }
      parent = it->second;
      leaf = spec.path.substr(space + 1);
      // A parent that runs by itself may still be given a child; a pure group needs one.
      if (commands.count(parent) != 0) parent->require_subcommand(0, 1);
    }
    CLI::App* sub = parent->add_subcommand(leaf, spec.description);
    apps_by_path[spec.path] = sub;
    if (spec.factory != nullptr) {
      std::unique_ptr<Subcommand> command = spec.factory();
      command->Configure(*sub);
      commands[sub] = std::move(command);
    } else {
      sub->require_subcommand(1);
    }
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    CLI::App* where = DeepestParsed(&app);
    if (dynamic_cast<const CLI::RequiredError*>(&e) != nullptr &&
        where->get_require_subcommand_min() > 0 && where->get_subcommands().empty()) {
      return ReportUsageError(*where, "choose a subcommand: " + SubcommandNames(*where));
    }
    return ReportUsageError(*where, e.what());
  }

  CLI::App* chosen = DeepestParsed(&app);
  auto it = commands.find(chosen);
  if (it == commands.end()) return ReportUsageError(*chosen, "choose a subcommand");
  return it->second->Run();
}

}  // namespace
}  // namespace choir::cli

int main(int argc, char** argv) { return choir::cli::Main(argc, argv); }
