#include "testing/multi_rank.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace choir::testing {

CommOptions TransportOptions(const std::string& transport, std::chrono::milliseconds timeout) {
  CommOptions o;
  o.transport = transport;
  o.timeout = timeout;
  return o;
}

void ExpectAllOk(const std::vector<RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].create.ok()) << "rank " << r << ": " << results[r].create.ToString();
    EXPECT_TRUE(results[r].run.ok()) << "rank " << r << ": " << results[r].run.ToString();
  }
}

std::string UniqueName(const std::string& prefix) {
  static std::atomic<int> counter{0};
  return prefix + "-" + std::to_string(counter.fetch_add(1));
}

std::vector<RankResult> RunRanks(int n, const std::function<Status(Communicator&)>& fn,
                                 CommOptions options, std::shared_ptr<Store> store) {
  if (options.name == "world") options.name = UniqueName("test");
  return RunRanks(n, fn, [&](int) { return options; }, std::move(store));
}

std::vector<RankResult> RunRanks(int n, const std::function<Status(Communicator&)>& fn,
                                 const std::function<CommOptions(int rank)>& options_for_rank,
                                 std::shared_ptr<Store> store) {
  if (store == nullptr) store = NewMemoryStore();
  const std::string name = UniqueName("test");
  std::vector<RankResult> results(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      CommOptions options = options_for_rank(r);
      if (options.name == "world") options.name = name;
      auto comm = Communicator::Create(store, r, n, options);
      RankResult& out = results[static_cast<size_t>(r)];
      if (!comm.ok()) {
        out.create = comm.status();
        return;
      }
      out.run = fn(**comm);
    });
  }
  for (auto& t : threads) t.join();
  return results;
}

}  // namespace choir::testing
