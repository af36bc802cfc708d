// Communicator behaviour with ranks as threads (see src/testing/multi_rank.h):
// correctness on both transports, and every failure path ending in its
// numbered error instead of a hang.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "algorithms/walk_choice.h"
#include "choir/selftest.h"
#include "choir/settings.h"
#include "choir/shared_buffer.h"
#include "params/params.h"
#include "testing/multi_rank.h"
#include "testing/one_cpu.h"
#include "transport/endpoint.h"

namespace choir {
namespace {

using namespace std::chrono_literals;
using testing::ExpectAllOk;
using testing::RunRanks;
using testing::TransportOptions;

// Whether the communicator's ranks outnumber the CPUs they may run on,
// judged as the communicator judged it (the switch tables differ by it).
bool RanksShareCpus(const Communicator& comm) {
  std::vector<std::vector<int>> cores;
  for (const RankPlace& p : comm.topology().ranks) cores.push_back(p.cores);
  return transport::RanksCompeteForCpus(cores, static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)));
}

// Runs the sweep on this rank and checks every case against its reference:
// at least `min_cases` ran, each with `want_algorithm` when one is given.
Status CheckSweep(Communicator& comm, const SweepOptions& so, const std::string& want_algorithm = "",
                  size_t min_cases = 1) {
  auto cases = RunSweep(comm, so);
  if (!cases.ok()) return cases.status();
  if (cases->size() < min_cases) return Status(Code::kInternal, "only " + std::to_string(cases->size()) + " cases ran");
  for (const SweepCase& c : *cases) {
    const std::string what = c.op + " " + c.dtype + " " + c.reduce_op + " count " + std::to_string(c.count) +
                             (c.in_place ? " in-place" : "");
    if (!want_algorithm.empty() && c.algorithm != want_algorithm) {
      return Status(Code::kInternal, what + " ran " + c.algorithm + ", not " + want_algorithm);
    }
    if (!c.ok) return Status(Code::kInternal, what + ": " + c.error);
  }
  return Status::Ok();
}

class SweepTest : public ::testing::TestWithParam<std::tuple<int, std::string>> {};

TEST_P(SweepTest, EveryCollectiveMatchesReference) {
  const auto [n, transport] = GetParam();
  SweepOptions so;
  so.counts = {0, 1, 5, 1000, 20000};
  auto results = RunRanks(n, [&](Communicator& comm) -> Status { return CheckSweep(comm, so, "", 0); },
                          TransportOptions(transport));
  ExpectAllOk(results);
}

// SweepOptions::root fixes the root of every rooted case (`choir perf
// --check` checks with the root it measured); a root outside the
// communicator is refused before any collective runs.
TEST(SweepRootTest, FixedRootIsUsedAndCheckedAndOneOutsideIsRefused) {
  auto results = RunRanks(3, [](Communicator& comm) -> Status {
    SweepOptions so;
    so.ops = {"broadcast", "reduce", "gather", "scatter", "allreduce"};
    so.dtypes = {DataType::kFloat32};
    so.counts = {1, 5, 70001};
    so.all_reduce_ops = false;
    so.root = 2;
    auto cases = RunSweep(comm, so);
    if (!cases.ok()) return cases.status();
    if (cases->size() != 5 * 3 * 2) return Status(Code::kInternal, std::to_string(cases->size()) + " cases ran");
    for (const SweepCase& c : *cases) {
      const int want = c.op == "allreduce" ? -1 : 2;
      if (c.root != want) return Status(Code::kInternal, c.op + " ran with root " + std::to_string(c.root));
      if (!c.ok) return Status(Code::kInternal, c.op + " count " + std::to_string(c.count) + ": " + c.error);
    }
    for (int bad : {3, -2}) {
      so.root = bad;
      auto refused = RunSweep(comm, so);
      if (refused.ok()) return Status(Code::kInternal, "root " + std::to_string(bad) + " was taken");
      if (refused.status().code() != Code::kInvalidArgument ||
          refused.status().message().find("SweepOptions::root " + std::to_string(bad) +
                                          " is not a rank of this communicator: give 0 to 2") == std::string::npos) {
        return Status(Code::kInternal, "root " + std::to_string(bad) + ": " + refused.status().ToString());
      }
    }
    // Without a fixed root the ranks take turns.
    so.root = -1;
    so.counts = {1};
    so.ops = {"gather"};
    so.in_place = false;
    auto turns = RunSweep(comm, so);
    if (!turns.ok()) return turns.status();
    if (turns->size() != 1 || (*turns)[0].root != 0 || !(*turns)[0].ok) {
      return Status(Code::kInternal, "the first case of a sweep without a fixed root did not take root 0");
    }
    return Status::Ok();
  });
  ExpectAllOk(results);
}

// SweepOptions::in_place and out_of_place pick the placements a sweep runs
// (`choir perf --in-place --check` checks in place alone); ops with no
// in-place form, and a sweep that asks for neither, run out of place.
TEST(SweepPlacementTest, RunsThePlacementsAskedFor) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    SweepOptions so;
    so.ops = {"allreduce", "reduce_scatter", "allgather", "alltoall", "gather", "barrier"};
    so.dtypes = {DataType::kFloat32};
    so.counts = {3, 70001};
    so.all_reduce_ops = false;
    struct Want {
      bool in_place, out_of_place;
      size_t in, out;  // cases of each placement
    };
    // 5 ops with an in-place form, 2 counts each; the barrier runs once.
    for (const Want& w : {Want{true, true, 10, 11}, Want{true, false, 10, 1}, Want{false, true, 0, 11},
                          Want{false, false, 0, 11}}) {
      so.in_place = w.in_place;
      so.out_of_place = w.out_of_place;
      auto cases = RunSweep(comm, so);
      if (!cases.ok()) return cases.status();
      size_t in = 0, out = 0;
      for (const SweepCase& c : *cases) {
        if (!c.ok) return Status(Code::kInternal, c.op + " count " + std::to_string(c.count) + ": " + c.error);
        if (c.in_place && c.op == "barrier") return Status(Code::kInternal, "a barrier ran in place");
        ++(c.in_place ? in : out);
      }
      if (in != w.in || out != w.out) {
        return Status(Code::kInternal, fmt::format("in_place {} out_of_place {}: {} in place and {} out of place, "
                                                   "not {} and {}",
                                                   w.in_place, w.out_of_place, in, out, w.in, w.out));
      }
    }
    return Status::Ok();
  });
  ExpectAllOk(results);
}

INSTANTIATE_TEST_SUITE_P(WorldsAndTransports, SweepTest,
                         ::testing::Combine(::testing::Values(1, 2, 3, 5),
                                            ::testing::Values(std::string("shm"), std::string("tcp"))),
                         [](const auto& param_info) {
                           return std::get<1>(param_info.param) + "_n" + std::to_string(std::get<0>(param_info.param));
                         });

TEST(CommCreateTest, RejectsBadArguments) {
  auto store = NewMemoryStore();
  EXPECT_EQ(Communicator::Create(store, 0, 0).status().code(), Code::kInvalidWorldSize);
  EXPECT_EQ(Communicator::Create(store, 0, -3).status().code(), Code::kInvalidWorldSize);
  EXPECT_EQ(Communicator::Create(store, 2, 2).status().code(), Code::kInvalidRank);
  EXPECT_EQ(Communicator::Create(store, -1, 2).status().code(), Code::kInvalidRank);
  EXPECT_EQ(Communicator::Create(nullptr, 0, 1).status().code(), Code::kInvalidArgument);
  CommOptions bad;
  bad.transport = "carrier-pigeon";
  EXPECT_EQ(Communicator::Create(store, 0, 1, bad).status().code(), Code::kInvalidArgument);
}

TEST(CommCreateTest, MissingRankTimesOutNamingIt) {
  auto store = NewMemoryStore();
  const auto start = std::chrono::steady_clock::now();
  auto comm = Communicator::Create(store, 0, 3, TransportOptions("auto", 500ms));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), Code::kStoreTimeout);
  EXPECT_NE(comm.status().message().find("rank(s) 1,2"), std::string::npos) << comm.status().ToString();
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);
}

// In a large world the missing ranks are given as ranges, and a list that is
// still long is cut with a count (it once ran to half a million characters).
TEST(CommCreateTest, ManyMissingRanksAreGivenAsRangesAndCut) {
  auto store = NewMemoryStore();
  auto comm = Communicator::Create(store, 0, 100000, TransportOptions("tcp", 300ms));
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), Code::kStoreTimeout);
  EXPECT_NE(comm.status().message().find("rank 0: rank(s) 1-99999 of 100000 never joined"), std::string::npos)
      << comm.status().ToString();
  // Every even rank has published its hello: the odd ones are missing.
  auto store2 = NewMemoryStore();
  for (int r = 2; r < 2000; r += 2) ASSERT_TRUE(store2->Set("choir/world#0/hello/" + std::to_string(r), "{}").ok());
  comm = Communicator::Create(store2, 0, 2000, TransportOptions("tcp", 300ms));
  ASSERT_FALSE(comm.ok());
  const std::string& message = comm.status().message();
  EXPECT_NE(message.find("rank(s) 1,3,5,7,"), std::string::npos) << message;
  EXPECT_NE(message.find(" and more (1000 in all) of 2000 never joined"), std::string::npos) << message;
  EXPECT_LT(message.size(), 1000u) << message;
}

// Two processes given the same rank: the second is refused at once, and the
// first one's timeout says the rank was given twice.
TEST(CommCreateTest, ARankGivenTwiceIsNamed) {
  auto store = NewMemoryStore();
  auto first = Communicator::Create(store, 0, 2, TransportOptions("tcp", 300ms));  // times out: rank 1 never comes
  ASSERT_FALSE(first.ok());
  auto second = Communicator::Create(store, 0, 2, TransportOptions("tcp", 300ms));
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), Code::kInvalidRank) << second.status().ToString();
  EXPECT_NE(second.status().message().find("rank 0 of communicator 'world' was already taken by another process"),
            std::string::npos)
      << second.status().ToString();
  // Both at once: one is refused, and the other is told so (or, when it
  // withdrew its twin's report as one from its own process, its timeout
  // names the duplicate).
  auto store2 = NewMemoryStore();
  std::vector<Status> st(2);
  std::vector<std::thread> th;
  for (int i = 0; i < 2; ++i) {
    th.emplace_back([&, i] { st[static_cast<size_t>(i)] = Communicator::Create(store2, 0, 2, TransportOptions("tcp", 1s)).status(); });
  }
  for (auto& t : th) t.join();
  const Status& refused = st[0].code() == Code::kInvalidRank ? st[0] : st[1];
  const Status& waited = st[0].code() == Code::kInvalidRank ? st[1] : st[0];
  EXPECT_EQ(refused.code(), Code::kInvalidRank) << refused.ToString();
  if (waited.code() == Code::kRemoteError) {
    EXPECT_NE(waited.message().find("rank 0 of communicator 'world' was already taken by another process"),
              std::string::npos)
        << waited.ToString();
  } else {
    EXPECT_EQ(waited.code(), Code::kStoreTimeout) << waited.ToString();
    EXPECT_NE(waited.message().find("another process was started as rank 0 too"), std::string::npos)
        << waited.ToString();
  }
}

TEST(CommCreateTest, JobMismatchIsRefused) {
  auto store = NewMemoryStore();
  std::vector<Status> st(2);
  std::vector<std::thread> th;
  for (int r = 0; r < 2; ++r) {
    th.emplace_back([&, r] {
      CommOptions o = TransportOptions("tcp", 2s);
      o.name = "jobs";
      o.job_id = r == 0 ? "job-a" : "job-b";
      st[static_cast<size_t>(r)] = Communicator::Create(store, r, 2, o).status();
    });
  }
  for (auto& t : th) t.join();
  EXPECT_EQ(st[0].code(), Code::kJobMismatch) << st[0].ToString();
  EXPECT_EQ(st[1].code(), Code::kJobMismatch) << st[1].ToString();
}

TEST(CommCreateTest, OtherProtocolVersionIsRefused) {
  auto store = NewMemoryStore();
  ASSERT_TRUE(store->Add("choir/ver/joined", 1).ok());  // a fake rank 1 joins first
  const nlohmann::json fake = {{"protocol", 99}, {"version", "9.9.9"}, {"rank", 1}};
  ASSERT_TRUE(store->Set("choir/ver#0/hello/1", fake.dump()).ok());
  CommOptions o = TransportOptions("tcp", 2s);
  o.name = "ver";
  auto comm = Communicator::Create(store, 0, 2, o);
  ASSERT_FALSE(comm.ok());
  EXPECT_EQ(comm.status().code(), Code::kVersionMismatch) << comm.status().ToString();
  EXPECT_NE(comm.status().message().find("protocol 99"), std::string::npos);
}

TEST(CommFailureTest, InvalidArgumentsGiveTheirCodeAndDoNotHangPeers) {
  for (const std::string transport : {"shm", "tcp"}) {
    auto results = RunRanks(2, [](Communicator& comm) -> Status {
      std::vector<float> buf(8, 1.0f);
      if (comm.rank() == 0) {
        Status s = comm.Allreduce(nullptr, buf.data(), 8, DataType::kFloat32, ReduceOp::kSum).Wait();
        if (s.code() != Code::kNullBuffer) return Status(Code::kInternal, "want E103, got " + s.ToString());
        // Sticky: the next call fails fast with the same code.
        s = comm.Barrier().Wait();
        if (s.code() != Code::kNullBuffer) return Status(Code::kInternal, "sticky: got " + s.ToString());
        return Status::Ok();
      }
      Status s = comm.Allreduce(buf.data(), buf.data(), 8, DataType::kFloat32, ReduceOp::kSum).Wait();
      if (s.code() != Code::kNullBuffer) return Status(Code::kInternal, "peer: want E103, got " + s.ToString());
      if (s.message().find("reported by rank 0") == std::string::npos) {
        return Status(Code::kInternal, "peer error does not name rank 0: " + s.ToString());
      }
      return Status::Ok();
    }, TransportOptions(transport, 10s));
    ExpectAllOk(results);
  }
}

// A call equal to the last valid one is not validated again
// (CommImpl::ValidateOnce): a call that differs from it in any one argument
// is, and fails with its own code.
TEST(CommFailureTest, ACallLikeTheLastValidOneIsStillCheckedInEveryArgument) {
  struct Case {
    const char* what;
    Code want;
    std::function<Work(Communicator&, int32_t*)> valid, changed;
  };
  auto allreduce = [](DataType t, ReduceOp op, size_t recv_at, size_t count) {
    return [=](Communicator& c, int32_t* b) { return c.Allreduce(b, b + recv_at, count, t, op); };
  };
  const std::vector<Case> cases = {
      {"count", Code::kInvalidArgument, allreduce(DataType::kInt32, ReduceOp::kSum, 8, 8),
       allreduce(DataType::kInt32, ReduceOp::kSum, 8, 9)},
      {"data type", Code::kUnsupportedOp, allreduce(DataType::kInt32, ReduceOp::kBand, 8, 8),
       allreduce(DataType::kFloat32, ReduceOp::kBand, 8, 8)},
      {"reduce op", Code::kUnsupportedOp, allreduce(DataType::kFloat32, ReduceOp::kSum, 8, 8),
       allreduce(DataType::kFloat32, ReduceOp::kBxor, 8, 8)},
      {"receive buffer", Code::kInvalidArgument, allreduce(DataType::kInt32, ReduceOp::kSum, 8, 8),
       allreduce(DataType::kInt32, ReduceOp::kSum, 4, 8)},
      {"root", Code::kInvalidRank,
       [](Communicator& c, int32_t* b) { return c.Broadcast(b, b + 8, 8, DataType::kInt32, 0); },
       [](Communicator& c, int32_t* b) { return c.Broadcast(b, b + 8, 8, DataType::kInt32, 2); }},
      // Rank 1's reduce_scatter is in place and valid: it hears of rank 0's
      // error, with its code.
      {"collective", Code::kInvalidArgument,
       [](Communicator& c, int32_t* b) { return c.Allgather(b, b + 8, 8, DataType::kInt32); },
       [](Communicator& c, int32_t* b) { return c.ReduceScatter(b, b + 8, 8, DataType::kInt32, ReduceOp::kSum); }},
      {"send buffer", Code::kNullBuffer, allreduce(DataType::kInt32, ReduceOp::kSum, 8, 8),
       [](Communicator& c, int32_t* b) { return c.Allreduce(nullptr, b + 8, 8, DataType::kInt32, ReduceOp::kSum); }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto results = RunRanks(2, [&](Communicator& comm) -> Status {
      std::vector<int32_t> buf(32, 1);
      for (int i = 0; i < 3; ++i) CHOIR_RETURN_IF_ERROR(k.valid(comm, buf.data()).Wait());
      Status s = k.changed(comm, buf.data()).Wait();
      if (s.code() != k.want) {
        return Status(Code::kInternal, fmt::format("want E{}, got {}", static_cast<int>(k.want), s.ToString()));
      }
      return Status::Ok();
    });
    ExpectAllOk(results);
  }
}

// The same for a send's peer and tag, and for per-rank counts, which the
// cache never keeps.
TEST(CommFailureTest, ACallLikeTheLastValidOneIsStillCheckedInPeerTagAndCounts) {
  struct Case {
    const char* what;
    Code want;
    bool p2p;  // rank 0 sends three times, then changes the send; rank 1 receives the three
    std::function<Work(Communicator&, int32_t*)> changed;
  };
  const std::vector<Case> cases = {
      {"tag", Code::kInvalidArgument, true,
       [](Communicator& c, int32_t* b) { return c.Send(b, 4, DataType::kInt32, 1, -1); }},
      {"peer", Code::kInvalidRank, true,
       [](Communicator& c, int32_t* b) { return c.Send(b, 4, DataType::kInt32, 2, 0); }},
      {"counts", Code::kBufferTooSmall, false, [](Communicator& c, int32_t* b) {
         const std::vector<size_t> one = {4};
         return c.AllgatherV(b, 4, b + 8, one, DataType::kInt32);
       }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    auto results = RunRanks(2, [&](Communicator& comm) -> Status {
      std::vector<int32_t> buf(32, 1);
      const std::vector<size_t> both = {4, 4};
      for (int i = 0; i < 3; ++i) {
        if (!k.p2p) {
          CHOIR_RETURN_IF_ERROR(comm.AllgatherV(buf.data(), 4, buf.data() + 8, both, DataType::kInt32).Wait());
        } else if (comm.rank() == 0) {
          CHOIR_RETURN_IF_ERROR(comm.Send(buf.data(), 4, DataType::kInt32, 1, 0).Wait());
        } else {
          CHOIR_RETURN_IF_ERROR(comm.Recv(buf.data(), 4, DataType::kInt32, 0, 0).Wait());
        }
      }
      if (k.p2p && comm.rank() == 1) return Status::Ok();
      Status s = k.changed(comm, buf.data()).Wait();
      if (s.code() != k.want) {
        return Status(Code::kInternal, fmt::format("want E{}, got {}", static_cast<int>(k.want), s.ToString()));
      }
      return Status::Ok();
    });
    ExpectAllOk(results);
  }
}

// A call equal to the last one reuses its plan (CommImpl::CallPlan): its
// signature, byte count and default algorithm. A call that names an
// algorithm still runs that one, and the next default call the default.
TEST(CommTest, ARepeatedCallRunsTheAlgorithmItNamesAndThenTheDefaultAgain) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    std::vector<int32_t> in(16), out(16);
    const std::vector<std::string> named = {"", "", "ring", "", "recursive_doubling", "ring", ""};
    std::string default_algorithm;
    for (size_t call = 0; call < named.size(); ++call) {
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<int32_t>(call * 100 + i) * (comm.rank() + 1);
      CallOptions options;
      options.algorithm = named[call];
      Work w = comm.Allreduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum, options);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      for (size_t i = 0; i < out.size(); ++i) {
        if (out[i] != static_cast<int32_t>(call * 100 + i) * 3) {
          return Status(Code::kInternal, fmt::format("call {}: out[{}] = {}", call, i, out[i]));
        }
      }
      const std::string ran = w.info().algorithm;
      if (call == 0) default_algorithm = ran;
      const std::string want = named[call].empty() ? default_algorithm : named[call];
      if (ran != want) return Status(Code::kInternal, fmt::format("call {} ran {}, not {}", call, ran, want));
    }
    if (default_algorithm != "shm_flat") return Status(Code::kInternal, "default was " + default_algorithm);
    return Status::Ok();
  }, TransportOptions("shm", 30s));
  ExpectAllOk(results);
}

// A small call run inline takes the state of the one before it once nobody
// holds that one's Work (CommImpl::TakeInlineState), and a repeated call the
// context its plan made. Each Work keeps its own result while held; a
// callback runs once, for its own operation; calls that alternate with
// others keep their sequence numbers and results.
TEST(CommTest, SmallCallsReuseAStateOnlyOnceNobodyHoldsItsWork) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    int32_t value = 0;
    auto bcast = [&] { return comm.Broadcast(&value, &value, 1, DataType::kInt32, 0); };
    auto fail = [](const std::string& what) { return Status(Code::kInternal, what); };
    value = comm.rank() == 0 ? 7 : -1;
    Work first = bcast();
    CHOIR_RETURN_IF_ERROR(first.Wait());
    const uint64_t seq = first.info().sequence;
    value = comm.rank() == 0 ? 8 : -1;
    Work second = bcast();  // `first` is still held: a state of its own
    CHOIR_RETURN_IF_ERROR(second.Wait());
    if (value != 8) return fail(fmt::format("second broadcast gave {}", value));
    if (first.info().sequence != seq || second.info().sequence != seq + 1 || !first.Done() ||
        !first.status().ok() || first.info().algorithm.empty()) {
      return fail(fmt::format("held Work changed: sequences {} and {} after {}", first.info().sequence,
                              second.info().sequence, seq));
    }
    first = Work();
    second = Work();
    int callbacks = 0;
    for (int i = 0; i < 4; ++i) {
      value = comm.rank() == 0 ? 100 + i : -1;
      Work w = bcast();
      if (!w.Done()) return fail("an inline broadcast was not done when it returned");
      w.Then([&](const Status& st) { callbacks += st.ok() ? 1 : 1000; });
      if (callbacks != i + 1) return fail(fmt::format("call {}: {} callbacks ran", i, callbacks));
      CHOIR_RETURN_IF_ERROR(w.Wait());
      if (value != 100 + i || w.info().sequence != seq + 2 + static_cast<uint64_t>(i)) {
        return fail(fmt::format("call {}: value {}, sequence {}", i, value, w.info().sequence));
      }
    }
    // Alternating calls: each new one is planned afresh, each repeat reuses.
    std::vector<int32_t> in(6), out(6);
    for (int i = 0; i < 5; ++i) {
      const bool reduce = i != 1 && i != 3;
      for (size_t j = 0; j < in.size(); ++j) in[j] = static_cast<int32_t>(10 * i + j) * (comm.rank() + 1);
      Work w = reduce ? comm.Allreduce(in.data(), out.data(), in.size(), DataType::kInt32, ReduceOp::kSum)
                      : comm.Broadcast(in.data(), out.data(), in.size(), DataType::kInt32, 1);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      for (size_t j = 0; j < out.size(); ++j) {
        const int32_t want = static_cast<int32_t>(10 * i + j) * (reduce ? 3 : 2);
        if (out[j] != want) return fail(fmt::format("call {}: out[{}] = {}, not {}", i, j, out[j], want));
      }
      if (w.info().sequence != seq + 6 + static_cast<uint64_t>(i)) {
        return fail(fmt::format("call {}: sequence {}", i, w.info().sequence));
      }
    }
    return Status::Ok();
  }, TransportOptions("shm", 30s));
  ExpectAllOk(results);
}

// Small calls run inline are timed once per kind and size class, then one
// in CHOIR_TIME_ONE_IN (CommMetrics::TimeThisCall), the same calls on every
// rank; WorkInfo says which. Calls handed to the progress thread and
// alltoallv are always timed, and with CHOIR_TIME_ONE_IN=1 every call is.
TEST(CommTest, WorkInfoSaysWhichCallsWereTimed) {
  params::ScopedOverride async("CHOIR_ASYNC_BYTES", "1K");
  auto pattern_of = [](Communicator& comm, size_t floats, int calls, std::string* pattern) -> Status {
    std::vector<float> in(floats, 1.0f), out(floats, 0.0f);
    for (int i = 0; i < calls; ++i) {
      Work w = comm.Allreduce(in.data(), out.data(), floats, DataType::kFloat32, ReduceOp::kSum);
      CHOIR_RETURN_IF_ERROR(w.Wait());
      if (out[0] != 2.0f) return Status(Code::kInternal, fmt::format("call {}: {}", i, out[0]));
      const WorkInfo info = w.info();
      if (info.timed != (info.seconds > 0)) {
        return Status(Code::kInternal, fmt::format("call {}: timed {} with {} s", i, info.timed, info.seconds));
      }
      *pattern += info.timed ? 'T' : '-';
    }
    return Status::Ok();
  };
  std::mutex mu;
  std::vector<std::string> small(2), broadcasts(2), large(2);
  auto results = RunRanks(2, [&](Communicator& comm) -> Status {
    std::string s, b, l;
    CHOIR_RETURN_IF_ERROR(pattern_of(comm, 4, 10, &s));
    int32_t value = 5;
    Work w = comm.Broadcast(&value, &value, 1, DataType::kInt32, 0);  // another kind: timed first
    CHOIR_RETURN_IF_ERROR(w.Wait());
    b += w.info().timed ? 'T' : '-';
    CHOIR_RETURN_IF_ERROR(pattern_of(comm, 1024, 3, &l));  // 4 KiB: on the progress thread
    // An alltoallv's class depends on each rank's counts: always timed.
    std::vector<float> v_in(4, 1.0f), v_out(4, 0.0f);
    const std::vector<size_t> counts = {2, 2};
    for (int i = 0; i < 3; ++i) {
      Work v = comm.AlltoallV(v_in.data(), counts, v_out.data(), counts, DataType::kFloat32);
      CHOIR_RETURN_IF_ERROR(v.Wait());
      l += v.info().timed ? 'V' : '-';
    }
    std::lock_guard<std::mutex> lock(mu);
    small[static_cast<size_t>(comm.rank())] = s;
    broadcasts[static_cast<size_t>(comm.rank())] = b;
    large[static_cast<size_t>(comm.rank())] = l;
    return Status::Ok();
  }, TransportOptions("shm", 30s));
  ExpectAllOk(results);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(small[static_cast<size_t>(r)], "T-------T-") << "rank " << r;
    EXPECT_EQ(broadcasts[static_cast<size_t>(r)], "T") << "rank " << r;
    EXPECT_EQ(large[static_cast<size_t>(r)], "TTTVVV") << "rank " << r;
  }
  params::ScopedOverride every("CHOIR_TIME_ONE_IN", "1");
  results = RunRanks(2, [&](Communicator& comm) -> Status {
    std::string s;
    CHOIR_RETURN_IF_ERROR(pattern_of(comm, 4, 10, &s));
    if (s != "TTTTTTTTTT") return Status(Code::kInternal, "with CHOIR_TIME_ONE_IN=1: " + s);
    return Status::Ok();
  }, TransportOptions("shm", 30s));
  ExpectAllOk(results);
  // Out of range: refused where it is set.
  const Status refused = SetSetting("CHOIR_TIME_ONE_IN", "0");
  EXPECT_EQ(refused.code(), Code::kInvalidSetting);
  EXPECT_NE(refused.message().find("CHOIR_TIME_ONE_IN='0' is outside 1..1000000"), std::string::npos)
      << refused.ToString();
}

// A rank that destroys its communicator says bye: peers that go on among
// themselves are not disturbed by its closed connections (the exit race of a
// job's last collective), and one that still expects data from it gets a
// PeerLost that says the ranks ran different operations.
TEST(CommFailureTest, DestroyedPeerSaysByeAndIsOnlyAnErrorWhenNeeded) {
  auto results = RunRanks(3, [](Communicator& world) -> Status {
    auto sub = world.Split(0, world.rank());
    if (!sub.ok()) return sub.status();
    if (world.rank() == 0) {
      sub->reset();
      return world.Barrier().Wait();
    }
    CHOIR_RETURN_IF_ERROR(world.Barrier().Wait());
    Communicator& c = **sub;
    const int other = c.rank() == 1 ? 2 : 1;
    // Rank 1 waits for a while, checking its other peers' connections meanwhile.
    if (c.rank() == 2) std::this_thread::sleep_for(300ms);
    for (int i = 0; i < 20; ++i) {
      int32_t mine = 100 * c.rank() + i, theirs = -1;
      Work s = c.Send(&mine, 1, DataType::kInt32, other, i);
      Work r = c.Recv(&theirs, 1, DataType::kInt32, other, i);
      CHOIR_RETURN_IF_ERROR(s.Wait());
      CHOIR_RETURN_IF_ERROR(r.Wait());
      if (theirs != 100 * other + i) return Status(Code::kInternal, "wrong value " + std::to_string(theirs));
    }
    if (c.rank() != 1) return Status::Ok();
    int32_t x = 0;
    const Status lost = c.Recv(&x, 1, DataType::kInt32, 0, 7).Wait();
    if (lost.code() != Code::kPeerLost || lost.message().find("left the communicator") == std::string::npos ||
        lost.message().find("tag 7") == std::string::npos) {
      return Status(Code::kInternal, "want PeerLost naming the departure, got " + lost.ToString());
    }
    return Status::Ok();
  }, TransportOptions("tcp", 10s));
  ExpectAllOk(results);
}

std::string WriteTempFile(const std::string& stem, const std::string& text) {
  const std::string path = ::testing::TempDir() + testing::UniqueName(stem) + ".json";
  std::FILE* f = std::fopen(path.c_str(), "w");
  EXPECT_NE(f, nullptr) << path;
  if (f != nullptr) {
    std::fputs(text.c_str(), f);
    std::fclose(f);
  }
  return path;
}

// CHOIR_TOPO_FILE replaces detection: its hosts decide which ranks share
// memory, its link classes feed the cost model, and sub-communicators keep
// both.
TEST(CommTopologyTest, TopologyFileGivesHostsLinksAndSelection) {
  const std::string path = WriteTempFile("topo", R"({"version": 1, "world_size": 4,
    "hosts": [{"name": "node-a", "ranks": [0, 1]}, {"name": "node-b", "ranks": [2, 3]}],
    "links": {"inter_host": {"bandwidth_gbps": 0.5, "latency_us": 40}}})");
  params::ScopedOverride file("CHOIR_TOPO_FILE", path);
  auto results = RunRanks(4, [&](Communicator& comm) -> Status {
    const Topology& t = comm.topology();
    if (t.source != "file " + path || t.hosts.size() != 2 || t.hosts[1].name != "node-b" ||
        t.hosts[1].ranks != std::vector<int>{2, 3}) {
      return Status(Code::kInternal, "topology is not the file's: " + DescribeTopology(t));
    }
    const LinkClass* inter = t.FindLink("inter_host");
    if (inter == nullptr || inter->bandwidth_gbps != 0.5 || inter->latency_us != 40) {
      return Status(Code::kInternal, "inter_host link is not the file's");
    }
    std::vector<float> v(1 << 20, static_cast<float>(comm.rank() + 1));
    Work w = comm.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum);
    CHOIR_RETURN_IF_ERROR(w.Wait());
    if (w.info().algorithm != "hier") return Status(Code::kInternal, "selected " + w.info().algorithm + ", not hier");
    for (float x : v) {
      if (x != 10.0f) return Status(Code::kInternal, "wrong sum " + std::to_string(x));
    }
    auto sub = comm.Split(comm.rank() % 2, comm.rank());
    if (!sub.ok()) return sub.status();
    const Topology& st = (*sub)->topology();
    if (st.source != t.source || st.hosts.size() != 2 || st.FindLink("inter_host")->bandwidth_gbps != 0.5) {
      return Status(Code::kInternal, "the sub-communicator lost the file's topology: " + DescribeTopology(st));
    }
    return Status::Ok();
  }, TransportOptions("auto", 20s));
  ExpectAllOk(results);
  std::remove(path.c_str());
}

TEST(CommTopologyTest, DetectedTopologyNamesThisHost) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    const Topology& t = comm.topology();
    if (t.source != "detected" || t.hosts.size() != 1 || t.ranks.size() != 2 || t.ranks[1].rank != 1) {
      return Status(Code::kInternal, "unexpected topology: " + DescribeTopology(t));
    }
    return Status::Ok();
  }, TransportOptions("auto", 20s));
  ExpectAllOk(results);
}

TEST(CommTopologyTest, BadTopologyFileFailsCreationWithItsLine) {
  const std::string path = WriteTempFile("badtopo", "{\"version\": 1,\n \"hosts\": [{\"name\": \"a\", \"ranks\": [0, 0]}]}");
  params::ScopedOverride file("CHOIR_TOPO_FILE", path);
  auto results = RunRanks(1, [](Communicator&) -> Status { return Status::Ok(); }, TransportOptions("auto", 5s));
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].create.code(), Code::kBadTopologyFile) << results[0].create.ToString();
  EXPECT_NE(results[0].create.message().find("CHOIR_TOPO_FILE"), std::string::npos) << results[0].create.ToString();
  EXPECT_NE(results[0].create.message().find(":2:"), std::string::npos) << results[0].create.ToString();
  std::remove(path.c_str());
}

// Small allreduces travel in flagged lines (AreaOp::PublishLines): exact
// results at the lines' edges (56 bytes each; up to 392 bytes in a small
// slot, up to 1 KiB in a medium one, the slot's payload beyond), for 1-byte,
// 4-byte and 8-byte elements, in place and not, 2-5 ranks (5 gather more
// than the reader's stack buffer holds), under the Intel table (lines up
// to 512 bytes, the slot's payload from 513: AllreduceLinesMaxBytes) and
// the Zen 5 one (lines up to 1 KiB with a core per rank; up to 512 bytes
// where the ranks share cores, which depends on the machine's CPUs: with
// 2 of them, 3-5 ranks share and 2 do not). Between the allreduces one or two
// allgathers (in turn, so that both kinds of operation take every slot)
// of a size in the same ring leave the slots' own layout in the lines, and
// every call's values differ from the last one's, so a reader that took
// stale lines fails.
TEST(CommFlatTest, AllreducesThroughFlaggedLinesAreExact) {
  for (const char* tuning : {"intel", "amd-zen5"}) {
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    for (int n : {2, 3, 4, 5}) {
      auto results = RunRanks(n, [n](Communicator& comm) -> Status {
        const int me = comm.rank();
        int call = 0;
        for (const DataType t : {DataType::kInt8, DataType::kFloat32, DataType::kInt64}) {
          const size_t es = DataTypeSize(t);
          for (size_t bytes : {1, 8, 55, 56, 57, 112, 113, 200, 392, 400, 512, 513, 1000, 1024, 1032}) {
            const size_t count = std::max<size_t>(1, bytes / es);
            for (bool in_place : {false, true}) {
              ++call;
              // Element j of rank r holds (j + r + call) % 5 + 1: sums stay small.
              std::vector<uint8_t> in(count * es), out(count * es, 0xee);
              auto value = [&](size_t j, int r) {
                return static_cast<int64_t>((j + static_cast<size_t>(r + call)) % 5 + 1);
              };
              for (size_t j = 0; j < count; ++j) {
                const int64_t v = value(j, me);
                if (t == DataType::kInt8) in[j] = static_cast<uint8_t>(v);
                if (t == DataType::kFloat32) reinterpret_cast<float*>(in.data())[j] = static_cast<float>(v);
                if (t == DataType::kInt64) reinterpret_cast<int64_t*>(in.data())[j] = v;
              }
              uint8_t* dst = in_place ? in.data() : out.data();
              Work w = comm.Allreduce(in.data(), dst, count, t, ReduceOp::kSum);
              CHOIR_RETURN_IF_ERROR(w.Wait());
              if (w.info().algorithm != "shm_flat") {
                return Status(Code::kInternal, fmt::format("{} B ran {}, not shm_flat", bytes, w.info().algorithm));
              }
              for (size_t j = 0; j < count; ++j) {
                int64_t want = 0;
                for (int r = 0; r < n; ++r) want += value(j, r);
                int64_t got = 0;
                if (t == DataType::kInt8) got = static_cast<int8_t>(dst[j]);
                if (t == DataType::kFloat32) got = static_cast<int64_t>(reinterpret_cast<const float*>(dst)[j]);
                if (t == DataType::kInt64) got = reinterpret_cast<const int64_t*>(dst)[j];
                if (got != want) {
                  return Status(Code::kInternal, fmt::format("{} B of {}{}: element {} is {}, want {}", bytes,
                                                             DataTypeName(t), in_place ? " in place" : "", j, got, want));
                }
              }
              // Allgathers in the allreduce's ring (small slots up to 480
              // bytes of payload, full ones beyond), with the slots' layout
              // (blocks of 2-5 lines would travel in lines).
              const size_t block_bytes = count * es <= 392 ? std::max<size_t>(count * es, 300) : 600;
              for (int k = 0; k < 1 + call % 2; ++k) {
                std::vector<uint8_t> block(block_bytes, static_cast<uint8_t>(0x40 + me + call)), all(block_bytes * n);
                CHOIR_RETURN_IF_ERROR(comm.Allgather(block.data(), all.data(), block_bytes, DataType::kUint8).Wait());
                for (size_t i = 0; i < all.size(); ++i) {
                  if (all[i] != static_cast<uint8_t>(0x40 + i / block_bytes + call)) {
                    return Status(Code::kInternal, "allgather between the allreduces");
                  }
                }
              }
            }
          }
        }
        return Status::Ok();
      }, TransportOptions("shm", 30s));
      SCOPED_TRACE(std::to_string(n) + " ranks, CHOIR_SHM_TUNING=" + tuning);
      ExpectAllOk(results);
    }
  }
}

// A stream of equal calls through lines (allreduce of 16 and 400 bytes, a
// small and a medium slot; allgather and reduce_scatter of 100-byte blocks),
// one rank late now and then: a slot's lines from the operation one ring
// before carry the same signature; the id and the history in their flags
// tell them from this call's. Either alone does, so this catches the loss
// of both only.
TEST(CommFlatTest, EqualCallsThroughLinesNeverTakeStaleLines) {
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [n](Communicator& comm) -> Status {
      const int me = comm.rank();
      for (size_t count : {4, 100}) {
        std::vector<int32_t> in(count), out(count);
        for (int call = 0; call < 300; ++call) {
          if (me == n - 1 && call % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(call % 3 * 50));
          for (size_t j = 0; j < count; ++j) in[j] = call * 10 + me + static_cast<int32_t>(j);
          CHOIR_RETURN_IF_ERROR(comm.Allreduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum).Wait());
          for (size_t j = 0; j < count; ++j) {
            const int32_t want = n * (call * 10 + static_cast<int32_t>(j)) + n * (n - 1) / 2;
            if (out[j] != want) {
              return Status(Code::kInternal, fmt::format("{} ints, call {}: [{}] = {}, want {}", count, call, j, out[j], want));
            }
          }
        }
      }
      std::vector<uint8_t> block(100), all(100 * static_cast<size_t>(n));
      for (int call = 0; call < 300; ++call) {
        if (me == n - 1 && call % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(call % 3 * 50));
        std::fill(block.begin(), block.end(), static_cast<uint8_t>(call + me));
        CHOIR_RETURN_IF_ERROR(comm.Allgather(block.data(), all.data(), block.size(), DataType::kUint8).Wait());
        for (size_t i = 0; i < all.size(); ++i) {
          if (all[i] != static_cast<uint8_t>(call + static_cast<int>(i / 100))) {
            return Status(Code::kInternal, fmt::format("allgather call {}: byte {} is {}", call, i, all[i]));
          }
        }
      }
      std::vector<int8_t> parts(100 * static_cast<size_t>(n)), sum(100);
      for (int call = 0; call < 300; ++call) {
        if (me == n - 1 && call % 7 == 0) std::this_thread::sleep_for(std::chrono::microseconds(call % 3 * 50));
        for (size_t i = 0; i < parts.size(); ++i) parts[i] = static_cast<int8_t>((call + me + static_cast<int>(i / 100)) % 9);
        CHOIR_RETURN_IF_ERROR(comm.ReduceScatter(parts.data(), sum.data(), 100, DataType::kInt8, ReduceOp::kSum).Wait());
        int want = 0;
        for (int r = 0; r < n; ++r) want += (call + r + me) % 9;
        for (size_t i = 0; i < sum.size(); ++i) {
          if (sum[i] != want) return Status(Code::kInternal, fmt::format("reduce_scatter call {}: {} not {}", call, sum[i], want));
        }
      }
      return Status::Ok();
    }, TransportOptions("shm", 30s));
    SCOPED_TRACE(n);
    ExpectAllOk(results);
  }
}

// An allgather or reduce_scatter whose blocks take 2-5 lines (57-280 bytes)
// travels in them (AreaOp::BlockLinesFit): exact at the edges, in place and
// not, 2-5 ranks, with blocks just outside the bound (slots) and allreduces
// (lines too, of other sizes) in between, so that every slot of the ring
// holds other operations' lines and the slots' layout in turn; every call's
// values differ from the last one's. Under the Intel table (a
// reduce_scatter's blocks in lines up to 3 of them, 168 bytes:
// ReduceScatterLinesMaxBlock) and the Zen 5 one (up to 5).
TEST(CommFlatTest, AllgathersAndReduceScattersThroughFlaggedLinesAreExact) {
  for (const char* tuning : {"intel", "amd-zen5"}) {
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    for (int n : {2, 3, 4, 5}) {
      auto results = RunRanks(n, [n](Communicator& comm) -> Status {
        const int me = comm.rank();
        const auto rows = static_cast<size_t>(n);
        int call = 0;
        for (int round = 0; round < 3; ++round) {
          for (size_t block : {56, 57, 64, 112, 113, 168, 169, 200, 280, 281}) {
            for (bool in_place : {false, true}) {
              ++call;
              auto value = [&](size_t i, int r) { return static_cast<uint8_t>(i * 7 + static_cast<size_t>(r * 31 + call)); };
              std::vector<uint8_t> in(block), all(block * rows, 0xee);
              for (size_t i = 0; i < block; ++i) in[i] = value(i, me);
              uint8_t* own = all.data() + static_cast<size_t>(me) * block;
              if (in_place) std::copy(in.begin(), in.end(), own);
              Work w = comm.Allgather(in_place ? own : in.data(), all.data(), block, DataType::kUint8);
              CHOIR_RETURN_IF_ERROR(w.Wait());
              if (w.info().algorithm != "shm_flat") {
                return Status(Code::kInternal, fmt::format("{} B ran {}, not shm_flat", block, w.info().algorithm));
              }
              for (size_t i = 0; i < all.size(); ++i) {
                const uint8_t want = value(i % block, static_cast<int>(i / block));
                if (all[i] != want) {
                  return Status(Code::kInternal, fmt::format("{} B blocks{}, call {}: byte {} is {}, want {}", block,
                                                             in_place ? " in place" : "", call, i, all[i], want));
                }
              }
              // A reduce_scatter of the same blocks: rank r's byte i of block b
              // is (i + b + r + call) % 5 + 1, so the sums stay below 2^7.
              auto part = [&](size_t i, size_t b, int r) {
                return static_cast<int8_t>((i + b + static_cast<size_t>(r + call)) % 5 + 1);
              };
              std::vector<int8_t> full(block * rows), mine(block, 99);
              for (size_t i = 0; i < full.size(); ++i) full[i] = part(i % block, i / block, me);
              int8_t* dst = in_place ? full.data() + static_cast<size_t>(me) * block : mine.data();
              Work rs = comm.ReduceScatter(full.data(), dst, block, DataType::kInt8, ReduceOp::kSum);
              CHOIR_RETURN_IF_ERROR(rs.Wait());
              if (rs.info().algorithm != "shm_flat") {
                return Status(Code::kInternal, fmt::format("reduce_scatter of {} B ran {}", block, rs.info().algorithm));
              }
              for (size_t i = 0; i < block; ++i) {
                int want = 0;
                for (int r = 0; r < n; ++r) want += part(i, static_cast<size_t>(me), r);
                if (dst[i] != want) {
                  return Status(Code::kInternal, fmt::format("reduce_scatter of {} B{}, call {}: byte {} is {}, want {}",
                                                             block, in_place ? " in place" : "", call, i, dst[i], want));
                }
              }
              // An allreduce of another size in the same ring: lines of its own.
              std::vector<int32_t> x(block / 8 + 1, call + me), sum(x.size());
              CHOIR_RETURN_IF_ERROR(comm.Allreduce(x.data(), sum.data(), x.size(), DataType::kInt32, ReduceOp::kSum).Wait());
              const int32_t want_sum = n * call + n * (n - 1) / 2;
              for (int32_t v : sum) {
                if (v != want_sum) return Status(Code::kInternal, fmt::format("allreduce between: {} not {}", v, want_sum));
              }
            }
          }
        }
        return Status::Ok();
      }, TransportOptions("shm", 30s));
      SCOPED_TRACE(std::to_string(n) + " ranks, CHOIR_SHM_TUNING=" + tuning);
      ExpectAllOk(results);
    }
  }
}

// The communicator remembers its last choice for equal calls: alternating
// collectives, counts, types and forced algorithms must each still get the
// algorithm their own selection gives, with correct results.
// Under every switch-point table, each with its own choices where they differ.
TEST(CommSelectionTest, RememberedChoiceNeverLeaksIntoOtherCalls) {
  for (const std::string tuning : {"intel", "amd", "amd-zen4", "amd-zen5"}) {
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    const bool amd = tuning != "intel";
    auto results = RunRanks(2, [amd, tuning](Communicator& comm) -> Status {
      // 128 KiB blocks of allgather: cma on the Intel table, the pipe on the
      // Zen 3 and Zen 5 ones, cma on the Zen 4 one when each rank has a core, judged as
      // the communicator judged it (from the CPUs each rank may run on).
      const bool share = RanksShareCpus(comm);
      const char* const mid_allgather =
          tuning == "amd" || tuning == "amd-zen5" || (tuning == "amd-zen4" && share) ? "shm_pipe" : "cma";
      std::vector<float> small(2, 1.0f), large(64 << 10, 1.0f), out(64 << 10, 0.0f);
      std::vector<double> dsmall(2, 1.0), dout(2, 0.0);
      CallOptions forced;
      forced.algorithm = "cma";
      auto expect = [](const Work& w, const std::string& algorithm, const char* what) -> Status {
        CHOIR_RETURN_IF_ERROR(w.Wait());
        if (w.info().algorithm != algorithm) {
          return Status(Code::kInternal, std::string(what) + ": " + w.info().algorithm + ", expected " + algorithm);
        }
        return Status::Ok();
      };
      for (int round = 0; round < 3; ++round) {
        CHOIR_RETURN_IF_ERROR(expect(comm.Allreduce(small.data(), out.data(), 2, DataType::kFloat32, ReduceOp::kSum),
                                     "shm_flat", "8 B allreduce"));
        if (out[0] != 2.0f) return Status(Code::kInternal, "8 B allreduce value");
        // Same collective and type, another count: its own choice (256 KiB:
        // single copy on the Intel table, the pipe on the AMD one).
        CHOIR_RETURN_IF_ERROR(expect(comm.Allreduce(large.data(), out.data(), large.size(), DataType::kFloat32,
                                                    ReduceOp::kSum),
                                     amd ? "shm_pipe" : "cma", "256 KiB allreduce"));
        if (out[12345] != 2.0f) return Status(Code::kInternal, "256 KiB allreduce value");
        // A forced algorithm is honoured and not remembered.
        CHOIR_RETURN_IF_ERROR(expect(comm.Allreduce(small.data(), out.data(), 2, DataType::kFloat32, ReduceOp::kSum,
                                                    forced),
                                     "cma", "forced 8 B allreduce"));
        CHOIR_RETURN_IF_ERROR(expect(comm.Allreduce(small.data(), out.data(), 2, DataType::kFloat32, ReduceOp::kSum),
                                     "shm_flat", "8 B allreduce after a forced one"));
        // Same count, another type or collective.
        CHOIR_RETURN_IF_ERROR(expect(comm.Allreduce(dsmall.data(), dout.data(), 2, DataType::kFloat64, ReduceOp::kSum),
                                     "shm_flat", "float64 allreduce"));
        if (dout[1] != 2.0) return Status(Code::kInternal, "float64 allreduce value");
        CHOIR_RETURN_IF_ERROR(expect(comm.Allgather(small.data(), out.data(), 2, DataType::kFloat32), "shm_flat",
                                     "allgather"));
        // (On the AMD table 64 KiB blocks stay in the slots only with a core
        // per rank; on the Zen 4 one they take cma then.)
        if (!amd || (tuning == "amd-zen4" && !share)) {
          CHOIR_RETURN_IF_ERROR(expect(comm.Allgather(large.data(), out.data(), 16 << 10, DataType::kFloat32),
                                       "cma", "64 KiB-block allgather"));
        }
        CHOIR_RETURN_IF_ERROR(expect(comm.Allgather(large.data(), out.data(), 32 << 10, DataType::kFloat32),
                                     mid_allgather, "128 KiB-block allgather"));
        if (out[(32 << 10) + 7] != 1.0f) return Status(Code::kInternal, "128 KiB-block allgather value");
        // Gather keeps the slots up to 16 KiB blocks, where they measured faster.
        for (const auto& [count, algorithm] : {std::pair<size_t, const char*>{4 << 10, "shm_flat"}, {8 << 10, "cma"}}) {
          std::vector<float> mine(count), all(2 * count, -1.0f);
          for (size_t i = 0; i < count; ++i) mine[i] = static_cast<float>(comm.rank() * 100000 + i);
          CHOIR_RETURN_IF_ERROR(expect(comm.Gather(mine.data(), all.data(), count, DataType::kFloat32, 0), algorithm,
                                       "gather"));
          for (size_t i = 0; comm.rank() == 0 && i < all.size(); ++i) {
            if (all[i] != static_cast<float>((i / count) * 100000 + i % count)) {
              return Status(Code::kInternal, "gather of " + std::to_string(count) + " at " + std::to_string(i));
            }
          }
        }
      }
      return Status::Ok();
    }, TransportOptions("shm"));
    SCOPED_TRACE(tuning);
    ExpectAllOk(results);
  }
}

// Single-copy (cma) collectives on buffers large enough for the chunked and
// streaming paths, the broadcast root's share and the gather's pushed
// blocks, with odd sizes, every root.
TEST(CommLargeTest, CmaLargeBuffersMatchReference) {
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [](Communicator& comm) -> Status {
      SweepOptions so;
      so.ops = {"broadcast", "allreduce", "allgather", "reduce_scatter", "reduce", "gather"};
      so.dtypes = {DataType::kFloat32};
      so.counts = {300001, 1310733, 2200001};  // blocks below and above kStreamingBytes
      so.in_place = true;
      // The average too: every cma walk divides float32 in the kernel (2
      // ranks multiply by 1/2, 3 divide).
      so.reduce_ops = {ReduceOp::kSum, ReduceOp::kAvg};
      so.algorithm = "cma";
      CHOIR_RETURN_IF_ERROR(CheckSweep(comm, so));
      // Types whose average is divided apart, chunk by chunk: slices of
      // one and of several chunks, and (2200001) every slice of several,
      // the reduce_scatter's and the reduce root's streamed.
      so.ops = {"allreduce", "reduce_scatter", "reduce"};
      so.dtypes = {DataType::kInt32, DataType::kBFloat16};
      so.counts = {300001, 2200001};
      so.reduce_ops = {ReduceOp::kAvg};
      return CheckSweep(comm, so);
    }, TransportOptions("shm", 60s));
    ExpectAllOk(results);
  }
}

// cma's alltoall with ranks in place. An alltoall of which any rank runs in
// place goes through the pipe on every rank ("cma+pipe"), whichever ranks
// are in place, with heap buffers and with SharedBuffers. Without a pipe
// (CHOIR_SHM_PIPE_BYTES=0), and for an alltoallv (uneven splits, equal in
// and out), a rank in place holds the peers' blocks in scratch until every
// peer has read its own ("cma"). Exact values, 2 and 3 ranks, blocks below
// and past the kernel copy's pieces.
TEST(CommLargeTest, CmaAlltoallInPlaceMatchesReference) {
  for (const std::string pipe_bytes : {"4M", "0"}) {
    params::ScopedOverride pipe("CHOIR_SHM_PIPE_BYTES", pipe_bytes);
    const bool piped = pipe_bytes != "0";
    for (int n : {2, 3}) {
      auto results = RunRanks(n, [n, piped](Communicator& comm) -> Status {
        SweepOptions so;
        so.ops = {"alltoall", "alltoallv"};
        so.dtypes = {DataType::kFloat32};
        so.counts = {1000, 70001, 300001};
        so.out_of_place = false;
        so.algorithm = "cma";
        auto cases = RunSweep(comm, so);
        if (!cases.ok()) return cases.status();
        if (cases->size() != 6) return Status(Code::kInternal, std::to_string(cases->size()) + " cases ran");
        for (const SweepCase& c : *cases) {
          const std::string want = c.op == "alltoall" && piped ? "cma+pipe" : "cma";
          if (!c.ok || !c.in_place || c.algorithm != want) {
            return Status(Code::kInternal, c.op + " count " + std::to_string(c.count) + " ran " + c.algorithm +
                                               (c.in_place ? " in place: " : " out of place: ") + c.error);
          }
        }
        // Some ranks in place and the others not: rank `alone` alone, then
        // every rank but it. The alltoallv's splits are symmetric (what
        // rank i sends rank j, j sends i), so in and out are equal.
        const int r = comm.rank();
        const auto split = [](bool v, int from, int to) {
          return v ? static_cast<size_t>(50000 + 1000 * (from + to)) : size_t{70001};
        };
        for (const bool shared : {false, true}) {
          for (const bool v : {false, true}) {
            for (int alone = 0; alone < n; ++alone) {
              for (const bool only : {true, false}) {
                const bool in_place = (r == alone) == only;
                std::vector<size_t> counts(static_cast<size_t>(n));
                size_t total = 0;
                for (int p = 0; p < n; ++p) total += counts[static_cast<size_t>(p)] = split(v, r, p);
                auto send = SharedBuffer::Allocate(total * sizeof(float));
                auto recv = SharedBuffer::Allocate(total * sizeof(float));
                if (!send.ok() || !recv.ok()) return Status(Code::kInternal, "SharedBuffer::Allocate failed");
                std::vector<float> heap_in(total), heap_out(total);
                float* in = shared ? send->as<float>() : heap_in.data();
                float* out = in_place ? in : (shared ? recv->as<float>() : heap_out.data());
                for (size_t i = 0; i < total; ++i) in[i] = static_cast<float>(r * 1000000 + static_cast<int>(i));
                CallOptions call;
                call.algorithm = "cma";
                Work w = v ? comm.AlltoallV(in, counts, out, counts, DataType::kFloat32, call)
                           : comm.Alltoall(in, out, split(false, 0, 0), DataType::kFloat32, call);
                CHOIR_RETURN_IF_ERROR(w.Wait());
                const std::string what = fmt::format("{} {} buffers, rank {} {}in place", v ? "alltoallv" : "alltoall",
                                                     shared ? "shared" : "heap", alone, only ? "alone " : "not ");
                const std::string route = w.info().algorithm;
                const bool want_pipe = piped && !v;
                if (route.rfind("cma", 0) != 0 || (route.find("+pipe") != std::string::npos) != want_pipe) {
                  return Status(Code::kInternal, what + ": ran " + route);
                }
                size_t at = 0;
                for (int p = 0; p < n; ++p) {
                  size_t from = 0;  // where p's block for this rank starts in p's input
                  for (int q = 0; q < r; ++q) from += split(v, p, q);
                  for (size_t i = 0; i < split(v, p, r); ++i) {
                    const float want = static_cast<float>(p * 1000000 + static_cast<int>(from + i));
                    if (out[at + i] != want) {
                      return Status(Code::kInternal, fmt::format("{}: block from rank {} at {}", what, p, i));
                    }
                  }
                  at += split(v, p, r);
                }
              }
            }
          }
        }
        return Status::Ok();
      }, TransportOptions("shm", 60s));
      SCOPED_TRACE(std::to_string(n) + " ranks, CHOIR_SHM_PIPE_BYTES=" + pipe_bytes);
      ExpectAllOk(results);
    }
  }
}

// cma's reduce cuts the root a larger slice by each table's combine cost
// (1.2 on the Intel table with heap buffers, 0.2 through SharedBuffers and on
// the AMD ones): under both tables, with both kinds of buffer, 2 and 3
// ranks, the sweep's changing roots, counts that leave the slices uneven,
// exact values.
TEST(CommLargeTest, CmaReduceSlicesOfEveryTableMatchReference) {
  for (const std::string tuning : {"intel", "amd"}) {
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    for (const bool shared : {false, true}) {
      for (int n : {2, 3}) {
        auto results = RunRanks(n, [shared](Communicator& comm) -> Status {
          SweepOptions so;
          so.ops = {"reduce"};
          so.dtypes = {DataType::kFloat32, DataType::kInt32};
          so.counts = {1, 17, 4099, 70001, 300001};
          so.all_reduce_ops = false;
          so.algorithm = "cma";
          so.shared_buffers = shared;
          return CheckSweep(comm, so);
        }, TransportOptions("shm", 60s));
        SCOPED_TRACE(tuning + (shared ? ", SharedBuffers, " : ", heap, ") + std::to_string(n) + " ranks");
        ExpectAllOk(results);
      }
    }
  }
}

// cma's allgather with one block below and one above the size from which
// the peers read a block instead of its owner writing it into them (with a
// core per rank 512 KiB on the amd table, 1 MiB on the Zen 4 one; 4 MiB
// elsewhere): both kinds in one call, exact values, in place and not, under
// both AMD tables.
TEST(CommLargeTest, CmaAllgatherMixesPushedAndPulledBlocks) {
  for (const std::string tuning : {"amd", "amd-zen4"}) {
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    auto results = RunRanks(2, [](Communicator& comm) -> Status {
      // Floats: blocks just below and above 512 KiB, 1 MiB, then 4 MiB.
      for (const size_t unit : {size_t{1} << 17, size_t{1} << 18, size_t{1} << 20}) {
        const size_t c[] = {unit - 100, unit + 200};
        const size_t total = c[0] + c[1], offset = comm.rank() == 0 ? 0 : c[0];
        const size_t mine = c[comm.rank()];
        for (const bool in_place : {false, true}) {
          std::vector<float> send(mine), recv(total, -1.0f);
          for (size_t i = 0; i < mine; ++i) send[i] = static_cast<float>(comm.rank() * 10000000 + i);
          if (in_place) std::copy(send.begin(), send.end(), recv.begin() + static_cast<ptrdiff_t>(offset));
          CallOptions forced;
          forced.algorithm = "cma";
          Work w = comm.AllgatherV(in_place ? recv.data() + offset : send.data(), mine, recv.data(), c,
                                   DataType::kFloat32, forced);
          CHOIR_RETURN_IF_ERROR(w.Wait());
          for (size_t i = 0; i < total; ++i) {
            const bool first = i < c[0];
            const float want = static_cast<float>((first ? 0 : 10000000) + (first ? i : i - c[0]));
            if (recv[i] != want) {
              return Status(Code::kInternal, "allgatherv blocks " + std::to_string(c[0]) + "/" + std::to_string(c[1]) +
                                                 (in_place ? " in place" : "") + ": element " + std::to_string(i));
            }
          }
        }
      }
      return Status::Ok();
    }, TransportOptions("shm", 60s));
    SCOPED_TRACE(tuning);
    ExpectAllOk(results);
  }
}

// Buffers from SharedBuffers: every rank reads and writes its peers' buffers
// with plain loads and stores (threads as ranks, so ASan and TSan see every
// access), through cma's walks and shm_pipe's switch to them, in place and
// not, with sizes below and above the push and streaming thresholds.
TEST(CommSharedTest, SharedBuffersMatchReferenceAndAreReadDirectly) {
  for (int n : {2, 3, 4}) {
    auto results = RunRanks(n, [](Communicator& comm) -> Status {
      SweepOptions so;
      so.ops = {"broadcast", "allreduce", "allgather", "reduce_scatter", "reduce", "alltoall", "gather"};
      so.dtypes = {DataType::kFloat32};
      so.counts = {70001, 300001, 2200001};
      so.all_reduce_ops = false;
      so.reduce_ops = {ReduceOp::kSum, ReduceOp::kAvg};
      so.shared_buffers = true;
      auto cases = RunSweep(comm, so);
      if (!cases.ok()) return cases.status();
      if (cases->size() < 40) return Status(Code::kInternal, "only " + std::to_string(cases->size()) + " cases");
      int direct = 0;
      for (const SweepCase& c : *cases) {
        const std::string what = c.op + " " + c.dtype + " " + c.reduce_op + " count " + std::to_string(c.count) +
                                 (c.in_place ? " in-place" : "") + " [" + c.algorithm + "]";
        if (!c.ok) return Status(Code::kInternal, what + ": " + c.error);
        direct += c.algorithm.ends_with("+shared") ? 1 : 0;
        // Every rank reads or writes a peer's buffer in these (an in-place
        // alltoall reads a private copy of the input instead).
        const bool must = c.op == "allreduce" || c.op == "allgather" || c.op == "reduce_scatter" ||
                          (c.op == "alltoall" && !c.in_place);
        if (must && !c.algorithm.ends_with("+shared")) {
          return Status(Code::kInternal, what + " did not reach its peers' SharedBuffers");
        }
      }
      return direct > 0 ? Status::Ok() : Status(Code::kInternal, "no case read a peer's SharedBuffer");
    }, TransportOptions("shm", 120s));
    ExpectAllOk(results);
  }
}

// Alltoall through the pipe with every buffer in SharedBuffers, some ranks
// in place and some not: each rank's choice between reading its peers'
// inputs directly and staging must not depend on its own arguments alone
// (a rank in place staging while the others read directly would wait
// forever). Exact values, 2 and 3 ranks, rank 0 alone in place and all but
// rank 0 in place.
TEST(CommSharedTest, AlltoallWithSomeRanksInPlaceMatchesReference) {
  for (int n : {2, 3}) {
    for (const bool zero_in_place : {true, false}) {
      auto results = RunRanks(n, [&](Communicator& comm) -> Status {
        constexpr size_t kCount = 70001;  // per block: past the slots
        const size_t total = kCount * static_cast<size_t>(n);
        auto send = SharedBuffer::Allocate(total * sizeof(float));
        auto recv = SharedBuffer::Allocate(total * sizeof(float));
        if (!send.ok() || !recv.ok()) return Status(Code::kInternal, "SharedBuffer::Allocate failed");
        auto* in = send->as<float>();
        for (size_t i = 0; i < total; ++i) in[i] = static_cast<float>(comm.rank() * 1000000 + static_cast<int>(i));
        const bool in_place = (comm.rank() == 0) == zero_in_place;
        float* out = in_place ? in : recv->as<float>();
        CallOptions call;
        call.algorithm = "shm_pipe";
        CHOIR_RETURN_IF_ERROR(comm.Alltoall(in, out, kCount, DataType::kFloat32, call).Wait());
        for (int p = 0; p < n; ++p) {
          for (size_t i = 0; i < kCount; i += 997) {
            const float want = static_cast<float>(p * 1000000 + static_cast<int>(comm.rank() * kCount + i));
            if (out[p * kCount + i] != want) {
              return Status(Code::kInternal, "block from rank " + std::to_string(p) + " at " + std::to_string(i));
            }
          }
        }
        return Status::Ok();
      }, TransportOptions("shm", 30s));
      SCOPED_TRACE(std::to_string(n) + " ranks, rank 0 " + (zero_in_place ? "in place" : "not in place"));
      ExpectAllOk(results);
    }
  }
}

// Same-host allgather and alltoall with heap buffers time their two walks
// and switch between them (walk_choice.h): over 60 calls each, with fresh
// data every call, every output must be exact, the kernel copy must have run
// (it is tried at calls 16 and 48 at the latest, and WorkInfo names it
// "shm_pipe+cma"), and every rank must have taken the same walk each time
// (else the ranks would wait on each other's pipes until the timeout). An
// in-place alltoall in between always takes the pipe. With CHOIR_SHM_ADAPT=0,
// or without process_vm_readv, the pipe only.
TEST(CommPipeTest, AdaptiveWalksAgreeAndMatchReference) {
  struct Setting {
    const char* adapt;
    const char* cma;
    bool switches;
  };
  for (const Setting& set : {Setting{"1", "auto", true}, Setting{"0", "auto", false}, Setting{"1", "off", false}}) {
    params::ScopedOverride adapt("CHOIR_SHM_ADAPT", set.adapt);
    params::ScopedOverride cma("CHOIR_SHM_CMA", set.cma);
    for (int n : {2, 3}) {
      auto results = RunRanks(n, [&](Communicator& comm) -> Status {
        constexpr size_t kCount = 70001;  // per block: past the slots
        constexpr int kPeriod = static_cast<int>(algorithms::WalkChooser::kExplorePeriod);
        // Past the second try; the in-place alltoalls (one in ten) take no
        // part in the choice and do not count.
        constexpr int kCalls = kPeriod + kPeriod / 2 + 12;
        const size_t total = kCount * static_cast<size_t>(n);
        const int me = comm.rank();
        std::vector<float> in(total);
        std::vector<float> out(total);
        CallOptions call;
        call.algorithm = "shm_pipe";
        int kernel_walks[2] = {0, 0};
        for (int k = 0; k < kCalls; ++k) {
          auto value = [&](int rank, size_t i) { return static_cast<float>((rank * 131 + k) * 1000003 + i % 1000003); };
          // Allgather: rank p's block is value(p, i) for i in its block.
          for (size_t i = 0; i < kCount; ++i) in[i] = value(me, i);
          Work w = comm.Allgather(in.data(), out.data(), kCount, DataType::kFloat32, call);
          CHOIR_RETURN_IF_ERROR(w.Wait());
          kernel_walks[0] += w.info().algorithm == "shm_pipe+cma";
          for (int p = 0; p < n; ++p) {
            for (size_t i = 0; i < kCount; ++i) {
              if (out[static_cast<size_t>(p) * kCount + i] != value(p, i)) {
                return Status(Code::kInternal, "allgather call " + std::to_string(k) + ": block of rank " +
                                                   std::to_string(p) + " wrong at " + std::to_string(i));
              }
            }
          }
          // Alltoall: block q of rank p's input is value(p, q * kCount + i).
          for (size_t i = 0; i < total; ++i) in[i] = value(me, i);
          const bool in_place = k % 10 == 5;
          float* dst = in_place ? in.data() : out.data();
          w = comm.Alltoall(in.data(), dst, kCount, DataType::kFloat32, call);
          CHOIR_RETURN_IF_ERROR(w.Wait());
          if (in_place && w.info().algorithm != "shm_pipe") {
            return Status(Code::kInternal, "an in-place alltoall took " + w.info().algorithm);
          }
          kernel_walks[1] += w.info().algorithm == "shm_pipe+cma";
          for (int p = 0; p < n; ++p) {
            for (size_t i = 0; i < kCount; ++i) {
              if (dst[static_cast<size_t>(p) * kCount + i] != value(p, static_cast<size_t>(me) * kCount + i)) {
                return Status(Code::kInternal, "alltoall call " + std::to_string(k) + ": block from rank " +
                                                   std::to_string(p) + " wrong at " + std::to_string(i));
              }
            }
          }
        }
        for (int c = 0; c < 2; ++c) {
          const bool ok = set.switches ? kernel_walks[c] >= 2 : kernel_walks[c] == 0;
          if (!ok) {
            return Status(Code::kInternal, std::string(c == 0 ? "allgather" : "alltoall") + " took the kernel copy in " +
                                               std::to_string(kernel_walks[c]) + " of " + std::to_string(kCalls) +
                                               " calls");
          }
        }
        return Status::Ok();
      }, TransportOptions("shm", 60s));
      SCOPED_TRACE(std::to_string(n) + " ranks, CHOIR_SHM_ADAPT=" + set.adapt + ", CHOIR_SHM_CMA=" + set.cma);
      ExpectAllOk(results);
    }
  }
}

// shm_pipe with a tiny pipe (many steps, both parities, chunks that split
// elements unevenly) and process_vm_readv turned off, as in containers that
// forbid it: every dtype and reduce op, in place and not, 2-4 ranks.
TEST(CommPipeTest, TinyPipeWithoutCmaMatchesReference) {
  params::ScopedOverride pipe("CHOIR_SHM_PIPE_BYTES", "8K");
  params::ScopedOverride cma("CHOIR_SHM_CMA", "off");
  for (int n : {2, 3, 4}) {
    auto results = RunRanks(n, [](Communicator& comm) -> Status {
      SweepOptions so;
      so.ops = {"allreduce", "reduce_scatter", "allgather", "alltoall", "broadcast", "reduce"};
      so.counts = {0, 1, 5, 1000, 4099, 70001};
      so.algorithm = "shm_pipe";
      return CheckSweep(comm, so, "shm_pipe", 50);
    }, TransportOptions("shm", 120s));
    ExpectAllOk(results);
  }
}

// From 512 KiB of buffer, where the ranks have a core each, the pipe's
// allreduce stores the result it stages for its peers and its own output
// in one pass (kOnePassResultMinBytes in shm_pipe.cc): past that, with the
// stages written with plain and with streaming stores, outputs below and
// past the streaming threshold (4 MiB), every reduce op, in place and not.
// (Where the ranks share cores, as on a 1-CPU machine, the same cases run
// the two steps instead.)
TEST(CommPipeTest, LargeAllreduceMatchesReference) {
  for (const char* staging : {"plain", "streaming"}) {
    params::ScopedOverride stages("CHOIR_SHM_STAGING", staging);
    auto results = RunRanks(2, [](Communicator& comm) -> Status {
      SweepOptions so;
      so.ops = {"allreduce"};
      so.dtypes = {DataType::kFloat32, DataType::kBFloat16};
      so.counts = {140001, 1100001};
      so.algorithm = "shm_pipe";
      return CheckSweep(comm, so, "shm_pipe", 4);
    }, TransportOptions("shm", 120s));
    SCOPED_TRACE(std::string("CHOIR_SHM_STAGING=") + staging);
    ExpectAllOk(results);
  }
}

// The pipe's reduce_scatter and alltoall with heap buffers, 2 ranks: where the
// ranks have a core each they take chunks of the L2 share of one chunk a step
// (512 KiB with 1 MiB of L2, as on the host this was written on; with another
// L2 the counts fall elsewhere in the chunks, and where the ranks share cores
// they take the n-chunk rule: the same checks of the results); counts per rank
// just below and past one and two such chunks of float32 (131072 elements) and
// of bfloat16 (262144), and past the streaming threshold, every reduce op of
// the reduce_scatter (a bfloat16 average stages its result to divide it
// apart: chunks of the n-chunk rule; a float32 one is divided by the kernel
// and combines into the output as the sum does), in place and not, staged with plain and with streaming stores, and
// with a 1 MiB pipe, whose share (256 KiB) bounds the chunks instead.
TEST(CommPipeTest, LargeReduceScatterAndAlltoallMatchReference) {
  for (const auto& [staging, pipe_bytes] : {std::pair{"plain", "4M"}, {"streaming", "4M"}, {"plain", "1M"}}) {
    params::ScopedOverride stages("CHOIR_SHM_STAGING", staging);
    params::ScopedOverride pipe("CHOIR_SHM_PIPE_BYTES", pipe_bytes);
    auto results = RunRanks(2, [](Communicator& comm) -> Status {
      SweepOptions so;
      so.ops = {"reduce_scatter", "alltoall"};
      so.dtypes = {DataType::kFloat32, DataType::kBFloat16};
      so.counts = {131071, 131073, 262143, 262145, 524287, 524289, 1100001};
      so.algorithm = "shm_pipe";
      return CheckSweep(comm, so, "shm_pipe", 4);
    }, TransportOptions("shm", 120s));
    SCOPED_TRACE(std::string("CHOIR_SHM_STAGING=") + staging + ", CHOIR_SHM_PIPE_BYTES=" + pipe_bytes);
    ExpectAllOk(results);
  }
}

// The pipe's walks in place, past the size from which their outputs would
// stream out of place (in place they store plainly, and a reduce root
// combines straight into its own slice): 2 and 3 ranks, the roots in turn,
// sum and average, exact values.
TEST(CommPipeTest, InPlaceWalksMatchReference) {
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [](Communicator& comm) -> Status {
      SweepOptions so;
      so.ops = {"allreduce", "reduce", "reduce_scatter", "alltoall"};
      so.dtypes = {DataType::kFloat32};
      so.counts = {131073, 2200001};
      so.reduce_ops = {ReduceOp::kSum, ReduceOp::kAvg};
      so.out_of_place = false;
      so.algorithm = "shm_pipe";
      return CheckSweep(comm, so, "shm_pipe", 14);
    }, TransportOptions("shm", 120s));
    SCOPED_TRACE(std::to_string(n) + " ranks");
    ExpectAllOk(results);
  }
}

// One rank in place and the other not, either rank: the walk's chunks must
// not depend on it. Summing, and averaging float32 (divided by the kernel),
// the rank in place combines into its own slice of its input (the first of
// the combined sources on rank 0, the second on rank 1), the other into its
// output; averaging int32 (divided apart), both through their pipes.
// Counts past one and two chunks of the L2 rule: exact values.
template <class T>
Status CheckReduceScatterWithOneRankInPlace(Communicator& comm, DataType dtype) {
  const int r = comm.rank();
  for (const int in_place_rank : {0, 1}) {
    for (const size_t count : {size_t{131073}, size_t{262143}, size_t{300001}}) {
      for (const ReduceOp rop : {ReduceOp::kSum, ReduceOp::kAvg}) {
        std::vector<T> send(2 * count), recv(count, T(-1));
        for (size_t i = 0; i < send.size(); ++i) send[i] = static_cast<T>((r + 1) * static_cast<int>(i % 1000));
        T* out = r == in_place_rank ? send.data() + static_cast<size_t>(r) * count : recv.data();
        CallOptions pipe;
        pipe.algorithm = "shm_pipe";
        Work w = comm.ReduceScatter(send.data(), out, count, dtype, rop, pipe);
        CHOIR_RETURN_IF_ERROR(w.Wait());
        if (w.info().algorithm != "shm_pipe") return Status(Code::kInternal, "ran " + w.info().algorithm);
        for (size_t i = 0; i < count; ++i) {
          const T sum = static_cast<T>(3 * static_cast<int>((static_cast<size_t>(r) * count + i) % 1000));  // 1x + 2x
          const T want = rop == ReduceOp::kAvg ? static_cast<T>(sum / 2) : sum;
          if (out[i] != want) {
            return Status(Code::kInternal, std::string(DataTypeName(dtype)) + ", rank " +
                                               std::to_string(in_place_rank) + " in place, count " +
                                               std::to_string(count) + (rop == ReduceOp::kAvg ? " avg" : " sum") +
                                               ": element " + std::to_string(i) + " is " + std::to_string(out[i]) +
                                               ", not " + std::to_string(want));
          }
        }
      }
    }
  }
  return Status::Ok();
}

TEST(CommPipeTest, ReduceScatterWithOneRankInPlaceMatchesReference) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    CHOIR_RETURN_IF_ERROR(CheckReduceScatterWithOneRankInPlace<float>(comm, DataType::kFloat32));
    return CheckReduceScatterWithOneRankInPlace<int32_t>(comm, DataType::kInt32);
  }, TransportOptions("shm", 120s));
  ExpectAllOk(results);
}

// Every pipe walk starts in each pipe at the position after the last step
// staged there (shm_pipe.cc, Walk::first_parity), across collectives: a
// stream of one-, two- and three-step walks of allgather, broadcast (only
// the root's pipe), allreduce (in place every other time), alltoall,
// reduce_scatter and reduce (rotating roots), and SharedBuffer allgathers
// (which read the mapped buffers and stage nothing), with new values every
// call, checked exactly. A rank that counted other positions than its
// peers would read a stale or unwritten chunk and show a wrong value. A
// tiny pipe (8 KiB: 4 KiB per allgather and broadcast chunk, 2 KiB per
// reduce and alltoall chunk with 2 ranks) makes the walks short.
TEST(CommPipeTest, WalksTakeTurnsOnThePipePositionsAcrossCollectives) {
  params::ScopedOverride pipe("CHOIR_SHM_PIPE_BYTES", "8K");
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [](Communicator& comm) -> Status {
      const int size = comm.size();
      const int me = comm.rank();
      CallOptions po;
      po.algorithm = "shm_pipe";
      auto value = [](int call, int rank, size_t i) {
        return static_cast<int32_t>(call * 100003 + rank * 1009 + static_cast<int>(i % 977));
      };
      // The sum over the ranks of element i of call's inputs.
      auto sum = [&](int call, size_t i) {
        int64_t want = 0;
        for (int r = 0; r < size; ++r) want += value(call, r, i);
        return want;
      };
      auto bad = [&](const char* what, int call, size_t i, int64_t got, int64_t want) {
        return Status(Code::kInternal, fmt::format("call {} {}: element {} is {}, want {}", call, what, i, got, want));
      };
      // Every rank's block of `count` elements, in rank order.
      auto check_gathered = [&](const char* what, int call, const int32_t* got, size_t count) -> Status {
        for (int r = 0; r < size; ++r) {
          for (size_t i = 0; i < count; ++i) {
            const int32_t v = got[static_cast<size_t>(r) * count + i];
            if (v != value(call, r, i)) return bad(what, call, i, v, value(call, r, i));
          }
        }
        return Status::Ok();
      };
      auto shared_in = SharedBuffer::Allocate(3000 * sizeof(int32_t));
      auto shared_out = SharedBuffer::Allocate(3000 * sizeof(int32_t) * static_cast<size_t>(size));
      if (!shared_in.ok() || !shared_out.ok()) return Status(Code::kInternal, "SharedBuffer::Allocate failed");
      for (int call = 0; call < 168; ++call) {
        // One, two or three steps in turn: odd and even walk lengths.
        const size_t count = 1000 * static_cast<size_t>(1 + call % 3);  // int32 elements per rank block
        const size_t per = count / static_cast<size_t>(size);           // alltoall and reduce_scatter blocks
        std::vector<int32_t> in(count), out(count * static_cast<size_t>(size), -1);
        for (size_t i = 0; i < count; ++i) in[i] = value(call, me, i);
        const int root = call % size;
        switch (call % 7) {
          case 0:
            CHOIR_RETURN_IF_ERROR(comm.Allgather(in.data(), out.data(), count, DataType::kInt32, po).Wait());
            CHOIR_RETURN_IF_ERROR(check_gathered("allgather", call, out.data(), count));
            break;
          case 1:
            CHOIR_RETURN_IF_ERROR(comm.Broadcast(in.data(), out.data(), count, DataType::kInt32, root, po).Wait());
            for (size_t i = 0; i < count; ++i) {
              if (out[i] != value(call, root, i)) return bad("broadcast", call, i, out[i], value(call, root, i));
            }
            break;
          case 2: {
            // In place every other time.
            int32_t* result = call % 2 == 0 ? in.data() : out.data();
            CHOIR_RETURN_IF_ERROR(
                comm.Allreduce(in.data(), result, count, DataType::kInt32, ReduceOp::kSum, po).Wait());
            for (size_t i = 0; i < count; ++i) {
              if (result[i] != sum(call, i)) return bad("allreduce", call, i, result[i], sum(call, i));
            }
            break;
          }
          case 3: {
            // Block p of rank r's input: value(call, r, p * per + i).
            std::vector<int32_t> send(per * static_cast<size_t>(size)), recv(send.size(), -1);
            for (size_t i = 0; i < send.size(); ++i) send[i] = value(call, me, i);
            CHOIR_RETURN_IF_ERROR(comm.Alltoall(send.data(), recv.data(), per, DataType::kInt32, po).Wait());
            for (int r = 0; r < size; ++r) {
              for (size_t i = 0; i < per; ++i) {
                const size_t at = static_cast<size_t>(me) * per + i;
                const int32_t got = recv[static_cast<size_t>(r) * per + i];
                if (got != value(call, r, at)) return bad("alltoall", call, i, got, value(call, r, at));
              }
            }
            break;
          }
          case 4: {
            // Rank r's block r of the input: value(call, r, r * per + i).
            std::vector<int32_t> send(per * static_cast<size_t>(size)), recv(per, -1);
            for (size_t i = 0; i < send.size(); ++i) send[i] = value(call, me, i);
            CHOIR_RETURN_IF_ERROR(
                comm.ReduceScatter(send.data(), recv.data(), per, DataType::kInt32, ReduceOp::kSum, po).Wait());
            for (size_t i = 0; i < per; ++i) {
              const int64_t want = sum(call, static_cast<size_t>(me) * per + i);
              if (recv[i] != want) return bad("reduce_scatter", call, i, recv[i], want);
            }
            break;
          }
          case 5:
            CHOIR_RETURN_IF_ERROR(
                comm.Reduce(in.data(), out.data(), count, DataType::kInt32, ReduceOp::kSum, root, po).Wait());
            for (size_t i = 0; me == root && i < count; ++i) {
              if (out[i] != sum(call, i)) return bad("reduce", call, i, out[i], sum(call, i));
            }
            break;
          default: {
            int32_t* sin = shared_in->as<int32_t>();
            int32_t* sout = shared_out->as<int32_t>();
            std::copy(in.begin(), in.end(), sin);
            CHOIR_RETURN_IF_ERROR(comm.Allgather(sin, sout, count, DataType::kInt32, po).Wait());
            CHOIR_RETURN_IF_ERROR(check_gathered("shared allgather", call, sout, count));
            break;
          }
        }
      }
      return Status::Ok();
    }, TransportOptions("shm", 120s));
    SCOPED_TRACE(std::to_string(n) + " ranks");
    ExpectAllOk(results);
  }
}

// The hierarchical algorithms' same-host steps run through the pipe (a tiny
// one here: many steps) without process_vm_readv, and with it on the AMD
// switch-point table, which puts the pipe first, and on the Zen 4 one,
// which puts cma before it for allgathers under 512 KiB (and an allgather
// past 1 MiB there): exact results, 2
// hosts x 2 ranks and 2 hosts x 3 ranks declared by a topology file.
TEST(CommPipeTest, HierarchicalStepsThroughThePipeMatchReference) {
  params::ScopedOverride pipe("CHOIR_SHM_PIPE_BYTES", "8K");
  for (const auto& [cma_setting, tuning] : {std::pair<const char*, const char*>{"off", "intel"}, {"auto", "amd"},
                                            {"auto", "amd-zen4"}}) {
    SCOPED_TRACE(std::string("CHOIR_SHM_CMA=") + cma_setting + " CHOIR_SHM_TUNING=" + tuning);
    params::ScopedOverride cma("CHOIR_SHM_CMA", cma_setting);
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    for (int per_host : {2, 3}) {
      std::string a, b;
      for (int r = 0; r < per_host; ++r) {
        a += (r ? ", " : "") + std::to_string(r);
        b += (r ? ", " : "") + std::to_string(per_host + r);
      }
      const std::string path =
          WriteTempFile("pipetopo", "{\"version\": 1, \"world_size\": " + std::to_string(2 * per_host) +
                                        ", \"hosts\": [{\"name\": \"a\", \"ranks\": [" + a +
                                        "]}, {\"name\": \"b\", \"ranks\": [" + b + "]}]}");
      params::ScopedOverride file("CHOIR_TOPO_FILE", path);
      const bool zen4 = std::string(tuning) == "amd-zen4";
      auto results = RunRanks(2 * per_host, [zen4](Communicator& comm) -> Status {
        SweepOptions so;
        so.ops = {"allreduce", "reduce_scatter", "allgather", "broadcast"};
        so.dtypes = {DataType::kFloat32, DataType::kInt64, DataType::kBFloat16};
        so.counts = {7, 5000, 70001};
        so.algorithm = "hier";
        so.reduce_ops = {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax};
        CHOIR_RETURN_IF_ERROR(CheckSweep(comm, so));
        if (!zen4) return Status::Ok();
        // Past 1 MiB of same-host buffer: the Zen 4 table takes the pipe
        // for allgather too (from 512 KiB).
        SweepOptions large;
        large.ops = {"allgather"};
        large.dtypes = {DataType::kFloat32};
        large.counts = {300001};
        large.algorithm = "hier";
        large.reduce_ops = {ReduceOp::kSum};
        return CheckSweep(comm, large);
      }, TransportOptions("auto", 120s));
      ExpectAllOk(results);
      std::remove(path.c_str());
    }
  }
}

// The pipe's staging with each store kind (CHOIR_SHM_STAGING): exact
// results, in place and not, 2 and 3 ranks; `streaming` covers every walk
// with streaming staging, `auto` the chooser's own calls (the first
// class's calls 1-2 take the kind that is not home; most later classes
// keep the home kind within four sweeps), under a table whose home kind
// is plain stores (amd) and one whose home is streaming with a core per
// rank (amd-zen5).
TEST(CommPipeTest, StagingStoreKindsMatchReference) {
  for (const auto& [staging, tuning] : {std::pair<const char*, const char*>{"plain", "amd"}, {"streaming", "amd"},
                                        {"auto", "amd"}, {"auto", "amd-zen5"}}) {
    params::ScopedOverride stores("CHOIR_SHM_STAGING", staging);
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    for (int n : {2, 3}) {
      auto results = RunRanks(n, [&](Communicator& comm) -> Status {
        // WorkInfo says which calls staged with streaming stores: all or
        // none when fixed; under auto, in the communicator's first class,
        // calls 1-2 (StagingChooser's first measure of the other kind).
        const bool streaming_home = std::string(tuning) == "amd-zen5" && !RanksShareCpus(comm);
        std::vector<float> in(300001, 1.0f), out(300001, 0.0f);
        CallOptions pipe;
        pipe.algorithm = "shm_pipe";
        for (int call = 0; call < 5; ++call) {
          Work w = comm.Allreduce(in.data(), out.data(), in.size(), DataType::kFloat32, ReduceOp::kSum, pipe);
          CHOIR_RETURN_IF_ERROR(w.Wait());
          const std::string mode = staging;
          const bool away = call == 1 || call == 2;
          const bool want = mode == "streaming" || (mode == "auto" && away != streaming_home);
          if (w.info().streaming_stages != want || out[123] != static_cast<float>(comm.size())) {
            return Status(Code::kInternal, "call " + std::to_string(call) + ": streaming_stages " +
                                               std::to_string(w.info().streaming_stages) + ", out " +
                                               std::to_string(out[123]));
          }
        }
        SweepOptions so;
        so.ops = {"allreduce", "reduce_scatter", "allgather", "alltoall", "reduce"};
        so.dtypes = {DataType::kFloat32, DataType::kBFloat16};
        so.counts = {70001, 300001};
        so.algorithm = "shm_pipe";
        so.all_reduce_ops = false;
        so.reduce_ops = {ReduceOp::kSum, ReduceOp::kAvg};
        const int runs = std::string(staging) == "auto" ? 4 : 1;
        for (int r = 0; r < runs; ++r) {
          CHOIR_RETURN_IF_ERROR(CheckSweep(comm, so, "shm_pipe", 20).WithContext("run " + std::to_string(r)));
        }
        return Status::Ok();
      }, TransportOptions("shm", 120s));
      SCOPED_TRACE(std::to_string(n) + " ranks, CHOIR_SHM_STAGING=" + staging + ", CHOIR_SHM_TUNING=" + tuning);
      ExpectAllOk(results);
    }
  }
}

// A broadcast's root stages as the pipe's untimed walks do below 4 MiB of
// buffer (CHOIR_SHM_STAGING's fixed kind, or under auto the table's home
// kind: streaming on amd-zen5 with a core per rank) and with streaming
// stores from 4 MiB with any kind; receivers stage nothing. Exact results
// from every root, in place and not, 2 and 3 ranks.
TEST(CommPipeTest, BroadcastRootStagesWithTheUntimedKind) {
  for (const auto& [staging, tuning] : {std::pair<const char*, const char*>{"auto", "amd"}, {"auto", "amd-zen5"},
                                        {"plain", "amd-zen5"}, {"streaming", "amd"}}) {
    params::ScopedOverride stores("CHOIR_SHM_STAGING", staging);
    params::ScopedOverride table("CHOIR_SHM_TUNING", tuning);
    for (int n : {2, 3}) {
      auto results = RunRanks(n, [&](Communicator& comm) -> Status {
        const std::string mode = staging;
        const bool home_streams = std::string(tuning) == "amd-zen5" && !RanksShareCpus(comm);
        const bool small_streams = mode == "streaming" || (mode == "auto" && home_streams);
        CallOptions pipe;
        pipe.algorithm = "shm_pipe";
        for (size_t count : {size_t{70001}, size_t{1200001}}) {  // 280 KB and 4.8 MB of float32
          const bool large = count * sizeof(float) >= (4u << 20);
          for (int root = 0; root < comm.size(); ++root) {
            for (bool in_place : {false, true}) {
              std::vector<float> in(count), out(count, -1.0f);
              for (size_t i = 0; i < count; ++i) in[i] = static_cast<float>(i % 1000 + static_cast<size_t>(root));
              if (in_place && comm.rank() == root) out = in;
              const void* send = in_place ? out.data() : in.data();
              Work w = comm.Broadcast(send, out.data(), count, DataType::kFloat32, root, pipe);
              CHOIR_RETURN_IF_ERROR(w.Wait());
              const std::string where = fmt::format("{} floats from root {}{}", count, root, in_place ? " in place" : "");
              const bool want = comm.rank() == root && (large || small_streams);
              if (w.info().streaming_stages != want) {
                return Status(Code::kInternal, where + ": streaming_stages " + std::to_string(w.info().streaming_stages));
              }
              for (size_t i = 0; i < count; ++i) {
                if (out[i] != in[i]) {
                  return Status(Code::kInternal, fmt::format("{}: out[{}] = {}, want {}", where, i, out[i], in[i]));
                }
              }
            }
          }
        }
        return Status::Ok();
      }, TransportOptions("shm", 120s));
      SCOPED_TRACE(std::to_string(n) + " ranks, CHOIR_SHM_STAGING=" + staging + ", CHOIR_SHM_TUNING=" + tuning);
      ExpectAllOk(results);
    }
  }
}

TEST(CommPipeTest, BadPipeSizeIsAnInvalidSettingNamingIt) {
  // Out of the setting's range: refused where it is set.
  const Status refused = SetSetting("CHOIR_SHM_PIPE_BYTES", "2G");
  EXPECT_EQ(refused.code(), Code::kInvalidSetting);
  EXPECT_NE(refused.message().find("CHOIR_SHM_PIPE_BYTES='2G' is outside 0..1G"), std::string::npos)
      << refused.ToString();
  // In range but not a whole number of pages: refused by every rank's Create.
  for (const char* bad : {"1000", "4095"}) {
    params::ScopedOverride pipe("CHOIR_SHM_PIPE_BYTES", bad);
    auto results = RunRanks(2, [](Communicator&) -> Status { return Status::Ok(); }, TransportOptions("shm", 10s));
    ASSERT_EQ(results.size(), 2u);
    for (const auto& r : results) {
      EXPECT_EQ(r.create.code(), Code::kInvalidSetting) << bad << ": " << r.create.ToString();
      EXPECT_NE(r.create.message().find("CHOIR_SHM_PIPE_BYTES"), std::string::npos) << r.create.ToString();
    }
  }
}

// Without process_vm_readv the default large-message path is shm_pipe; with
// it, shm_pipe takes over from cma at a size that depends on the host's
// switch-point table, the collective and whether the ranks share cores
// (switch_points.cc); 17.6 MB allreduces run it under either table.
TEST(CommPipeTest, DefaultSelectionAndLargeBuffers) {
  for (const char* cma : {"off", "auto"}) {
    params::ScopedOverride allow("CHOIR_SHM_CMA", cma);
    const bool single_copy = std::string(cma) == "auto";
    auto results = RunRanks(3, [&](Communicator& comm) -> Status {
      SweepOptions so;
      if (single_copy) {
        // 17.6 MB: past cma's range whether or not the ranks share cores
        // (SwitchPointsTest has the thresholds themselves).
        so.ops = {"allreduce"};
        so.dtypes = {DataType::kFloat32};
        so.counts = {4400001};
      } else {
        so.ops = {"allreduce", "allgather", "broadcast", "alltoall", "reduce_scatter", "reduce"};
        so.dtypes = {DataType::kFloat32, DataType::kBFloat16};
        so.counts = {2200001};  // 8.8 MB of float32, 4.4 MB of bfloat16: streaming stores
      }
      so.all_reduce_ops = false;
      return CheckSweep(comm, so, "shm_pipe").WithContext(std::string("CHOIR_SHM_CMA=") + cma);
    }, TransportOptions("shm", 60s));
    ExpectAllOk(results);
  }
}

// Copies from a peer of 64 MiB and more go through a cache-resident buffer
// with streaming stores (CopyFromPeer): a broadcast that takes that path.
TEST(CommLargeTest, CmaCopyBeyondTheDirectLimitMatchesReference) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    SweepOptions so;
    so.ops = {"broadcast"};
    so.dtypes = {DataType::kFloat32};
    so.counts = {17000003};  // 68 MB
    so.in_place = false;
    so.algorithm = "cma";
    return CheckSweep(comm, so);
  }, TransportOptions("shm", 120s));
  ExpectAllOk(results);
}

TEST(CommFailureTest, LocalValidationCodes) {
  auto results = RunRanks(1, [](Communicator& comm) -> Status {
    std::vector<int32_t> v(4);
    struct Case {
      std::function<Work()> call;
      Code want;
    };
    // Each case on a fresh communicator would be cleaner; the sticky error
    // makes only the first meaningful, so check them one by one via Split.
    std::vector<Case> cases = {
        {[&] { return comm.Allreduce(v.data(), v.data(), 4, DataType::kFloat32, ReduceOp::kBand); }, Code::kUnsupportedOp},
    };
    for (auto& c : cases) {
      Status s = c.call().Wait();
      if (s.code() != c.want) return Status(Code::kInternal, "got " + s.ToString());
    }
    return Status::Ok();
  });
  ExpectAllOk(results);
  struct Bad {
    std::function<Work(Communicator&, std::vector<int32_t>&)> call;
    Code want;
  };
  const std::vector<Bad> bad = {
      {[](Communicator& c, auto& v) { return c.Broadcast(v.data(), v.data(), 4, DataType::kInt32, 5); }, Code::kInvalidRank},
      {[](Communicator& c, auto& v) { return c.Broadcast(v.data(), v.data(), 4, DataType::kInt32, -1); }, Code::kInvalidRank},
      {[](Communicator& c, auto& v) { return c.Send(v.data(), 4, DataType::kInt32, 0); }, Code::kInvalidRank},
      {[](Communicator& c, auto& v) { return c.Allreduce(v.data(), v.data(), 4, static_cast<DataType>(42), ReduceOp::kSum); }, Code::kUnsupportedOp},
      {[](Communicator& c, auto& v) { return c.Allreduce(v.data(), v.data(), 4, DataType::kInt32, static_cast<ReduceOp>(99)); }, Code::kUnsupportedOp},
      {[](Communicator& c, auto& v) { return c.Allgather(v.data(), nullptr, 1, DataType::kInt32); }, Code::kNullBuffer},
      {[](Communicator& c, auto& v) {
         const size_t counts[] = {1, 2};
         return c.AllgatherV(v.data(), 1, v.data(), counts, DataType::kInt32);
       }, Code::kBufferTooSmall},
      {[](Communicator& c, auto& v) { return c.Recv(v.data(), 4, DataType::kInt32, 0, -5); }, Code::kInvalidRank},
      {[](Communicator& c, auto& v) {  // the block a rank keeps must not change length
         const size_t send_counts[] = {3}, recv_counts[] = {4};
         return c.AlltoallV(v.data(), send_counts, v.data() + 4, recv_counts, DataType::kInt32);
       }, Code::kBufferTooSmall},
  };
  for (size_t i = 0; i < bad.size(); ++i) {
    auto r = RunRanks(1, [&](Communicator& comm) -> Status {
      std::vector<int32_t> v(8);
      Status s = bad[i].call(comm, v).Wait();
      if (s.code() != bad[i].want) {
        return Status(Code::kInternal, "case " + std::to_string(i) + ": got " + s.ToString());
      }
      return Status::Ok();
    });
    ExpectAllOk(r);
  }
}

// Counts whose sums wrap around size_t, or that describe more memory than an
// address space holds, and buffers that overlap without being the in-place
// layout: E100 before anything moves (they crashed, corrupted the heap or
// gave every rank wrong data with OK).
TEST(CommFailureTest, WrappingCountsAndOverlappingBuffersAreRefused) {
  constexpr size_t kHalf = size_t{1} << 63;
  constexpr size_t kCount = 1000;
  using Call = std::function<Work(Communicator&, std::vector<int32_t>&)>;
  const std::vector<std::pair<Call, std::string>> cases = {
      {[](Communicator& c, auto& v) {
         const size_t counts[] = {kHalf, kHalf};
         return c.AlltoallV(v.data(), counts, v.data() + 8, counts, DataType::kUint8);
       }, "elements than any address space holds"},
      {[](Communicator& c, auto& v) {
         const size_t counts[] = {1, SIZE_MAX};
         const size_t swapped[] = {SIZE_MAX, 1};
         return c.AllgatherV(v.data(), 1, v.data() + 8, c.rank() == 0 ? counts : swapped, DataType::kUint8);
       }, "elements than any address space holds"},
      {[](Communicator& c, auto& v) { return c.Allgather(v.data(), v.data() + 8, SIZE_MAX / 2, DataType::kUint8); },
       "elements than any address space holds"},
      {[](Communicator& c, auto& v) { return c.Allreduce(v.data(), v.data() + 1, kCount, DataType::kInt32, ReduceOp::kSum); },
       "overlap but the call is not in place (for allreduce, in place means send == recv)"},
      {[](Communicator& c, auto& v) { return c.Broadcast(v.data(), v.data() + 1, kCount, DataType::kInt32, c.rank()); },
       "overlap but the call is not in place (for broadcast, in place means send == recv)"},
      {[](Communicator& c, auto& v) {
         return c.Allgather(v.data() + kCount / 2, v.data(), kCount / 2, DataType::kInt32);
       }, "in place means send is this rank's block of recv"},
      {[](Communicator& c, auto& v) {  // the root names block 1 of its send, not its own block 0
         return c.Scatter(v.data(), v.data() + kCount / 2, kCount / 2, DataType::kInt32, 0);
       }, "in place means recv is the root's block of send"},
      {[](Communicator& c, auto& v) { return c.Alltoall(v.data(), v.data() + 2, kCount / 2, DataType::kInt32); },
       "overlap but the call is not in place (for alltoall, in place means send == recv)"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    SCOPED_TRACE("case " + std::to_string(i));
    auto results = RunRanks(2, [&](Communicator& comm) -> Status {
      std::vector<int32_t> v(2 * kCount);
      const Status s = cases[i].first(comm, v).Wait();
      if (comm.rank() == 1) return s.ok() ? Status(Code::kInternal, "rank 1 got OK") : Status::Ok();
      if (s.code() != Code::kInvalidArgument || s.message().find(cases[i].second) == std::string::npos) {
        return Status(Code::kInternal, "want E100 with '" + cases[i].second + "', got " + s.ToString());
      }
      return Status::Ok();
    }, TransportOptions("shm", 10s));
    ExpectAllOk(results);
  }
  // The in-place layouts themselves are accepted and give exact results.
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    const auto me = static_cast<size_t>(comm.rank());
    std::vector<int32_t> v(2 * kCount, 0);
    for (size_t j = 0; j < kCount; ++j) v[me * kCount + j] = static_cast<int32_t>(me * kCount + j);
    Status s = comm.Allgather(v.data() + me * kCount, v.data(), kCount, DataType::kInt32).Wait();
    for (size_t j = 0; s.ok() && j < 2 * kCount; ++j) {
      if (v[j] != static_cast<int32_t>(j)) s = Status(Code::kInternal, "in-place allgather: v[" + std::to_string(j) + "]");
    }
    if (s.ok()) s = comm.ReduceScatter(v.data(), v.data() + me * kCount, kCount, DataType::kInt32, ReduceOp::kSum).Wait();
    for (size_t j = 0; s.ok() && j < kCount; ++j) {
      if (v[me * kCount + j] != static_cast<int32_t>(2 * (me * kCount + j))) s = Status(Code::kInternal, "in-place reduce_scatter");
    }
    if (s.ok()) s = comm.Scatter(v.data(), v.data() + me * kCount, kCount, DataType::kInt32, 0).Wait();
    if (s.ok()) s = comm.Gather(v.data() + me * kCount, v.data(), kCount, DataType::kInt32, 1).Wait();
    return s;
  }, TransportOptions("shm", 10s));
  ExpectAllOk(results);
}

TEST(CommFailureTest, MismatchedCountsOpsDtypesAndOrder) {
  using Call = std::function<Work(Communicator&, std::vector<int64_t>&)>;
  auto allreduce = [](size_t count, DataType t) -> Call {
    return [=](Communicator& c, std::vector<int64_t>& v) { return c.Allreduce(v.data(), v.data(), count, t, ReduceOp::kSum); };
  };
  auto bcast = [](size_t count) -> Call {
    return [=](Communicator& c, std::vector<int64_t>& v) { return c.Broadcast(v.data(), v.data(), count, DataType::kInt64, 0); };
  };
  auto allgather = [](size_t count) -> Call {
    return [=](Communicator& c, std::vector<int64_t>& v) {
      return c.Allgather(v.data(), v.data() + 1000, count, DataType::kInt64);
    };
  };
  auto reduce_scatter = [](size_t count) -> Call {
    return [=](Communicator& c, std::vector<int64_t>& v) {
      return c.ReduceScatter(v.data(), v.data() + 1000, count, DataType::kInt64, ReduceOp::kSum);
    };
  };
  struct Case {
    const char* name;
    Call rank0, others;
  };
  const std::vector<Case> cases = {
      {"count", allreduce(10, DataType::kInt64), allreduce(12, DataType::kInt64)},
      // Flagged lines (800 bytes) against a slot's payload (1040), in one ring.
      {"count-lines", allreduce(100, DataType::kInt64), allreduce(130, DataType::kInt64)},
      // Blocks of 96 and 104 bytes (lines both), and of 96 against 320 (slots).
      {"allgather-count-lines", allgather(12), allgather(13)},
      {"allgather-lines-slots", allgather(12), allgather(40)},
      {"reduce_scatter-count-lines", reduce_scatter(12), reduce_scatter(13)},
      {"reduce_scatter-lines-slots", reduce_scatter(12), reduce_scatter(40)},
      {"allgather-reduce_scatter-lines", allgather(12), reduce_scatter(12)},
      {"dtype", allreduce(10, DataType::kInt64), allreduce(10, DataType::kFloat64)},
      {"op", allreduce(10, DataType::kInt64), bcast(10)},
      {"large-count", allreduce(100000, DataType::kInt64), allreduce(100001, DataType::kInt64)},
  };
  for (const std::string transport : {"shm", "tcp"}) {
    for (const auto& c : cases) {
      auto results = RunRanks(3, [&](Communicator& comm) -> Status {
        std::vector<int64_t> v(200000, 1);
        Status s = (comm.rank() == 0 ? c.rank0 : c.others)(comm, v).Wait();
        if (s.code() != Code::kCollectiveMismatch) {
          return Status(Code::kInternal, std::string(c.name) + ": want E401, got " + s.ToString());
        }
        return Status::Ok();
      }, TransportOptions(transport, 10s));
      SCOPED_TRACE(transport + " " + c.name);
      ExpectAllOk(results);
    }
  }
}

// A peer that publishes another collective late, once the waiting rank
// sleeps, and does not wait itself (a broadcast root), is reported as a
// mismatch by the waiting rank when it wakes, well before the timeout: the
// flagged lines' wait reads the peer's header at every poll by then
// (kHeaderPollAlways in local_ops.cc).
TEST(CommFailureTest, LateMismatchedPeerIsFoundByASleepingWaiter) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    std::vector<int64_t> v(16, 1);
    if (comm.rank() == 1) {
      std::this_thread::sleep_for(400ms);
      CHOIR_RETURN_IF_ERROR(comm.Broadcast(v.data(), v.data(), 10, DataType::kInt64, 1).Wait());
      (void)comm.Barrier().Wait();  // fails once rank 0 has reported the mismatch
      return Status::Ok();
    }
    const auto start = std::chrono::steady_clock::now();
    const Status s = comm.Allreduce(v.data(), v.data(), 10, DataType::kInt64, ReduceOp::kSum).Wait();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "want E401, got " + s.ToString());
    if (seconds > 5) return Status(Code::kInternal, fmt::format("the mismatch took {:.1f} s", seconds));
    return Status::Ok();
  }, TransportOptions("shm", 20s));
  ExpectAllOk(results);
}

// Uneven splits that disagree (rank 0 sends 3 elements to rank 1, which
// expects 4) never move bytes past a block. The receiver fails with a
// mismatch on every path; with cma, where both ranks see both splits, so
// does the sender. A sender that cannot see the receiver's split (messages)
// finds the communicator failed at its next collective.
TEST(CommFailureTest, DisagreeingAlltoallvSplitsAreAMismatch) {
  struct Path {
    const char* transport;
    const char* algorithm;
  };
  for (const Path path : {Path{"shm", "cma"}, Path{"shm", "pairwise"}, Path{"tcp", "pairwise"}}) {
    auto results = RunRanks(2, [&](Communicator& comm) -> Status {
      const std::vector<size_t> send = comm.rank() == 0 ? std::vector<size_t>{2, 3} : std::vector<size_t>{2, 2};
      const std::vector<size_t> recv = comm.rank() == 0 ? std::vector<size_t>{2, 2} : std::vector<size_t>{4, 2};
      std::vector<float> in(8, 1.0f), out(8, 0.0f);
      CallOptions call;
      call.algorithm = path.algorithm;
      const Status s = comm.AlltoallV(in.data(), send, out.data(), recv, DataType::kFloat32, call).Wait();
      const bool sees_both = std::string(path.algorithm) == "cma";
      if (comm.rank() == 1 || sees_both) {
        if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "want E401, got " + s.ToString());
        const std::string& m = s.message();
        if (m.find("rank 0") == std::string::npos || m.find("12 bytes") == std::string::npos ||
            m.find("16") == std::string::npos) {
          return Status(Code::kInternal, "message does not name the disagreeing sizes: " + s.ToString());
        }
        return Status::Ok();
      }
      if (!s.ok() && s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "got " + s.ToString());
      const Status next = comm.Barrier().Wait();
      if (next.ok()) return Status(Code::kInternal, "the sender's next collective succeeded");
      return Status::Ok();
    }, TransportOptions(path.transport, 10s));
    SCOPED_TRACE(std::string(path.transport) + " " + path.algorithm);
    ExpectAllOk(results);
  }
}

// Allreduces whose payloads fall in different rings of shared slots on the
// same step, rank 0's against the others': 80 bytes (the deep ring of small
// slots), 8000 (the medium ring) and 32000 (a full slot). Each rank sees the
// other's publication in another ring and reports the mismatch at once, not
// after a timeout (the stall check, which would also find it, is set beyond
// the deadline here).
TEST(CommFailureTest, CollectivesInDifferentSlotRingsAreAMismatchAtOnce) {
  params::ScopedOverride stall("CHOIR_STALL_SECONDS", "60");
  const std::pair<size_t, size_t> pairs[] = {{10, 1000}, {1000, 10}, {1000, 4000}, {4000, 1000}, {10, 4000}};
  for (int n : {2, 3}) {
    for (const auto& [first, others] : pairs) {
      auto results = RunRanks(n, [first, others](Communicator& comm) -> Status {
        std::vector<int64_t> v(4000, 1);
        const size_t count = comm.rank() == 0 ? first : others;
        const Status s = comm.Allreduce(v.data(), v.data(), count, DataType::kInt64, ReduceOp::kSum).Wait();
        if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "want E401, got " + s.ToString());
        return Status::Ok();
      }, TransportOptions("shm", 10s));
      SCOPED_TRACE(std::to_string(n) + " ranks, " + std::to_string(first) + " against " + std::to_string(others));
      ExpectAllOk(results);
    }
  }
}

TEST(CommFailureTest, DifferentOrderIsAMismatch) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    std::vector<float> v(64, 1.0f);
    Status s;
    if (comm.rank() == 0) {
      s = comm.Allreduce(v.data(), v.data(), 64, DataType::kFloat32, ReduceOp::kSum).Wait();
      if (s.ok()) s = comm.Broadcast(v.data(), v.data(), 64, DataType::kFloat32, 0).Wait();
    } else {
      s = comm.Broadcast(v.data(), v.data(), 64, DataType::kFloat32, 0).Wait();
      if (s.ok()) s = comm.Allreduce(v.data(), v.data(), 64, DataType::kFloat32, ReduceOp::kSum).Wait();
    }
    if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "got " + s.ToString());
    if (s.message().find("broadcast") == std::string::npos || s.message().find("allreduce") == std::string::npos) {
      return Status(Code::kInternal, "message lacks both signatures: " + s.ToString());
    }
    return Status::Ok();
  }, TransportOptions("tcp", 10s));
  ExpectAllOk(results);
}

TEST(CommFailureTest, DifferentRootsFoundByStallCheck) {
  params::ScopedOverride stall("CHOIR_STALL_SECONDS", "0.2");
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    std::vector<float> v(16, 1.0f), out(16);
    // Each rank believes it is the root: both wait to receive, neither sends.
    Status s = comm.Reduce(v.data(), out.data(), 16, DataType::kFloat32, ReduceOp::kSum, comm.rank()).Wait();
    if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "got " + s.ToString());
    return Status::Ok();
  }, TransportOptions("shm", 10s));
  ExpectAllOk(results);
}

TEST(CommFailureTest, FullCheckCatchesRootMismatchAtOnce) {
  params::ScopedOverride full("CHOIR_MISMATCH_CHECK", "full");
  auto results = RunRanks(3, [](Communicator& comm) -> Status {
    std::vector<float> v(16, 1.0f);
    Status s = comm.Broadcast(v.data(), v.data(), 16, DataType::kFloat32, comm.rank() == 2 ? 1 : 0).Wait();
    if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "got " + s.ToString());
    return Status::Ok();
  }, TransportOptions("tcp", 10s));
  ExpectAllOk(results);
}

// A broadcast or scatter whose ranks each name themselves the root waits for
// nobody, so they all finish it; the next collective finds the disagreement,
// on every rank. On one host the small call's root reads nobody's slot, and
// the ranks' slot histories differ at the next collective that reads one;
// over TCP the self-named roots' data waits on the others' connections, and
// the next collective reads it.
TEST(CommFailureTest, RootsThatDisagreeInABroadcastOrScatterAreFoundAtTheNextCollective) {
  const std::pair<std::string, std::string> kinds[] = {
      {"shm", "called different collectives earlier"},
      {"tcp", "this rank never read it in #1, so the ranks named different roots"}};
  for (const auto& [transport, said] : kinds) {
    for (const bool scatter : {false, true}) {
      for (int follow_n = 0; follow_n < (transport == "shm" ? 6 : 2); ++follow_n) {
        const int n = 2 + follow_n % 2;
        const int follow = follow_n / 2;
        auto results = RunRanks(n, [scatter, n, follow, said = said](Communicator& comm) -> Status {
          // 2 ranks: each is its own root; 3 ranks: roots 0, 0 and 2.
          const int root = n == 2 ? comm.rank() : (comm.rank() == 2 ? 2 : 0);
          std::vector<float> in(4 * static_cast<size_t>(n), 1.0f), out(4);
          Status s = scatter ? comm.Scatter(in.data(), out.data(), 4, DataType::kFloat32, root).Wait()
                             : comm.Broadcast(in.data(), in.data(), 4, DataType::kFloat32, root).Wait();
          if (!s.ok()) return Status(Code::kInternal, "the rooted call itself failed: " + s.ToString());
          // The next collective reads: an allreduce, an allgather or a
          // reduce_scatter, in flagged lines on one host.
          std::vector<float> block(25, 1.0f), all(25 * static_cast<size_t>(n));
          if (follow == 0) s = comm.Allreduce(out.data(), out.data(), 4, DataType::kFloat32, ReduceOp::kSum).Wait();
          if (follow == 1) s = comm.Allgather(block.data(), all.data(), 25, DataType::kFloat32).Wait();
          if (follow == 2) s = comm.ReduceScatter(all.data(), block.data(), 25, DataType::kFloat32, ReduceOp::kSum).Wait();
          if (s.code() != Code::kCollectiveMismatch) return Status(Code::kInternal, "want E401, got " + s.ToString());
          if (s.message().find(said) == std::string::npos) return Status(Code::kInternal, "uninformative: " + s.ToString());
          return Status::Ok();
        }, TransportOptions(transport, 10s));
        SCOPED_TRACE(transport + ", " + std::to_string(n) + (scatter ? " ranks, scatter" : " ranks, broadcast") +
                     ", then " + std::to_string(follow));
        ExpectAllOk(results);
      }
    }
  }
}

// In the parent of a forked child: closes the pipe's write end, reads what
// the child wrote until it closes its end, and reaps the child. A child that
// has not closed its end within `limit` is killed and reported (`*hung`), so
// a child stuck in the runtime fails the test instead of hanging it.
std::string ReadChildReport(const int fds[2], pid_t child, int* wstatus, bool* hung,
                            std::chrono::seconds limit = 60s) {
  close(fds[1]);
  std::string report;
  char buf[512];
  const auto until = std::chrono::steady_clock::now() + limit;
  *hung = false;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(until - std::chrono::steady_clock::now());
    pollfd p{fds[0], POLLIN, 0};
    const int ready = left.count() > 0 ? poll(&p, 1, static_cast<int>(left.count())) : 0;
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      *hung = true;
      kill(child, SIGKILL);
      break;
    }
    const ssize_t k = read(fds[0], buf, sizeof(buf));
    if (k <= 0) break;
    report.append(buf, static_cast<size_t>(k));
  }
  close(fds[0]);
  waitpid(child, wstatus, 0);
  return report;
}

// Forking a process that has other threads. POSIX lets the child rely only on
// async-signal-safe functions: a lock another thread holds at the fork stays
// held in the child. glibc's malloc takes its locks across fork itself, but
// the address sanitizer's runtime in GCC 12 does not (a child stuck in its
// stack depot's lock was seen here). So the tests below fork only once every
// other thread of the process is known to be idle: the peer rank parked on a
// flag, and any engine thread started and waiting.
struct ForkGate {
  std::atomic<bool> peer_parked{false};  // the peer rank allocated all it needs and waits
  std::atomic<bool> child_done{false};   // the child reported: the peer may go on
  // On the peer's thread: parks until the child reported.
  void ParkPeer() {
    peer_parked.store(true);
    while (!child_done.load()) std::this_thread::sleep_for(5ms);
  }
  void WaitForParkedPeer() const {
    while (!peer_parked.load()) std::this_thread::sleep_for(1ms);
  }
  // Releases the peer when it goes, on every way out of the forking rank.
  struct Release {
    ForkGate& gate;
    ~Release() { gate.child_done.store(true); }
  };
};

// A child forked from a rank's process holds a copy of its communicators: it
// may not run operations (they would be matched against the parent's peers)
// or abort them, and destroying a copy leaves the parent's connections,
// segments and threads alone.
TEST(CommFailureTest, AForkedChildCannotUseItsParentsCommunicator) {
  for (const std::string transport : {"shm", "tcp"}) {
    ForkGate gate;
    auto results = RunRanks(2, [&gate](Communicator& comm) -> Status {
      auto sub = comm.Split(0, comm.rank());
      if (!sub.ok()) {
        gate.peer_parked.store(true);
        gate.child_done.store(true);
        return sub.status();
      }
      std::vector<int32_t> v(4, comm.rank() + 1);
      if (comm.rank() == 1) gate.ParkPeer();
      if (comm.rank() == 0) {
        const ForkGate::Release release{gate};  // rank 1 never waits forever
        int fds[2];
        if (pipe(fds) != 0) return Status(Code::kInternal, "pipe failed");
        gate.WaitForParkedPeer();
        const pid_t child = fork();
        if (child == 0) {
          std::vector<int32_t> w(4, 7);
          const Status s = comm.Allreduce(w.data(), w.data(), 4, DataType::kInt32, ReduceOp::kSum).Wait();
          comm.Abort("from the child");
          sub->reset();  // destroys the child's copy
          const std::string report = s.ToString();
          const ssize_t written = write(fds[1], report.data(), report.size());
          _exit(written == static_cast<ssize_t>(report.size()) ? 0 : 1);
        }
        int wstatus = 0;
        bool hung = false;
        const std::string report = ReadChildReport(fds, child, &wstatus, &hung);
        gate.child_done.store(true);
        if (hung) return Status(Code::kInternal, "the child did not report within 60 s (killed)");
        if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
          return Status(Code::kInternal, "the child ended with status " + std::to_string(wstatus));
        }
        if (report.rfind("E502 NotSupported: rank 0: allreduce in process ", 0) != 0 ||
            report.find(", a child forked from process " + std::to_string(getpid())) == std::string::npos) {
          return Status(Code::kInternal, "the child got: " + report);
        }
      }
      // The parent's communicators still work, and nothing was taken from them.
      Status s = comm.Allreduce(v.data(), v.data(), 4, DataType::kInt32, ReduceOp::kSum).Wait();
      if (!s.ok()) return s;
      if (v[0] != 3 || v[3] != 3) return Status(Code::kInternal, "allreduce gave " + std::to_string(v[0]));
      s = (*sub)->Allreduce(v.data(), v.data(), 4, DataType::kInt32, ReduceOp::kSum).Wait();
      if (!s.ok()) return s;
      if (v[0] != 6 || v[3] != 6) return Status(Code::kInternal, "split allreduce gave " + std::to_string(v[0]));
      return Status::Ok();
    }, TransportOptions(transport, 10s));
    SCOPED_TRACE(transport);
    ExpectAllOk(results);
  }
}

// A child forked while its parent's queued operation is unfinished learns at
// once, from WaitFor as from Wait, that it cannot finish there (nothing in
// the child runs the parent's queue), instead of waiting out its limit.
TEST(CommFailureTest, AForkedChildWaitingForItsParentsQueuedOperationIsToldAtOnce) {
  ForkGate gate;
  auto results = RunRanks(2, [&gate](Communicator& comm) -> Status {
    constexpr size_t kCount = 1 << 18;  // 1 MiB: above CHOIR_ASYNC_BYTES, queued
    std::vector<float> v(kCount, static_cast<float>(comm.rank() + 1));
    if (comm.rank() == 1) {
      // Rank 0's operation stays unfinished until its child has waited.
      gate.ParkPeer();
      return comm.Allreduce(v.data(), v.data(), kCount, DataType::kFloat32, ReduceOp::kSum).Wait();
    }
    Work w = comm.Allreduce(v.data(), v.data(), kCount, DataType::kFloat32, ReduceOp::kSum);
    const ForkGate::Release release{gate};  // before `w` goes: rank 1 never waits forever
    int fds[2];
    if (pipe(fds) != 0) return Status(Code::kInternal, "pipe failed");
    // The engine thread takes the operation and waits for rank 1 (it cannot
    // finish: rank 1 is parked), so no thread but this one runs at the fork.
    gate.WaitForParkedPeer();
    if (Status s = w.WaitFor(100ms); s.code() != Code::kCollectiveTimeout) {
      return Status(Code::kInternal, "want the operation unfinished before the fork, got " + s.ToString());
    }
    const auto t0 = std::chrono::steady_clock::now();
    const pid_t child = fork();
    if (child == 0) {
      const std::string report = w.WaitFor(30s).ToString();
      const ssize_t written = write(fds[1], report.data(), report.size());
      _exit(written == static_cast<ssize_t>(report.size()) ? 0 : 1);
    }
    int wstatus = 0;
    bool hung = false;
    const std::string report = ReadChildReport(fds, child, &wstatus, &hung);
    gate.child_done.store(true);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (hung) return Status(Code::kInternal, "the child did not report within 60 s (killed)");
    if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0) {
      return Status(Code::kInternal, "the child ended with status " + std::to_string(wstatus));
    }
    if (report.rfind("E502 NotSupported: an operation queued in process " + std::to_string(getpid()) +
                         " cannot finish in process ",
                     0) != 0) {
      return Status(Code::kInternal, "the child got: " + report);
    }
    if (seconds > 10) return Status(Code::kInternal, "the child waited " + std::to_string(seconds) + " s");
    // The parent's operation finishes as if nothing happened.
    if (Status s = w.Wait(); !s.ok()) return s;
    if (v[0] != 3.0f || v[kCount - 1] != 3.0f) return Status(Code::kInternal, "allreduce gave " + std::to_string(v[0]));
    return Status::Ok();
  }, TransportOptions("shm", 20s));
  ExpectAllOk(results);
}

// A Recv of another data type than its Send is a mismatch, whether the
// message arrives while the Recv waits or was stashed before it.
TEST(CommFailureTest, PointToPointOfAnotherDataTypeIsAMismatch) {
  for (const std::string transport : {"shm", "tcp"}) {
    auto results = RunRanks(2, [](Communicator& comm) -> Status {
      std::vector<float> f(4, 1.5f);
      std::vector<int32_t> i(4);
      if (comm.rank() == 0) {
        for (int tag : {2, 1}) {
          if (Status s = comm.Send(f.data(), 4, DataType::kFloat32, 1, tag).Wait(); !s.ok()) return s;
        }
        return Status::Ok();
      }
      // Tag 1 as float32 (tag 2 is stashed on the way), then tag 2 as int32.
      Status s = comm.Recv(f.data(), 4, DataType::kFloat32, 0, 1).Wait();
      if (!s.ok()) return s;
      s = comm.Recv(i.data(), 4, DataType::kInt32, 0, 2).Wait();
      if (s.code() != Code::kCollectiveMismatch ||
          s.message().find("sent float32 elements with tag 2 but this Recv expects int32") == std::string::npos) {
        return Status(Code::kInternal, "want E401 naming both types, got " + s.ToString());
      }
      if (i[0] != 0) return Status(Code::kInternal, "the receive buffer was written");
      return Status::Ok();
    }, TransportOptions(transport, 10s));
    SCOPED_TRACE(transport);
    ExpectAllOk(results);
  }
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    std::vector<float> f(4, 1.5f);
    std::vector<int32_t> i(4);
    if (comm.rank() == 0) return comm.Send(f.data(), 4, DataType::kFloat32, 1, 3).Wait();
    const Status s = comm.Recv(i.data(), 4, DataType::kInt32, 0, 3).Wait();
    if (s.code() != Code::kCollectiveMismatch || s.message().find("but this Recv expects int32") == std::string::npos) {
      return Status(Code::kInternal, "want E401, got " + s.ToString());
    }
    return Status::Ok();
  }, TransportOptions("tcp", 10s));
  ExpectAllOk(results);
}

TEST(CommFailureTest, TimeoutNamesSilentRankAndProgress) {
  params::ScopedOverride stall("CHOIR_STALL_SECONDS", "0.1");
  std::atomic<bool> rank0_done{false};
  auto results = RunRanks(3, [&](Communicator& comm) -> Status {
    std::vector<float> v(16, 1.0f);
    if (comm.rank() == 2) {  // stays away until rank 0 has given up
      while (!rank0_done.load()) std::this_thread::sleep_for(10ms);
      return Status::Ok();
    }
    const auto start = std::chrono::steady_clock::now();
    CallOptions call;
    call.timeout = comm.rank() == 0 ? 700ms : 20s;
    Status s = comm.Allreduce(v.data(), v.data(), 16, DataType::kFloat32, ReduceOp::kSum, call).Wait();
    if (comm.rank() == 0) {
      rank0_done = true;
      if (s.code() != Code::kCollectiveTimeout) return Status(Code::kInternal, "got " + s.ToString());
      if (std::chrono::steady_clock::now() - start > 5s) return Status(Code::kInternal, "too slow");
      if (s.message().find("rank 2") == std::string::npos || s.message().find("#1") == std::string::npos ||
          s.message().find("Where the other ranks are") == std::string::npos) {
        return Status(Code::kInternal, "uninformative: " + s.ToString());
      }
      return Status::Ok();
    }
    // Rank 1 hears about rank 0's timeout instead of waiting its own 20 s.
    if (s.ok()) return Status(Code::kInternal, "rank 1 should fail");
    return Status::Ok();
  }, TransportOptions("shm", 20s));
  ExpectAllOk(results);
}

TEST(CommFailureTest, AbortWakesPeers) {
  for (const std::string transport : {"shm", "tcp"}) {
    auto results = RunRanks(3, [](Communicator& comm) -> Status {
      std::vector<float> v(1 << 16, 1.0f);
      if (comm.rank() == 0) {
        std::this_thread::sleep_for(100ms);
        comm.Abort("test says stop");
        Status s = comm.Barrier().Wait();
        return s.code() == Code::kAborted ? Status::Ok() : Status(Code::kInternal, "got " + s.ToString());
      }
      const auto start = std::chrono::steady_clock::now();
      Status s = comm.Allreduce(v.data(), v.data(), v.size(), DataType::kFloat32, ReduceOp::kSum).Wait();
      if (s.code() != Code::kAborted) return Status(Code::kInternal, "got " + s.ToString());
      if (s.message().find("test says stop") == std::string::npos) return Status(Code::kInternal, s.ToString());
      if (std::chrono::steady_clock::now() - start > 5s) return Status(Code::kInternal, "slow abort");
      return Status::Ok();
    }, TransportOptions(transport, 30s));
    SCOPED_TRACE(transport);
    ExpectAllOk(results);
  }
}

TEST(CommTest, SplitMakesIndependentGroups) {
  auto results = RunRanks(5, [](Communicator& comm) -> Status {
    const int color = comm.rank() == 4 ? -1 : comm.rank() % 2;
    auto child = comm.Split(color, -comm.rank());
    if (!child.ok()) return child.status();
    if (color < 0) return *child == nullptr ? Status::Ok() : Status(Code::kInternal, "expected no group");
    Communicator& c = **child;
    if (c.size() != 2) return Status(Code::kInternal, "size " + std::to_string(c.size()));
    // key = -rank: the higher parent rank comes first.
    const int want_rank = comm.rank() >= 2 ? 0 : 1;
    if (c.rank() != want_rank) return Status(Code::kInternal, "rank " + std::to_string(c.rank()));
    int64_t v = comm.rank(), sum = 0;
    CHOIR_RETURN_IF_ERROR(c.Allreduce(&v, &sum, 1, DataType::kInt64, ReduceOp::kSum).Wait());
    const int64_t want = color == 0 ? 0 + 2 : 1 + 3;
    return sum == want ? Status::Ok() : Status(Code::kInternal, "sum " + std::to_string(sum));
  });
  ExpectAllOk(results);
}

// A rank whose options the new communicator would refuse says so in the
// exchange: the other members of its color fail at once (they waited for it
// until the timeout), other colors form as usual.
TEST(CommTest, SplitWithRefusedOptionsFailsItsColorAtOnce) {
  auto results = RunRanks(3, [](Communicator& comm) -> Status {
    CommOptions options;
    if (comm.rank() == 0) options.transport = "carrier-pigeon";
    const auto start = std::chrono::steady_clock::now();
    auto child = comm.Split(comm.rank() == 2 ? 2 : 1, comm.rank(), options);
    if (std::chrono::steady_clock::now() - start > 5s) return Status(Code::kInternal, "took too long");
    switch (comm.rank()) {
      case 0:
        return child.status().code() == Code::kInvalidArgument ? Status::Ok()
                                                                : Status(Code::kInternal, "got " + child.status().ToString());
      case 1:
        if (child.status().code() != Code::kRemoteError ||
            child.status().message().find("rank(s) 0 of the same color gave CommOptions") == std::string::npos) {
          return Status(Code::kInternal, "got " + child.status().ToString());
        }
        return Status::Ok();
      default:
        if (!child.ok()) return child.status();
        return (*child)->size() == 1 ? Status::Ok() : Status(Code::kInternal, "size");
    }
  }, TransportOptions("shm", 20s));
  ExpectAllOk(results);
}

TEST(CommTest, AsyncOperationsCompleteInOrder) {
  auto results = RunRanks(3, [](Communicator& comm) -> Status {
    constexpr size_t kCount = 1 << 18;  // above CHOIR_ASYNC_BYTES: runs on the progress thread
    std::vector<std::vector<int32_t>> bufs(6, std::vector<int32_t>(kCount));
    std::vector<Work> works;
    for (size_t k = 0; k < bufs.size(); ++k) {
      std::fill(bufs[k].begin(), bufs[k].end(), static_cast<int32_t>(k + comm.rank()));
      works.push_back(comm.Allreduce(bufs[k].data(), bufs[k].data(), kCount, DataType::kInt32, ReduceOp::kSum));
    }
    for (size_t k = 0; k < bufs.size(); ++k) {
      CHOIR_RETURN_IF_ERROR(works[k].Wait());
      const int32_t want = static_cast<int32_t>(3 * k + 3);
      if (bufs[k][kCount - 1] != want || bufs[k][0] != want) return Status(Code::kInternal, "bad value");
      if (works[k].info().sequence != k + 1) return Status(Code::kInternal, "out of order");
    }
    return Status::Ok();
  });
  ExpectAllOk(results);
}

// Ranks whose threads may run on one CPU only (as `choir run` binds them)
// leave a queued operation to a caller that waits for it (comm/engine.h).
// Every way of waiting must still get each operation done, in order: Wait(),
// WaitFor() (which starts it on the progress thread), and Then() or Done()
// after Start(), and without Start() too (the progress thread takes it after
// its delay). The rank threads inherit this thread's one-CPU affinity.
TEST(CommTest, RanksOnOneCpuFinishQueuedOperationsHoweverTheyAreAwaited) {
  testing::OneCpuForThisThread one_cpu;
  ASSERT_TRUE(one_cpu.ok());
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    constexpr size_t kCount = 1 << 18;  // 1 MiB: above CHOIR_ASYNC_BYTES, queued
    for (int way = 0; way < 5; ++way) {
      for (int round = 0; round < 20; ++round) {
        std::vector<int32_t> buf(kCount, comm.rank() + round);
        Work w = comm.Allreduce(buf.data(), buf.data(), kCount, DataType::kInt32, ReduceOp::kSum);
        std::atomic<bool> called{false};
        Status s;
        if (way == 0) s = w.Wait();
        if (way == 1) s = w.WaitFor(20s);
        if (way == 2 || way == 3) {
          w.Then([&](const Status&) { called = true; });
          if (way == 2) w.Start();
          while (!called) std::this_thread::sleep_for(50us);
          s = w.status();
        }
        if (way == 4) {
          while (!w.Done()) std::this_thread::sleep_for(50us);
          s = w.status();
        }
        CHOIR_RETURN_IF_ERROR(s);
        const int32_t want = 2 * round + 1;
        if (buf[0] != want || buf[kCount - 1] != want) {
          return Status(Code::kInternal, "way " + std::to_string(way) + " round " + std::to_string(round) +
                                             ": got " + std::to_string(buf[0]) + ", want " + std::to_string(want));
        }
      }
    }
    return Status::Ok();
  });
  ExpectAllOk(results);
}

// The ranks that do not wait for their peers (a broadcast or scatter root,
// the senders of a reduce or gather) run up to a ring's depth of operations
// ahead through the shared slots (64 small ones for most payloads here, 64
// medium ones for the 8 KiB broadcasts). In each phase one collective runs
// 150 times in a row with one root, and one waiting rank sleeps now and then,
// so the others fill every slot and must wait for one to come free; a fifth
// kind of phase runs an allreduce in the ring of full slots and then nine
// broadcasts in the small ring and nine in the medium one (the root reuses
// slots on what the allreduce told it, without reading read_through).
// Every value must still be its own operation's.
TEST(CommSlotTest, RanksRunningAheadNeverOverwriteUnreadSlots) {
  for (int n : {2, 3}) {
    auto results = RunRanks(n, [n](Communicator& comm) -> Status {
      const int me = comm.rank();
      for (int phase = 0; phase < 6 * n * 2; ++phase) {
        const int root = (phase / 6) % n;
        // broadcast, scatter (root runs ahead), reduce, gather (senders do), mixed, 8 KiB broadcast
        const int kind = phase % 6;
        const bool sleeper = kind == 2 || kind == 3 ? me == root : me == (root + 1) % n;
        for (int64_t round = 0; round < 150; ++round) {
          const std::string where = "phase " + std::to_string(phase) + " round " + std::to_string(round);
          if (sleeper && round % 10 == 3) std::this_thread::sleep_for(2ms);
          const int64_t tag = phase * 1000 + round;
          if (kind == 0) {
            int64_t b[3] = {tag, root, -tag};
            if (me != root) std::fill(b, b + 3, 0);
            CHOIR_RETURN_IF_ERROR(comm.Broadcast(b, b, 3, DataType::kInt64, root).Wait());
            if (b[0] != tag || b[1] != root || b[2] != -tag) return Status(Code::kInternal, "broadcast " + where);
          } else if (kind == 1) {
            std::vector<int64_t> parts(static_cast<size_t>(n));
            for (int p = 0; p < n; ++p) parts[static_cast<size_t>(p)] = p * 7 + tag;
            int64_t got = -1;
            CHOIR_RETURN_IF_ERROR(comm.Scatter(parts.data(), &got, 1, DataType::kInt64, root).Wait());
            if (got != me * 7 + tag) return Status(Code::kInternal, "scatter " + where);
          } else if (kind == 2) {
            int64_t mine[2] = {me + tag, 1}, r[2] = {0, 0};
            CHOIR_RETURN_IF_ERROR(comm.Reduce(mine, r, 2, DataType::kInt64, ReduceOp::kSum, root).Wait());
            if (me == root && (r[0] != n * (n - 1) / 2 + n * tag || r[1] != n)) {
              return Status(Code::kInternal, "reduce " + where);
            }
          } else if (kind == 3) {
            std::vector<int64_t> all(static_cast<size_t>(n), -1);
            const int64_t v = me * 100000 + tag;
            CHOIR_RETURN_IF_ERROR(comm.Gather(&v, all.data(), 1, DataType::kInt64, root).Wait());
            for (int p = 0; me == root && p < n; ++p) {
              if (all[static_cast<size_t>(p)] != p * 100000 + tag) {
                return Status(Code::kInternal, "gather " + where + " from rank " + std::to_string(p));
              }
            }
          } else if (kind == 5) {
            std::vector<int64_t> b(1024, 0);
            if (me == root) {
              for (size_t i = 0; i < b.size(); ++i) b[i] = tag * 4096 + static_cast<int64_t>(i);
            }
            CHOIR_RETURN_IF_ERROR(comm.Broadcast(b.data(), b.data(), b.size(), DataType::kInt64, root).Wait());
            for (size_t i = 0; i < b.size(); ++i) {
              if (b[i] != tag * 4096 + static_cast<int64_t>(i)) {
                return Status(Code::kInternal, "8 KiB broadcast " + where + " element " + std::to_string(i));
              }
            }
          } else {
            // 24000 bytes: past the medium slots.
            std::vector<int32_t> x(6000, static_cast<int32_t>(me + tag)), sum(6000, 0);
            CHOIR_RETURN_IF_ERROR(comm.Allreduce(x.data(), sum.data(), x.size(), DataType::kInt32, ReduceOp::kSum).Wait());
            const int32_t want = static_cast<int32_t>(n * (n - 1) / 2 + n * tag);
            if (sum.front() != want || sum.back() != want) return Status(Code::kInternal, "allreduce " + where);
            for (int64_t k = 0; k < 9; ++k) {
              int64_t b = me == root ? tag * 16 + k : -1;
              CHOIR_RETURN_IF_ERROR(comm.Broadcast(&b, &b, 1, DataType::kInt64, root).Wait());
              if (b != tag * 16 + k) return Status(Code::kInternal, "broadcast after allreduce " + where);
            }
            for (int64_t k = 0; k < 9; ++k) {
              std::vector<int64_t> b(1024, me == root ? tag * 16 + k : -1);
              CHOIR_RETURN_IF_ERROR(comm.Broadcast(b.data(), b.data(), b.size(), DataType::kInt64, root).Wait());
              if (std::any_of(b.begin(), b.end(), [&](int64_t v) { return v != tag * 16 + k; })) {
                return Status(Code::kInternal, "8 KiB broadcast after allreduce " + where);
              }
            }
          }
        }
      }
      return Status::Ok();
    }, TransportOptions("shm", 5s));
    ExpectAllOk(results);
  }
}

TEST(CommTest, WaitForReportsStillRunning) {
  std::atomic<bool> go{false};
  auto results = RunRanks(2, [&](Communicator& comm) -> Status {
    std::vector<int32_t> v(1 << 18, 1);  // large: runs on the progress thread
    if (comm.rank() == 1) {
      while (!go.load()) std::this_thread::sleep_for(5ms);
    }
    Work w = comm.Allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum);
    if (comm.rank() == 0) {
      Status s = w.WaitFor(50ms);
      go = true;
      if (s.code() != Code::kCollectiveTimeout || w.Done()) {
        return Status(Code::kInternal, "WaitFor should report a running op, got " + s.ToString());
      }
    }
    CHOIR_RETURN_IF_ERROR(w.Wait());
    return v[12345] == 2 ? Status::Ok() : Status(Code::kInternal, "bad value");
  });
  ExpectAllOk(results);
}

TEST(CommTest, ThenRunsOnceWithTheFinalStatus) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    std::vector<int32_t> big(1 << 18, 1);
    std::atomic<int> calls{0};
    Status seen = InternalError("not called");
    std::mutex mu;
    Work w = comm.Allreduce(big.data(), big.data(), big.size(), DataType::kInt32, ReduceOp::kSum);
    w.Then([&](const Status& s) {
      std::lock_guard<std::mutex> lock(mu);
      seen = s;
      ++calls;
    });
    CHOIR_RETURN_IF_ERROR(w.Wait());
    w.Then([&](const Status&) { ++calls; });  // already done: runs right here
    std::lock_guard<std::mutex> lock(mu);
    if (calls.load() != 2 || !seen.ok()) return Status(Code::kInternal, "callbacks: " + std::to_string(calls.load()));
    return Status::Ok();
  });
  ExpectAllOk(results);
}

TEST(CommTest, UnknownForcedAlgorithmIsInvalidArgument) {
  auto results = RunRanks(2, [](Communicator& comm) -> Status {
    int32_t v = 1;
    CallOptions call;
    call.algorithm = "telepathy";
    Status s = comm.Allreduce(&v, &v, 1, DataType::kInt32, ReduceOp::kSum, call).Wait();
    return s.code() == Code::kInvalidArgument ? Status::Ok() : Status(Code::kInternal, s.ToString());
  });
  ExpectAllOk(results);
}

}  // namespace
}  // namespace choir
