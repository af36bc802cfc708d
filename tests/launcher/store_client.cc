// Rank program for the launcher tests: proves that a rank started by
// `choir run` can reach the choir store through CHOIR_STORE_ADDR, and that
// all ranks of the job (on every node) share it.
//
// Each rank adds 1 to "arrived", publishes "rank/<RANK>", waits for every
// rank's key, and prints "store ok rank R of W arrived N". Exits 1 with the
// error on failure.
//
// Thread-safety: single-threaded program.
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "base/socket.h"
#include "base/strings.h"
#include "choir/store.h"

namespace {

// A user program reads the launcher's contract from its environment.
std::string Env(const char* name) {
  const char* value = std::getenv(name);
  return value != nullptr ? value : "";
}

int Fail(const choir::Status& status) {
  std::fprintf(stderr, "store client: %s\n", status.ToString().c_str());
  return 1;
}

}  // namespace

int main() {
  const auto rank = choir::strings::ParseInt(Env("RANK"));
  const auto world = choir::strings::ParseInt(Env("WORLD_SIZE"));
  if (!rank || !world) {
    return Fail(choir::Status(choir::Code::kInvalidWorldSize, "RANK/WORLD_SIZE not set"));
  }
  choir::TcpStoreClientOptions options;
  if (choir::Status s =
          choir::net::SplitHostPort(Env("CHOIR_STORE_ADDR"), &options.host, &options.port);
      !s.ok()) {
    return Fail(s);
  }
  options.job_id = Env("CHOIR_JOB_ID");
  options.rank = static_cast<int>(*rank);
  options.timeout = std::chrono::milliseconds(5000);
  auto store = choir::ConnectTcpStore(options);
  if (!store.ok()) return Fail(store.status());

  if (auto added = (*store)->Add("arrived", 1); !added.ok()) return Fail(added.status());
  if (auto s = (*store)->Set("rank/" + std::to_string(*rank), "here"); !s.ok()) return Fail(s);
  std::vector<std::string> keys;
  for (int64_t r = 0; r < *world; ++r) keys.push_back("rank/" + std::to_string(r));
  if (auto s = (*store)->Wait(keys, std::chrono::milliseconds(5000)); !s.ok()) return Fail(s);
  auto arrived = (*store)->Get("arrived");
  if (!arrived.ok()) return Fail(arrived.status());
  std::printf("store ok rank %lld of %lld arrived %s\n", static_cast<long long>(*rank),
              static_cast<long long>(*world), arrived->c_str());
  return 0;
}
