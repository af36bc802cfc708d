#include "subcommand.h"

#include <fmt/format.h>

#include <cstdio>

#include "params/params.h"
#include "transport/shm/segment.h"

namespace choir::cli {
namespace {

// Filled by SubcommandRegistration constructors before main() runs.
std::vector<SubcommandSpec>& MutableRegistry() {
  static auto* registry = new std::vector<SubcommandSpec>();  // never destroyed: read until exit
  return *registry;
}

}  // namespace

const std::vector<SubcommandSpec>& RegisteredSubcommands() { return MutableRegistry(); }

SubcommandRegistration::SubcommandRegistration(const char* path, const char* description,
                                               SubcommandFactory factory) {
  MutableRegistry().push_back(SubcommandSpec{path, description, factory});
}

std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  for (const CLI::App* parent = app.get_parent(); parent != nullptr;
       parent = parent->get_parent()) {
    path = parent->get_name() + " " + path;
  }
  return path;
}

int ReportUsageError(const CLI::App& app, std::string_view what) {
  const Status status(Code::kUsageError, std::string(what));
  fmt::print(stderr, "{}\nRun '{} --help' to see the flags and arguments.\n", status.ToString(),
             CommandPath(app));
  return kExitUsage;
}

int ReportFailure(const CLI::App& app, const Status& status) {
  return status.code() == Code::kUsageError ? ReportUsageError(app, status.message()) : ReportError(status);
}

Status CheckSharedMemoryRoom(int local_ranks, std::string_view transport) {
  if ((transport.empty() ? params::GetString(params::Id::kTransport) : std::string(transport)) == "tcp") {
    return Status::Ok();
  }
  return transport::Segment::CheckRoom(local_ranks, params::GetBytes(params::Id::kShmRingBytes),
                                       params::GetBytes(params::Id::kShmSlotBytes),
                                       params::GetBytes(params::Id::kShmPipeBytes));
}

int ReportError(const Status& status) {
  fmt::print(stderr, "{}\n", status.ToString());
  return kExitFailure;
}

std::optional<SettingInfo> FindSetting(std::string_view name) {
  for (SettingInfo& setting : ListSettings()) {
    if (setting.name == name) return std::move(setting);
  }
  return std::nullopt;
}

bool IsSetByUser(const SettingInfo& setting) { return setting.source != SettingSource::kDefault; }

}  // namespace choir::cli
