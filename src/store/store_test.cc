// The behaviour every Store must share, run against all four implementations.
#include "choir/store.h"

#include <gtest/gtest.h>

#include <atomic>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/store_internal.h"
#include "store/store_test_util.h"

namespace choir {
namespace {

using std::chrono::milliseconds;
using store::testing::Stopwatch;
using store::testing::TempDir;

// One shared key space reachable through several handles ("ranks").
class StoreEnv {
 public:
  virtual ~StoreEnv() = default;
  // Another handle on the same keys, as a different rank would hold.
  virtual std::shared_ptr<Store> NewHandle() = 0;
};

class MemoryEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> NewHandle() override { return store_; }

 private:
  std::shared_ptr<Store> store_ = NewMemoryStore();
};

class FileEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> NewHandle() override {
    auto store = NewFileStore(dir_.path() + "/store");
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? *store : nullptr;
  }

 private:
  TempDir dir_;
};

class TcpEnv : public StoreEnv {
 public:
  TcpEnv() {
    auto server = TcpStoreServer::Start({.host = "127.0.0.1", .port = 0, .job_id = "test"});
    EXPECT_TRUE(server.ok()) << server.status().ToString();
    if (server.ok()) server_ = std::move(server).value();
  }
  std::shared_ptr<Store> NewHandle() override {
    if (server_ == nullptr) return nullptr;
    auto store = ConnectTcpStore({.host = "127.0.0.1",
                                  .port = server_->port(),
                                  .job_id = "test",
                                  .rank = next_rank_++,
                                  .timeout = milliseconds(5000)});
    EXPECT_TRUE(store.ok()) << store.status().ToString();
    return store.ok() ? *store : nullptr;
  }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  int next_rank_ = 0;
};

class PrefixEnv : public StoreEnv {
 public:
  std::shared_ptr<Store> NewHandle() override { return NewPrefixStore("comm1", base_); }

 private:
  std::shared_ptr<Store> base_ = NewMemoryStore();
};

std::unique_ptr<StoreEnv> MakeEnv(const std::string& kind) {
  if (kind == "memory") return std::make_unique<MemoryEnv>();
  if (kind == "file") return std::make_unique<FileEnv>();
  if (kind == "tcp") return std::make_unique<TcpEnv>();
  return std::make_unique<PrefixEnv>();
}

class StoreTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    env_ = MakeEnv(GetParam());
    store_ = env_->NewHandle();
    ASSERT_NE(store_, nullptr);
  }
  void TearDown() override {
    store_.reset();
    env_.reset();
  }

  std::unique_ptr<StoreEnv> env_;
  std::shared_ptr<Store> store_;
};

TEST_P(StoreTest, SetThenGetReturnsLatestValue) {
  ASSERT_TRUE(store_->Set("k", "v1").ok());
  EXPECT_EQ(store_->Get("k").value(), "v1");
  ASSERT_TRUE(store_->Set("k", "v2").ok());
  EXPECT_EQ(store_->Get("k").value(), "v2");
  ASSERT_TRUE(store_->Set("empty", "").ok());
  EXPECT_EQ(store_->Get("empty").value(), "");
}

TEST_P(StoreTest, GetOfMissingKeyIsKeyNotFound) {
  const auto value = store_->Get("nope");
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), Code::kKeyNotFound);
  EXPECT_NE(value.status().message().find("nope"), std::string::npos);
}

TEST_P(StoreTest, ValuesAreArbitraryBytes) {
  std::string all_bytes;
  for (int i = 0; i < 256; ++i) all_bytes += static_cast<char>(i);
  all_bytes += std::string("\0\0tail\0", 7);
  ASSERT_TRUE(store_->Set("bin", all_bytes).ok());
  EXPECT_EQ(store_->Get("bin").value(), all_bytes);
}

TEST_P(StoreTest, KeysAreArbitraryBytesAndDistinct) {
  const std::vector<std::string> keys = {
      "a/b", "a%2Fb", "a.b", "a_b", ".", "..", "../escape", "/abs", "A", "a", "", " ", "%", "k.a",
      "h.", std::string("nul\0key", 7), "\xff\xfe", "\xe2\x82\xac",
      // Long keys (leaving room for a prefix store's prefix): hashed file names.
      std::string(4000, 'x'), std::string(3999, 'x') + "y"};
  for (size_t i = 0; i < keys.size(); ++i) {
    ASSERT_TRUE(store_->Set(keys[i], "value" + std::to_string(i)).ok()) << i;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(store_->Get(keys[i]).value(), "value" + std::to_string(i)) << i;
  }
  EXPECT_TRUE(store_->Check(keys).value());
}

TEST_P(StoreTest, OneMebibyteValueRoundTrips) {
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>((i * 131 + 7) & 0xff);
  ASSERT_TRUE(store_->Set("big", big).ok());
  EXPECT_EQ(store_->Get("big").value(), big);
}

TEST_P(StoreTest, OversizedKeysAndValuesAreInvalidArgument) {
  const std::string long_key(store::kMaxKeyBytes + 1, 'k');
  EXPECT_EQ(store_->Set(long_key, "v").code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->Get(long_key).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->Add(long_key, 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->Wait({"ok", long_key}, milliseconds(10)).code(), Code::kInvalidArgument);
  const std::string huge(store::kMaxValueBytes + 1, 'v');
  EXPECT_EQ(store_->Set("k", huge).code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->CompareSet("k", "", huge).status().code(), Code::kInvalidArgument);
}

TEST_P(StoreTest, AddStartsFromZeroAndAccumulates) {
  EXPECT_EQ(store_->Add("n", 5).value(), 5);
  EXPECT_EQ(store_->Add("n", -7).value(), -2);
  EXPECT_EQ(store_->Add("n", 0).value(), -2);
  EXPECT_EQ(store_->Get("n").value(), "-2");
  ASSERT_TRUE(store_->Set("m", "40").ok());
  EXPECT_EQ(store_->Add("m", 2).value(), 42);
}

TEST_P(StoreTest, AddOnTextOrOverflowIsInvalidArgument) {
  ASSERT_TRUE(store_->Set("text", "hello").ok());
  EXPECT_EQ(store_->Add("text", 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->Get("text").value(), "hello");
  ASSERT_TRUE(store_->Set("max", std::to_string(INT64_MAX)).ok());
  EXPECT_EQ(store_->Add("max", 1).status().code(), Code::kInvalidArgument);
  EXPECT_EQ(store_->Add("max", -1).value(), INT64_MAX - 1);
}

TEST_P(StoreTest, CompareSetSwapsOnlyOnMatch) {
  // Missing key and non-empty expectation: nothing stored.
  EXPECT_EQ(store_->CompareSet("c", "x", "y").value(), "");
  EXPECT_FALSE(store_->Check({"c"}).value());
  // Missing key and empty expectation: created.
  EXPECT_EQ(store_->CompareSet("c", "", "first").value(), "first");
  // Mismatch: the current value comes back unchanged.
  EXPECT_EQ(store_->CompareSet("c", "wrong", "second").value(), "first");
  EXPECT_EQ(store_->Get("c").value(), "first");
  // Match: swapped.
  EXPECT_EQ(store_->CompareSet("c", "first", "second").value(), "second");
  EXPECT_EQ(store_->Get("c").value(), "second");
}

TEST_P(StoreTest, DeleteReportsWhetherKeyExisted) {
  ASSERT_TRUE(store_->Set("d", "1").ok());
  EXPECT_TRUE(store_->Delete("d").value());
  EXPECT_FALSE(store_->Delete("d").value());
  EXPECT_EQ(store_->Get("d").status().code(), Code::kKeyNotFound);
}

TEST_P(StoreTest, CheckIsTrueOnlyWhenEveryKeyExists) {
  EXPECT_TRUE(store_->Check({}).value());
  ASSERT_TRUE(store_->Set("x", "1").ok());
  EXPECT_TRUE(store_->Check({"x"}).value());
  EXPECT_FALSE(store_->Check({"x", "y"}).value());
  ASSERT_TRUE(store_->Set("y", "2").ok());
  EXPECT_TRUE(store_->Check({"x", "y"}).value());
}

TEST_P(StoreTest, WaitReturnsAtOnceWhenKeysExist) {
  ASSERT_TRUE(store_->Set("w", "1").ok());
  Stopwatch watch;
  EXPECT_TRUE(store_->Wait({"w"}, milliseconds(0)).ok());
  EXPECT_TRUE(store_->Wait({}, milliseconds(0)).ok());
  EXPECT_TRUE(store_->Wait({"w"}, milliseconds(1000)).ok());
  EXPECT_LT(watch.Elapsed(), milliseconds(500));
}

TEST_P(StoreTest, WaitWakesWhenAnotherRankSetsTheKeys) {
  std::shared_ptr<Store> other = env_->NewHandle();
  ASSERT_NE(other, nullptr);
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(50));
    EXPECT_TRUE(other->Set("late1", "a").ok());
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_EQ(other->Add("late2", 3).value(), 3);
  });
  Stopwatch watch;
  const Status status = store_->Wait({"late1", "late2"}, milliseconds(1500));
  const milliseconds elapsed = watch.Elapsed();
  setter.join();
  EXPECT_TRUE(status.ok()) << status.ToString();
  EXPECT_LT(elapsed, milliseconds(1000));
  EXPECT_EQ(store_->WaitGet("late2", milliseconds(100)).value(), "3");
}

TEST_P(StoreTest, WaitTimeoutNamesTheMissingKeys) {
  ASSERT_TRUE(store_->Set("present", "1").ok());
  Stopwatch watch;
  const Status status = store_->Wait({"present", "absent_one", "absent_two"}, milliseconds(150));
  const milliseconds elapsed = watch.Elapsed();
  ASSERT_EQ(status.code(), Code::kStoreTimeout) << status.ToString();
  // (A prefix store's message names the full keys, prefix included.)
  EXPECT_NE(status.message().find("absent_one'"), std::string::npos) << status.message();
  EXPECT_NE(status.message().find("absent_two'"), std::string::npos) << status.message();
  EXPECT_EQ(status.message().find("present'"), std::string::npos) << status.message();
  EXPECT_GE(elapsed, milliseconds(140));
  EXPECT_LT(elapsed, milliseconds(1000));

  const auto value = store_->WaitGet("absent_one", milliseconds(0));
  EXPECT_EQ(value.status().code(), Code::kStoreTimeout);
  // The store still works after a timed-out Wait.
  ASSERT_TRUE(store_->Set("absent_one", "now").ok());
  EXPECT_EQ(store_->WaitGet("absent_one", milliseconds(100)).value(), "now");
}

TEST_P(StoreTest, ConcurrentAddsFromManyRanksSumExactly) {
  constexpr int kThreads = 8;
  constexpr int kAddsPerThread = 100;
  std::vector<std::shared_ptr<Store>> handles;
  for (int t = 0; t < kThreads; ++t) handles.push_back(env_->NewHandle());
  std::vector<std::vector<int64_t>> seen(kThreads);
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kAddsPerThread; ++i) {
        const auto v = handles[t]->Add("counter", 1);
        if (!v.ok()) {
          failures.fetch_add(1);
          continue;
        }
        seen[t].push_back(*v);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(store_->Get("counter").value(), std::to_string(kThreads * kAddsPerThread));
  // Every intermediate value was handed out exactly once.
  std::set<int64_t> all;
  for (const auto& values : seen) all.insert(values.begin(), values.end());
  EXPECT_EQ(all.size(), static_cast<size_t>(kThreads * kAddsPerThread));
}

TEST_P(StoreTest, OneHandleIsSafeFromManyThreads) {
  constexpr int kThreads = 4;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 50; ++i) {
        EXPECT_TRUE(store_->Add("shared", 2).ok());
        const std::string key = "t" + std::to_string(t) + "_" + std::to_string(i);
        EXPECT_TRUE(store_->Set(key, key).ok());
        EXPECT_EQ(store_->Get(key).value(), key);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store_->Get("shared").value(), std::to_string(kThreads * 50 * 2));
}

INSTANTIATE_TEST_SUITE_P(AllStores, StoreTest, ::testing::Values("memory", "file", "tcp", "prefix"),
                         [](const auto& param_info) { return param_info.param; });

TEST(PrefixStoreTest, PrefixesIsolateKeySpaces) {
  auto base = NewMemoryStore();
  auto a = NewPrefixStore("a", base);
  auto b = NewPrefixStore("b", base);
  ASSERT_TRUE(a->Set("k", "from a").ok());
  ASSERT_TRUE(b->Set("k", "from b").ok());
  EXPECT_EQ(a->Get("k").value(), "from a");
  EXPECT_EQ(b->Get("k").value(), "from b");
  EXPECT_EQ(base->Get("a/k").value(), "from a");
  EXPECT_EQ(base->Get("k").status().code(), Code::kKeyNotFound);
  // Prefixes nest.
  auto nested = NewPrefixStore("inner", a);
  ASSERT_TRUE(nested->Set("x", "1").ok());
  EXPECT_EQ(base->Get("a/inner/x").value(), "1");
}

TEST(MemoryStoreTest, VeryLongWaitTimeoutDoesNotOverflow) {
  auto store = NewMemoryStore();
  std::thread setter([&] {
    std::this_thread::sleep_for(milliseconds(20));
    EXPECT_TRUE(store->Set("k", "v").ok());
  });
  EXPECT_TRUE(store->Wait({"k"}, milliseconds::max()).ok());
  setter.join();
  EXPECT_EQ(store->Wait({"missing"}, milliseconds(-5)).code(), Code::kStoreTimeout);
}

}  // namespace
}  // namespace choir
