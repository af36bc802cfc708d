// A rank that cannot join tells the others (comm/join_watch.h): they stop at
// once with E403 naming it instead of waiting for their timeout.
#include "comm/join_watch.h"

#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "choir/communicator.h"

namespace choir::comm {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

CommOptions Opts(std::chrono::milliseconds timeout = 60s) {
  CommOptions o;
  o.transport = "tcp";
  o.timeout = timeout;
  return o;
}

double SecondsSince(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

// Ranks 0-2 of a 4-rank world start; the process meant to be rank 3 was
// given `bad_rank` / `bad_size` or `bad_options`. Returns the three statuses.
std::vector<Status> ThreeWaitForABadFourth(int bad_rank, int bad_size, const CommOptions& bad_options,
                                           Status* bad_status, double* longest) {
  auto store = NewMemoryStore();
  std::vector<Status> st(3);
  std::vector<std::thread> th;
  const auto t0 = Clock::now();
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 4, Opts()).status(); });
  }
  std::this_thread::sleep_for(100ms);  // the three wait by now (the order does not matter)
  *bad_status = Communicator::Create(store, bad_rank, bad_size, bad_options).status();
  for (auto& t : th) t.join();
  *longest = SecondsSince(t0);
  return st;
}

void ExpectAllToldWithin(const std::vector<Status>& st, double took, const std::string& names) {
  for (size_t r = 0; r < st.size(); ++r) {
    EXPECT_EQ(st[r].code(), Code::kRemoteError) << "rank " << r << ": " << st[r].ToString();
    EXPECT_NE(st[r].message().find(names), std::string::npos) << "rank " << r << ": " << st[r].ToString();
  }
  // Their timeout is 60 s; a report is looked for every second.
  EXPECT_LT(took, 20.0);
}

TEST(JoinWatchTest, ARankOutsideTheWorldIsNamedToTheOthersAtOnce) {
  Status bad;
  double took = 0;
  const auto st = ThreeWaitForABadFourth(7, 4, Opts(), &bad, &took);
  EXPECT_EQ(bad.code(), Code::kInvalidRank) << bad.ToString();
  ExpectAllToldWithin(st, took, "rank 7 (pid ");
  EXPECT_NE(st[0].message().find("could not join communicator 'world': E102 InvalidRank: rank 7 is outside [0, 4)"),
            std::string::npos)
      << st[0].ToString();
}

TEST(JoinWatchTest, AnotherWorldSizeIsNamedToTheOthersAtOnce) {
  Status bad;
  double took = 0;
  // WORLD_SIZE=3 where the others have 4: rank 3 is outside its world.
  const auto st = ThreeWaitForABadFourth(3, 3, Opts(), &bad, &took);
  EXPECT_EQ(bad.code(), Code::kInvalidRank) << bad.ToString();
  ExpectAllToldWithin(st, took, "rank 3 is outside [0, 3)");
}

TEST(JoinWatchTest, ARefusedOptionIsNamedToTheOthersAtOnce) {
  Status bad;
  double took = 0;
  CommOptions o = Opts();
  o.transport = "carrier-pigeon";
  const auto st = ThreeWaitForABadFourth(3, 4, o, &bad, &took);
  EXPECT_EQ(bad.code(), Code::kInvalidArgument) << bad.ToString();
  ExpectAllToldWithin(st, took, "carrier-pigeon");
}

// A rank that failed once and then joins withdraws its report: the others,
// which look only afterwards, form the communicator.
TEST(JoinWatchTest, ARetryThatJoinsWithdrawsItsReport) {
  auto store = NewMemoryStore();
  CommOptions bad = Opts(10s);
  bad.transport = "carrier-pigeon";
  ASSERT_EQ(Communicator::Create(store, 1, 2, bad).status().code(), Code::kInvalidArgument);
  ASSERT_TRUE(*store->Check({"choir/world/failure/1"}));
  Status second;
  std::thread retry([&] {
    auto c = Communicator::Create(store, 1, 2, Opts(10s));
    second = c.status();
  });
  // Rank 0 starts once rank 1's retry published its hello (and so withdrew).
  for (int i = 0; i < 5000 && !*store->Check({"choir/world#0/hello/1"}); ++i) std::this_thread::sleep_for(1ms);
  auto first = Communicator::Create(store, 0, 2, Opts(10s));
  retry.join();
  EXPECT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(second.ok()) << second.ToString();
  EXPECT_EQ(*store->Get("choir/world/failure/1"), "");
}

// A report concerns the incarnation that was forming when it was made: the
// next incarnation of the same name forms.
TEST(JoinWatchTest, AReportOfAnEarlierIncarnationIsIgnored) {
  auto store = NewMemoryStore();
  {
    std::vector<Status> st(2);
    std::vector<std::thread> th;
    for (int r = 0; r < 2; ++r) {
      th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 2, Opts(10s)).status(); });
    }
    for (auto& t : th) t.join();
    ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  }
  // As if a process meant for incarnation 0 failed there (positions 0-1).
  ReportJoinFailure(*store, "world", 1, 1, Status(Code::kInvalidSetting, "old trouble"));
  std::vector<Status> st(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 2, Opts(10s)).status(); });
  }
  for (auto& t : th) t.join();
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_TRUE(st[1].ok()) << st[1].ToString();
  // The same report for the incarnation forming now stops it.
  ReportJoinFailure(*store, "world", 4, 1, Status(Code::kInvalidSetting, "new trouble"));
  const auto t0 = Clock::now();
  const Status s = Communicator::Create(store, 0, 2, Opts(60s)).status();
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("E105 InvalidSetting: new trouble"), std::string::npos) << s.ToString();
  EXPECT_LT(SecondsSince(t0), 20.0);
}

// The watched store: a report ends a Wait at the next slice; a Wait that
// times out gives its whole wait; reports being written or unreadable are
// skipped.
TEST(JoinWatchTest, WatchedStoreWaits) {
  auto store = NewMemoryStore();
  auto watch = std::make_shared<JoinWatch>(store, "w", 0, 2);
  auto watched = NewWatchedStore(store, watch, 50ms);
  // Garbage and a number without its report yet are not errors.
  ASSERT_TRUE(store->Set("choir/w/failure/1", "{not json").ok());
  ASSERT_TRUE(store->Add("choir/w/failures", 2).ok());  // report 2 is being written
  const auto t0 = Clock::now();
  Status s = watched->Wait({"never"}, 300ms);
  EXPECT_EQ(s.code(), Code::kStoreTimeout) << s.ToString();
  EXPECT_EQ(s.message().rfind("waited 300 ms for 1 store key(s)", 0), 0u) << s.ToString();
  EXPECT_GE(SecondsSince(t0), 0.29);
  std::thread later([&] {
    std::this_thread::sleep_for(200ms);
    ReportJoinFailure(*store, "w", 1, 0, Status(Code::kBadTopologyFile, "rank 0's file"));
  });
  const auto t1 = Clock::now();
  s = watched->Wait({"never"}, 30s);
  later.join();
  EXPECT_EQ(s.code(), Code::kRemoteError) << s.ToString();
  EXPECT_NE(s.message().find("rank 0 (pid "), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("E109 BadTopologyFile: rank 0's file"), std::string::npos) << s.ToString();
  EXPECT_LT(SecondsSince(t1), 5.0);
  // Keys that arrive end the wait as usual.
  ASSERT_TRUE(store->Set("here", "1").ok());
  auto other = std::make_shared<JoinWatch>(store, "w", 10, 2);  // another incarnation: the report is not its
  EXPECT_TRUE(NewWatchedStore(store, other, 50ms)->Wait({"here"}, 1s).ok());
  EXPECT_EQ(NewWatchedStore(store, other, 50ms)->Wait({"never"}, 100ms).code(), Code::kStoreTimeout);
}

// A rank given twice: the second process is refused, the first is told, and
// so is the rank that joins after them (the surplus claim pushed it into the
// next incarnation).
TEST(JoinWatchTest, ARankGivenTwiceStopsBothIncarnationsItTouches) {
  auto store = NewMemoryStore();
  std::vector<Status> st(3);
  const auto t0 = Clock::now();
  std::thread first([&] { st[0] = Communicator::Create(store, 0, 2, Opts()).status(); });
  for (int i = 0; i < 5000 && !*store->Check({"choir/world#0/hello/0"}); ++i) std::this_thread::sleep_for(1ms);
  st[1] = Communicator::Create(store, 0, 2, Opts()).status();
  std::thread last([&] { st[2] = Communicator::Create(store, 1, 2, Opts()).status(); });
  first.join();
  last.join();
  EXPECT_EQ(st[1].code(), Code::kInvalidRank) << st[1].ToString();
  for (size_t i : {size_t{0}, size_t{2}}) {
    EXPECT_EQ(st[i].code(), Code::kRemoteError) << i << ": " << st[i].ToString();
    EXPECT_NE(st[i].message().find("rank 0 of communicator 'world' was already taken by another process"),
              std::string::npos)
        << i << ": " << st[i].ToString();
  }
  EXPECT_LT(SecondsSince(t0), 20.0);
}

TEST(JoinWatchTest, WhichFailuresAreTold) {
  EXPECT_TRUE(IsJoinFailureToReport(Status(Code::kInvalidRank, "")));
  EXPECT_TRUE(IsJoinFailureToReport(Status(Code::kJobMismatch, "")));
  EXPECT_FALSE(IsJoinFailureToReport(Status(Code::kStoreTimeout, "")));   // waiting for others
  EXPECT_FALSE(IsJoinFailureToReport(Status(Code::kStoreUnreachable, "")));  // nobody to tell
  EXPECT_FALSE(IsJoinFailureToReport(Status(Code::kConnectTimeout, "")));
  EXPECT_FALSE(IsJoinFailureToReport(Status(Code::kRemoteError, "")));  // another rank's, already told
}

}  // namespace
}  // namespace choir::comm
