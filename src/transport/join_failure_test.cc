#include "transport/join_failure.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <string>
#include <vector>

#include "base/clock.h"

namespace choir::transport {
namespace {

// Counts the requests that reach a memory store.
class CountingStore : public Store {
 public:
  Status Set(const std::string& k, const std::string& v) override {
    ++sets;
    return base_->Set(k, v);
  }
  Result<std::string> Get(const std::string& k) override { return base_->Get(k); }
  Result<int64_t> Add(const std::string& k, int64_t d) override { return base_->Add(k, d); }
  Result<std::string> CompareSet(const std::string& k, const std::string& e, const std::string& d) override {
    ++compare_sets;
    return base_->CompareSet(k, e, d);
  }
  Result<bool> Delete(const std::string& k) override { return base_->Delete(k); }
  Status Wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override { return base_->Wait(keys, t); }
  Result<bool> Check(const std::vector<std::string>& keys) override {
    ++checks;
    return base_->Check(keys);
  }
  std::atomic<int> checks{0}, compare_sets{0}, sets{0};

 private:
  std::shared_ptr<Store> base_ = NewMemoryStore();
};

std::vector<std::string> Keys(int n) {
  std::vector<std::string> keys;
  for (int i = 0; i < n; ++i) keys.push_back("hello/" + std::to_string(i));
  return keys;
}

JoinFailure Sample() {
  JoinFailure f;
  f.rank = 3;
  f.pid = getpid();
  f.host = "node7";
  f.where = "boot/net:[4026531840]";
  f.at_ns = NowNanos();
  f.error = "E105 InvalidSetting: CHOIR_TRANSPORT=pigeon";
  return f;
}

TEST(JoinFailureTest, ValuesRoundTripAndOrdinaryValuesAreNotFailures) {
  const JoinFailure sample = Sample();
  const std::string v = JoinFailureValue(sample);
  const auto f = ParseJoinFailure(v);
  ASSERT_TRUE(f.has_value()) << v;
  EXPECT_EQ(f->rank, 3);
  EXPECT_EQ(f->pid, getpid());
  EXPECT_EQ(f->error, "E105 InvalidSetting: CHOIR_TRANSPORT=pigeon");
  EXPECT_EQ(f->at_ns, sample.at_ns);
  EXPECT_EQ(f->host, "node7");
  EXPECT_EQ(f->where, "boot/net:[4026531840]");
  EXPECT_EQ(f->index, 0);
  const Status s = JoinFailureStatus(*f, "world");
  EXPECT_EQ(s.code(), Code::kRemoteError);
  EXPECT_EQ(s.message().rfind("rank 3 (pid " + std::to_string(getpid()) + " on node7)", 0), 0u) << s.ToString();
  EXPECT_NE(s.message().find("could not join communicator 'world': E105 InvalidSetting: CHOIR_TRANSPORT=pigeon"),
            std::string::npos)
      << s.ToString();
  // What the keys hold normally: a hello, a segment, a readiness.
  for (const std::string ordinary : {"{\"protocol\":2}", "/choir-ab-1-99 00000000deadbeef", "cma=1 tuning=intel", ""}) {
    EXPECT_FALSE(ParseJoinFailure(ordinary).has_value()) << ordinary;
  }
  // A damaged failure value is still a failure (nobody may wait on), with
  // what it held in the error.
  const auto damaged = ParseJoinFailure("choir-join-failed {\"rank\": \"x\"");
  ASSERT_TRUE(damaged.has_value());
  EXPECT_EQ(damaged->rank, -1);
  EXPECT_NE(damaged->error.find("unreadable"), std::string::npos) << damaged->error;
  // A short value points to the whole one; a long error is cut.
  JoinFailure pointer = Sample();
  pointer.error.clear();
  pointer.index = 12;
  const auto p = ParseJoinFailure(JoinFailureValue(pointer));
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->index, 12);
  EXPECT_TRUE(p->error.empty());
  EXPECT_NE(JoinFailureStatus(*p, "w").message().find("(its error was not kept)"), std::string::npos);
  JoinFailure long_one = Sample();
  long_one.error = std::string(5000, 'x');
  EXPECT_EQ(ParseJoinFailure(JoinFailureValue(long_one))->error.size(), 2003u);
  // Wrong field types are ignored, not thrown on.
  const auto typed = ParseJoinFailure("choir-join-failed {\"rank\": [1], \"pid\": \"p\", \"error\": 5}");
  ASSERT_TRUE(typed.has_value());
  EXPECT_EQ(typed->rank, -1);
  EXPECT_EQ(typed->pid, -1);
}

TEST(JoinFailureTest, OwnEarlierFailureIsThisProcessThisRankBeforeThisTry) {
  const JoinFailure f = Sample();
  const std::string here = f.where;
  EXPECT_TRUE(IsOwnEarlierFailure(f, 3, here, NowNanos() + 1));
  EXPECT_FALSE(IsOwnEarlierFailure(f, 1, here, NowNanos() + 1));  // another rank's
  EXPECT_FALSE(IsOwnEarlierFailure(f, 3, here, f.at_ns));        // made during this try: a twin's
  EXPECT_FALSE(IsOwnEarlierFailure(f, 3, "other-boot/net:[1]", NowNanos() + 1));  // the same pid elsewhere
  JoinFailure other = f;
  other.pid = f.pid + 1;
  EXPECT_FALSE(IsOwnEarlierFailure(other, 3, here, NowNanos() + 1));  // another process's
}

TEST(JoinFailureTest, FillMissingKeysFillsOnlyWhatIsMissingWithFewRequests) {
  CountingStore store;
  const std::vector<std::string> keys = Keys(1000);
  for (int i = 0; i < 1000; ++i) {
    if (i != 17 && i != 600) {
      ASSERT_TRUE(store.Set(keys[static_cast<size_t>(i)], "real").ok());
    }
  }
  store.sets = 0;
  ASSERT_TRUE(FillMissingKeys(store, keys, "failed").ok());
  EXPECT_EQ(*store.Get("hello/17"), "failed");
  EXPECT_EQ(*store.Get("hello/600"), "failed");
  EXPECT_EQ(*store.Get("hello/18"), "real");
  EXPECT_EQ(store.sets.load(), 2);
  EXPECT_LE(store.checks.load(), 4 * 10 + 1);  // two paths down a tree of depth 10
  // Everything there: one Check.
  store.checks = 0;
  ASSERT_TRUE(FillMissingKeys(store, keys, "again").ok());
  EXPECT_EQ(store.checks.load(), 1);
  EXPECT_EQ(*store.Get("hello/17"), "failed");
  EXPECT_TRUE(FillMissingKeys(store, {}, "x").ok());
}

TEST(JoinFailureTest, FillMissingKeysTakesMoreKeysThanOneCheck) {
  CountingStore store;
  const std::vector<std::string> keys = Keys(65536 + 3);
  for (size_t i = 0; i < 65536; ++i) {
    ASSERT_TRUE(store.Set(keys[i], "real").ok());
  }
  ASSERT_TRUE(FillMissingKeys(store, keys, "failed").ok());
  EXPECT_EQ(*store.Get("hello/0"), "real");
  EXPECT_EQ(*store.Get("hello/65536"), "failed");
  EXPECT_EQ(*store.Get("hello/65538"), "failed");
}

}  // namespace
}  // namespace choir::transport
