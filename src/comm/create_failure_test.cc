// A rank that cannot join leaves its failure where the others wait
// (transport/join_failure.h): they stop at once with E403 naming it instead
// of waiting for their timeout, and a world that can form still forms.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>
#include <vector>

#include "choir/communicator.h"
#include "transport/join_failure.h"

namespace choir {
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

bool HasKey(Store& store, const std::string& key) {
  const Result<bool> there = store.Check({key});
  return there.ok() && *there;
}

void WaitForKey(Store& store, const std::string& key) {
  for (int i = 0; i < 10000 && !HasKey(store, key); ++i) std::this_thread::sleep_for(1ms);
}

struct Outcome {
  std::vector<Status> waiting;  // ranks 0-2
  Status bad;                   // the process meant to be rank 3
  double seconds = 0;           // until every rank had its answer
};

// Ranks 0-2 of a 4-rank world wait; the process meant to be rank 3 was
// given `bad_rank` and `bad_size`, and `bad_options`.
Outcome ThreeWaitForABadFourth(int bad_rank, int bad_size, const CommOptions& bad_options) {
  auto store = NewMemoryStore();
  Outcome out;
  out.waiting.resize(3);
  std::vector<std::thread> th;
  const auto t0 = Clock::now();
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] { out.waiting[static_cast<size_t>(r)] = Communicator::Create(store, r, 4, Opts()).status(); });
  }
  for (int r = 0; r < 3; ++r) WaitForKey(*store, "choir/world#0/hello/" + std::to_string(r));
  out.bad = Communicator::Create(store, bad_rank, bad_size, bad_options).status();
  for (auto& t : th) t.join();
  out.seconds = SecondsSince(t0);
  return out;
}

// Every waiting rank got E403 naming `text`, well before its 60 s timeout.
void ExpectAllTold(const Outcome& o, const std::string& text) {
  for (size_t r = 0; r < o.waiting.size(); ++r) {
    EXPECT_EQ(o.waiting[r].code(), Code::kRemoteError) << "rank " << r << ": " << o.waiting[r].ToString();
    EXPECT_NE(o.waiting[r].message().find(text), std::string::npos) << "rank " << r << ": " << o.waiting[r].ToString();
  }
  EXPECT_LT(o.seconds, 20.0);
}

TEST(CreateFailureTest, ARefusedSettingIsNamedToTheOthersAtOnce) {
  CommOptions o = Opts();
  o.transport = "carrier-pigeon";
  const Outcome out = ThreeWaitForABadFourth(3, 4, o);
  EXPECT_EQ(out.bad.code(), Code::kInvalidArgument) << out.bad.ToString();
  ExpectAllTold(out, "rank 3 (pid ");
  ExpectAllTold(out, "carrier-pigeon");
  EXPECT_LT(out.seconds, 5.0);  // no grace: rank 3 is this world's
}

TEST(CreateFailureTest, ARankOutsideTheWorldIsNamedToTheOthers) {
  const Outcome out = ThreeWaitForABadFourth(7, 4, Opts());
  EXPECT_EQ(out.bad.code(), Code::kInvalidRank) << out.bad.ToString();
  ExpectAllTold(out, "rank 7 (pid ");
  ExpectAllTold(out, "could not join communicator 'world': E102 InvalidRank: rank 7 is outside [0, 4)");
}

// A process whose world is larger than the others' but which shares their
// incarnation (3 joined: the first for both) fills the hellos of its own
// world that are missing, among them the ones the others wait for.
TEST(CreateFailureTest, ALargerWorldSizeIsNamedToTheOthers) {
  const Outcome out = ThreeWaitForABadFourth(7, 5, Opts());
  EXPECT_EQ(out.bad.code(), Code::kInvalidRank) << out.bad.ToString();
  ExpectAllTold(out, "rank 7 is outside [0, 5)");
}

// Processes given (rank, world size), started one after the other (each
// once the one before has taken its join position), with a 60 s timeout.
struct Joiner {
  int rank;
  int size;
};
std::vector<Status> JoinInOrder(const std::vector<Joiner>& joiners, double* seconds,
                                std::shared_ptr<Store> store = nullptr, int64_t first_position = 0) {
  if (store == nullptr) store = NewMemoryStore();
  std::vector<Status> st(joiners.size());
  std::vector<std::thread> th;
  const auto t0 = Clock::now();
  for (size_t i = 0; i < joiners.size(); ++i) {
    th.emplace_back([&, i] { st[i] = Communicator::Create(store, joiners[i].rank, joiners[i].size, Opts()).status(); });
    WaitForKey(*store, "choir/world/size/" + std::to_string(first_position + static_cast<int64_t>(i)));
  }
  for (auto& t : th) t.join();
  *seconds = SecondsSince(t0);
  return st;
}

// Two ranks of a 4-rank world, then ranks 0 and 1 started with WORLD_SIZE=2:
// those two would form a world of their own beside the two that wait. The
// first of them finds that the rank before it belongs to a larger world
// still forming, and both worlds are told at once.
TEST(CreateFailureTest, ASmallerWorldSizeIsNamedAtOnce) {
  double seconds = 0;
  const auto st = JoinInOrder({{2, 4}, {3, 4}, {0, 2}, {1, 2}}, &seconds);
  EXPECT_EQ(st[2].code(), Code::kInvalidWorldSize) << st[2].ToString();
  EXPECT_NE(st[2].message().find("rank 3 (pid "), std::string::npos) << st[2].ToString();
  EXPECT_NE(st[2].message().find("just before rank 0 as one of 4 ranks, but rank 0 was started as one of 2"),
            std::string::npos)
      << st[2].ToString();
  for (size_t i : {0, 1, 3}) {
    EXPECT_EQ(st[i].code(), Code::kRemoteError) << i << ": " << st[i].ToString();
    EXPECT_NE(st[i].message().find("rank 0 (pid "), std::string::npos) << i << ": " << st[i].ToString();
  }
  EXPECT_LT(seconds, 20.0);
}

// A rank with a larger world size among the ranks of a smaller one: it
// finds the rank before it inside its own range with another size.
TEST(CreateFailureTest, ALargerWorldSizeInsideTheRangeIsNamedAtOnce) {
  double seconds = 0;
  const auto st = JoinInOrder({{0, 2}, {1, 8}}, &seconds);
  EXPECT_EQ(st[1].code(), Code::kInvalidWorldSize) << st[1].ToString();
  EXPECT_NE(st[1].message().find("rank 0 (pid "), std::string::npos) << st[1].ToString();
  // Rank 1 finds it before its claim and hello: rank 0 is told where it
  // waits for rank 1's hello.
  EXPECT_EQ(st[0].code(), Code::kRemoteError) << st[0].ToString();
  EXPECT_NE(st[0].message().find("as one of 2 ranks, but rank 1 was started as one of 8"), std::string::npos)
      << st[0].ToString();
  EXPECT_LT(seconds, 20.0);
}

// The rank after one with another world size finds it: ranks 0 and 2 of a
// 3-rank world, with rank 1 given 2 between them (it forms nothing: rank 2
// finds it in its range).
TEST(CreateFailureTest, TheRankAfterAnotherWorldSizeNamesIt) {
  double seconds = 0;
  const auto st = JoinInOrder({{0, 3}, {1, 2}, {2, 3}}, &seconds);
  // Rank 1 (size 2) has rank 0 before it in its range [0, 2): it is found
  // by itself; rank 2 then finds rank 1 in its range [0, 3).
  EXPECT_EQ(st[1].code(), Code::kInvalidWorldSize) << st[1].ToString();
  EXPECT_NE(st[1].message().find("rank 0 (pid "), std::string::npos) << st[1].ToString();
  EXPECT_EQ(st[2].code(), Code::kInvalidWorldSize) << st[2].ToString();
  EXPECT_NE(st[2].message().find("rank 1 (pid "), std::string::npos) << st[2].ToString();
  // Rank 0 reads rank 1's hello (world size 2) or finds the failure left
  // where rank 2's hello goes, whichever comes first.
  EXPECT_TRUE(st[0].code() == Code::kInvalidWorldSize || st[0].code() == Code::kRemoteError) << st[0].ToString();
  EXPECT_NE(st[0].message().find("rank 1"), std::string::npos) << st[0].ToString();
  EXPECT_LT(seconds, 20.0);
}

// A process with another world size that comes after a world took all its
// positions finds the conflict, but leaves that world alone (its range
// ended before the process's position): the world forms.
TEST(CreateFailureTest, AnotherWorldSizeAfterACompleteRangeLeavesThatWorldAlone) {
  auto store = NewMemoryStore();
  double seconds = 0;
  const auto st = JoinInOrder({{0, 4}, {1, 4}, {2, 4}, {3, 4}, {0, 3}}, &seconds, store);
  for (size_t i = 0; i < 4; ++i) EXPECT_TRUE(st[i].ok()) << i << ": " << st[i].ToString();
  EXPECT_EQ(st[4].code(), Code::kInvalidWorldSize) << st[4].ToString();
  EXPECT_NE(st[4].message().find("rank 3 (pid "), std::string::npos) << st[4].ToString();
  EXPECT_FALSE(HasKey(*store, "choir/world#0/filling/4")) << "the complete world's hellos were filled";
  EXPECT_TRUE(HasKey(*store, "choir/world#1/filling/3"));  // its own incarnation
}

// A communicator name used again on one store with another world size: the
// rank that lands in the old range says E101 (not "rank given twice", as the
// old incarnation's claims would), and its peers, one incarnation further,
// are told at once.
TEST(CreateFailureTest, ANameUsedAgainWithAnotherWorldSizeIsNamedAtOnce) {
  auto store = NewMemoryStore();
  double seconds = 0;
  const auto formed = JoinInOrder({{0, 2}, {1, 2}}, &seconds, store);
  ASSERT_TRUE(formed[0].ok() && formed[1].ok()) << formed[0].ToString() << " / " << formed[1].ToString();
  const auto st = JoinInOrder({{0, 3}, {1, 3}, {2, 3}}, &seconds, store, 2);
  EXPECT_EQ(st[0].code(), Code::kInvalidWorldSize) << st[0].ToString();
  EXPECT_NE(st[0].message().find("as one of 2 ranks, but rank 0 was started as one of 3"), std::string::npos)
      << st[0].ToString();
  for (size_t i : {1, 2}) {
    EXPECT_EQ(st[i].code(), Code::kRemoteError) << i << ": " << st[i].ToString();
    EXPECT_NE(st[i].message().find("rank 0 (pid "), std::string::npos) << i << ": " << st[i].ToString();
  }
  EXPECT_LT(seconds, 20.0);
}

// A process whose rank lies outside its (smaller) world takes no join
// position, but the rank before the next one recorded a larger world whose
// range holds it: after the grace the process fills that world's missing
// hellos, and the others stop with its error, which names both sizes.
TEST(CreateFailureTest, ARankOutsideASmallerWorldIsNamedToTheOthers) {
  auto store = NewMemoryStore();
  std::vector<Status> st(3);
  std::vector<std::thread> th;
  const auto t0 = Clock::now();
  for (int r = 0; r < 3; ++r) {
    th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 4, Opts()).status(); });
  }
  for (int r = 0; r < 3; ++r) WaitForKey(*store, "choir/world#0/hello/" + std::to_string(r));
  const Status bad = Communicator::Create(store, 3, 3, Opts()).status();
  for (auto& t : th) t.join();
  const double seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(bad.code(), Code::kInvalidRank) << bad.ToString();
  EXPECT_NE(bad.message().find("rank 3 is outside [0, 3); the last process to join communicator 'world', rank "),
            std::string::npos)
      << bad.ToString();
  EXPECT_NE(bad.message().find("was started as one of 4 ranks and this one as one of 3"), std::string::npos)
      << bad.ToString();
  for (size_t r = 0; r < st.size(); ++r) {
    EXPECT_EQ(st[r].code(), Code::kRemoteError) << "rank " << r << ": " << st[r].ToString();
    EXPECT_NE(st[r].message().find("rank 3 (pid "), std::string::npos) << "rank " << r << ": " << st[r].ToString();
    EXPECT_NE(st[r].message().find("E102 InvalidRank: rank 3 is outside [0, 3)"), std::string::npos)
        << "rank " << r << ": " << st[r].ToString();
  }
  EXPECT_LT(seconds, 20.0);  // the 2 s grace, not the 60 s timeout
  EXPECT_FALSE(HasKey(*store, "choir/world#1/hello/0"));  // no world of 3 was touched
}

// A process outside its world that comes before the others stops the world
// they start within its grace, whatever its own world size.
TEST(CreateFailureTest, ARankOutsideTheWorldThatComesFirstIsNamedToTheOthers) {
  for (const Joiner stray : {Joiner{3, 3}, Joiner{7, 4}}) {
    SCOPED_TRACE("stray rank " + std::to_string(stray.rank) + " of " + std::to_string(stray.size));
    auto store = NewMemoryStore();
    Status bad;
    const auto t0 = Clock::now();
    std::thread first([&] { bad = Communicator::Create(store, stray.rank, stray.size, Opts()).status(); });
    WaitForKey(*store, "choir/world/failure/1");  // it is in its grace
    std::vector<Status> st(3);
    std::vector<std::thread> th;
    for (int r = 0; r < 3; ++r) {
      th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 4, Opts()).status(); });
    }
    for (auto& t : th) t.join();
    first.join();
    EXPECT_EQ(bad.code(), Code::kInvalidRank) << bad.ToString();
    const std::string said =
        "rank " + std::to_string(stray.rank) + " is outside [0, " + std::to_string(stray.size) + ")";
    for (size_t r = 0; r < st.size(); ++r) {
      EXPECT_EQ(st[r].code(), Code::kRemoteError) << "rank " << r << ": " << st[r].ToString();
      EXPECT_NE(st[r].message().find(said), std::string::npos) << "rank " << r << ": " << st[r].ToString();
    }
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20.0);
    EXPECT_TRUE(HasKey(*store, "choir/world#0/filling/4"));  // the world of 4 was filled,
    EXPECT_FALSE(HasKey(*store, "choir/world#0/filling/3"));  // not one of 3
  }
}

// A rank that took its position but never recorded its size (it stopped
// right after its Add, or is an older choir) does not make a process outside
// its world take the range for whole: after the grace it fills the world
// its own size gives.
TEST(CreateFailureTest, ARankOutsideTheWorldFillsItsOwnSizeWhenNoSizeIsRecorded) {
  auto store = NewMemoryStore();
  ASSERT_TRUE(store->Add("choir/world/joined", 2).ok());  // two ranks that recorded nothing
  const Status bad = Communicator::Create(store, 3, 3, Opts()).status();
  EXPECT_EQ(bad.code(), Code::kInvalidRank) << bad.ToString();
  EXPECT_EQ(bad.message().find("the last process to join"), std::string::npos) << bad.ToString();
  EXPECT_TRUE(HasKey(*store, "choir/world#0/filling/3"));
  const Result<std::string> hello = store->Get("choir/world#0/hello/2");
  ASSERT_TRUE(hello.ok()) << hello.status().ToString();
  EXPECT_TRUE(transport::ParseJoinFailure(*hello).has_value()) << *hello;
}

// A process outside the world, of another size or of the same, that comes
// while the world is still forming leaves it alone when the world forms
// within the grace.
TEST(CreateFailureTest, AProcessOutsideTheWorldDoesNotStopAWorldThatForms) {
  for (const Joiner outside : {Joiner{3, 3}, Joiner{4, 4}}) {
    SCOPED_TRACE("rank " + std::to_string(outside.rank) + " of " + std::to_string(outside.size));
    auto store = NewMemoryStore();
    std::vector<Status> st(4);
    std::vector<std::thread> th;
    for (int r = 0; r < 3; ++r) {
      th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 4, Opts()).status(); });
    }
    for (int r = 0; r < 3; ++r) WaitForKey(*store, "choir/world#0/hello/" + std::to_string(r));
    Status stray_status;
    std::thread stray([&] { stray_status = Communicator::Create(store, outside.rank, outside.size, Opts()).status(); });
    WaitForKey(*store, "choir/world/failure/1");  // it is in its grace
    st[3] = Communicator::Create(store, 3, 4, Opts()).status();
    for (auto& t : th) t.join();
    stray.join();
    EXPECT_EQ(stray_status.code(), Code::kInvalidRank) << stray_status.ToString();
    if (outside.size != 4) {
      EXPECT_NE(stray_status.message().find("was started as one of 4 ranks and this one as one of 3"),
                std::string::npos)
          << stray_status.ToString();
    }
    for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
    EXPECT_FALSE(HasKey(*store, "choir/world#0/filling/4"));
    EXPECT_FALSE(HasKey(*store, "choir/world#1/hello/0"));
  }
}

// With three ranks: the ones that come after the retry find its first
// try's failure in the hello of a rank still missing, see that the failed
// process has joined since, and wait for the real hello.
TEST(CreateFailureTest, ARetryThatJoinsDoesNotStopTheOthers) {
  auto store = NewMemoryStore();
  CommOptions bad = Opts(10s);
  bad.transport = "carrier-pigeon";
  ASSERT_EQ(Communicator::Create(store, 1, 3, bad).status().code(), Code::kInvalidArgument);
  std::vector<Status> st(3);
  std::thread retry([&] { st[1] = Communicator::Create(store, 1, 3, Opts(10s)).status(); });
  WaitForKey(*store, "choir/world#0/claim/1");
  std::this_thread::sleep_for(100ms);  // its real hello is in
  std::thread zero([&] { st[0] = Communicator::Create(store, 0, 3, Opts(10s)).status(); });
  std::this_thread::sleep_for(300ms);  // rank 0 reads hello/2: the first try's failure; it waits
  st[2] = Communicator::Create(store, 2, 3, Opts(10s)).status();
  retry.join();
  zero.join();
  for (size_t r = 0; r < st.size(); ++r) EXPECT_TRUE(st[r].ok()) << "rank " << r << ": " << st[r].ToString();
}

// A process outside the world that comes after the world formed leaves the
// next incarnation of the name alone.
TEST(CreateFailureTest, AProcessTooManyAfterTheWorldFormedLeavesTheNextIncarnationAlone) {
  auto store = NewMemoryStore();
  std::vector<Status> st(2);
  {
    std::vector<std::thread> th;
    for (int r = 0; r < 2; ++r) {
      th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 2, Opts(10s)).status(); });
    }
    for (auto& t : th) t.join();
    ASSERT_TRUE(st[0].ok() && st[1].ok()) << st[0].ToString() << " / " << st[1].ToString();
  }
  EXPECT_EQ(Communicator::Create(store, 5, 2, Opts(10s)).status().code(), Code::kInvalidRank);
  EXPECT_FALSE(HasKey(*store, "choir/world#1/hello/0"));
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] { st[static_cast<size_t>(r)] = Communicator::Create(store, r, 2, Opts(10s)).status(); });
  }
  for (auto& t : th) t.join();
  EXPECT_TRUE(st[0].ok()) << st[0].ToString();
  EXPECT_TRUE(st[1].ok()) << st[1].ToString();
}

// A rank that failed once and then joins waits for the real hellos where its
// first try left its failure; the world forms.
TEST(CreateFailureTest, ARetryThatJoinsWaitsPastItsOwnFailure) {
  auto store = NewMemoryStore();
  CommOptions bad = Opts(10s);
  bad.transport = "carrier-pigeon";
  ASSERT_EQ(Communicator::Create(store, 1, 2, bad).status().code(), Code::kInvalidArgument);
  const Result<std::string> left = store->Get("choir/world#0/hello/0");
  ASSERT_TRUE(left.ok()) << left.status().ToString();
  ASSERT_TRUE(transport::ParseJoinFailure(*left).has_value()) << *left;
  Status second;
  std::thread retry([&] { second = Communicator::Create(store, 1, 2, Opts(10s)).status(); });
  std::this_thread::sleep_for(200ms);  // the retry reads hello/0: its own failure; it waits
  auto first = Communicator::Create(store, 0, 2, Opts(10s));
  retry.join();
  EXPECT_TRUE(first.ok()) << first.status().ToString();
  EXPECT_TRUE(second.ok()) << second.ToString();
}

// A rank given twice: the second process is refused, the first is told, and
// so is the rank that joins after them (the surplus join pushed it into the
// next incarnation).
TEST(CreateFailureTest, ARankGivenTwiceStopsBothIncarnationsItTouches) {
  auto store = NewMemoryStore();
  std::vector<Status> st(3);
  const auto t0 = Clock::now();
  std::thread first([&] { st[0] = Communicator::Create(store, 0, 2, Opts()).status(); });
  WaitForKey(*store, "choir/world#0/hello/0");
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

// A rank that fails after its hello (here: a peer's failure value is found
// while connecting) is seen by the ranks waiting for its TCP connection.
TEST(CreateFailureTest, AFailureAfterTheHelloEndsTheWaitForConnections) {
  auto store = NewMemoryStore();
  // Rank 1 publishes a hello through a real Create that we stop from
  // connecting: it waits for rank 0's... Simpler: rank 0 waits for rank 1's
  // connection, and the failed key appears.
  Status st;
  std::thread zero([&] { st = Communicator::Create(store, 0, 2, Opts()).status(); });
  WaitForKey(*store, "choir/world#0/hello/0");
  // A stand-in for rank 1: it joins and publishes a hello copied from rank
  // 0's with its rank changed, then fails before connecting.
  ASSERT_TRUE(store->Add("choir/world/joined", 1).ok());
  ASSERT_TRUE(store->Add("choir/world#0/claim/1", 1).ok());
  std::string hello = *store->Get("choir/world#0/hello/0");
  const size_t at = hello.find("\"rank\":0");
  ASSERT_NE(at, std::string::npos) << hello;
  hello.replace(at, 8, "\"rank\":1");
  ASSERT_TRUE(store->Set("choir/world#0/hello/1", hello).ok());
  std::this_thread::sleep_for(500ms);  // rank 0 waits for rank 1's connection by now
  const auto t0 = Clock::now();
  transport::JoinFailure failure;
  failure.rank = 1;
  failure.pid = 4242;
  failure.error = "E503 OutOfMemory: no room in /dev/shm";
  ASSERT_TRUE(store->Set("choir/world#0/failed", transport::JoinFailureValue(failure)).ok());
  zero.join();
  EXPECT_EQ(st.code(), Code::kRemoteError) << st.ToString();
  EXPECT_NE(st.message().find("rank 1 (pid 4242)"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("E503 OutOfMemory: no room in /dev/shm"), std::string::npos) << st.ToString();
  EXPECT_LT(SecondsSince(t0), 5.0);
}

}  // namespace
}  // namespace choir
