// Point-to-point progress (comm/p2p.cc): a Send or Recv that cannot finish at
// once is pending, the call returns, and later operations, waits and the
// progress thread finish it.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <numeric>
#include <set>
#include <thread>
#include <vector>

#include "choir/communicator.h"
#include "testing/multi_rank.h"

namespace choir {
namespace {

using namespace std::chrono_literals;
using testing::RunRanks;

CommOptions Opts(const std::string& transport, std::chrono::milliseconds timeout = 20s) {
  CommOptions o;
  o.transport = transport;
  o.timeout = timeout;
  return o;
}

void ExpectAllOk(const std::vector<testing::RankResult>& results) {
  for (size_t r = 0; r < results.size(); ++r) {
    EXPECT_TRUE(results[r].create.ok()) << "rank " << r << ": " << results[r].create.ToString();
    EXPECT_TRUE(results[r].run.ok()) << "rank " << r << ": " << results[r].run.ToString();
  }
}

Status Wrong(const std::string& what) { return Status(Code::kInternal, what); }

// Element i of the message `from` sends to `to` with `tag`.
int32_t Value(int from, int to, int tag, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 10007 + tag * 101 + static_cast<int>(i % 99991));
}

Status CheckMessage(const std::vector<int32_t>& got, int from, int to, int tag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(from, to, tag, i)) {
      return Wrong("message from rank " + std::to_string(from) + " tag " + std::to_string(tag) + ": element " +
                   std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
                   std::to_string(Value(from, to, tag, i)));
    }
  }
  return Status::Ok();
}

std::vector<int32_t> Message(int from, int to, int tag, size_t count) {
  std::vector<int32_t> v(count);
  for (size_t i = 0; i < count; ++i) v[i] = Value(from, to, tag, i);
  return v;
}

class P2PProgressTest : public ::testing::TestWithParam<std::string> {};

// Both ranks post their receive before the send the other one waits for
// (irecv, then send; batch_isend_irecv([irecv, isend])): small and large.
TEST_P(P2PProgressTest, ReceivePostedBeforeTheSendOnBothRanks) {
  auto results = RunRanks(2, [](Communicator& c) -> Status {
    const int peer = 1 - c.rank();
    for (size_t count : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
      std::vector<int32_t> in(count, -1);
      const std::vector<int32_t> out = Message(c.rank(), peer, 3, count);
      Work r = c.Recv(in.data(), count, DataType::kInt32, peer, 3);
      Work s = c.Send(out.data(), count, DataType::kInt32, peer, 3);
      CHOIR_RETURN_IF_ERROR(s.Wait());
      CHOIR_RETURN_IF_ERROR(r.Wait());
      CHOIR_RETURN_IF_ERROR(CheckMessage(in, peer, c.rank(), 3));
      if (r.info().source_rank != peer) return Wrong("source rank " + std::to_string(r.info().source_rank));
    }
    return Status::Ok();
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

// Two ranks that each send 12 MiB (more than any transport buffers) before
// they receive: both sends progress while each rank waits.
TEST_P(P2PProgressTest, LargeSendsBeforeReceivesOnBothRanks) {
  auto results = RunRanks(2, [](Communicator& c) -> Status {
    const int peer = 1 - c.rank();
    const size_t count = size_t{3} << 20;
    const std::vector<int32_t> out = Message(c.rank(), peer, 9, count);
    std::vector<int32_t> in(count, -1);
    Work s = c.Send(out.data(), count, DataType::kInt32, peer, 9);
    Work r = c.Recv(in.data(), count, DataType::kInt32, peer, 9);
    CHOIR_RETURN_IF_ERROR(s.Wait());
    CHOIR_RETURN_IF_ERROR(r.Wait());
    return CheckMessage(in, peer, c.rank(), 9);
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

// Receives posted in the reverse order of the sends match by tag; a wait for
// the second one returns once it is done while the first is still pending.
TEST_P(P2PProgressTest, ReceivesMatchByTagWhateverTheOrder) {
  auto results = RunRanks(2, [](Communicator& c) -> Status {
    const size_t count = 5000;
    if (c.rank() == 1) {
      for (int tag : {1, 2, 3}) {
        const std::vector<int32_t> out = Message(1, 0, tag, count);
        CHOIR_RETURN_IF_ERROR(c.Send(out.data(), count, DataType::kInt32, 0, tag).Wait());
      }
      return Status::Ok();
    }
    std::vector<std::vector<int32_t>> in(4, std::vector<int32_t>(count, -1));
    Work r3 = c.Recv(in[3].data(), count, DataType::kInt32, 1, 3);
    Work r2 = c.Recv(in[2].data(), count, DataType::kInt32, 1, 2);
    Work r1 = c.Recv(in[1].data(), count, DataType::kInt32, 1, 1);
    CHOIR_RETURN_IF_ERROR(r1.Wait());
    CHOIR_RETURN_IF_ERROR(r2.Wait());
    CHOIR_RETURN_IF_ERROR(r3.Wait());
    for (int tag : {1, 2, 3}) CHOIR_RETURN_IF_ERROR(CheckMessage(in[static_cast<size_t>(tag)], 1, 0, tag));
    return Status::Ok();
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

// Receives from any source take the messages in the order they were posted,
// each reporting its sender; a receive from a named rank posted after them
// waits for its own message.
TEST_P(P2PProgressTest, AnySourceReceivesMatchInPostedOrder) {
  auto results = RunRanks(3, [](Communicator& c) -> Status {
    const size_t count = 64;
    if (c.rank() != 0) {
      const std::vector<int32_t> a = Message(c.rank(), 0, 5, count);
      const std::vector<int32_t> b = Message(c.rank(), 0, 6, count);
      CHOIR_RETURN_IF_ERROR(c.Send(a.data(), count, DataType::kInt32, 0, 5).Wait());
      return c.Send(b.data(), count, DataType::kInt32, 0, 6).Wait();
    }
    std::vector<std::vector<int32_t>> in(3, std::vector<int32_t>(count, -1));
    Work x = c.Recv(in[0].data(), count, DataType::kInt32, Communicator::kAnySource, 5);
    Work y = c.Recv(in[1].data(), count, DataType::kInt32, Communicator::kAnySource, 5);
    Work z = c.Recv(in[2].data(), count, DataType::kInt32, 2, 6);
    CHOIR_RETURN_IF_ERROR(z.Wait());
    CHOIR_RETURN_IF_ERROR(x.Wait());
    CHOIR_RETURN_IF_ERROR(y.Wait());
    const int fx = x.info().source_rank, fy = y.info().source_rank;
    if (std::set<int>{fx, fy} != std::set<int>{1, 2}) {
      return Wrong("senders " + std::to_string(fx) + ", " + std::to_string(fy));
    }
    CHOIR_RETURN_IF_ERROR(CheckMessage(in[0], fx, 0, 5));
    CHOIR_RETURN_IF_ERROR(CheckMessage(in[1], fy, 0, 5));
    CHOIR_RETURN_IF_ERROR(CheckMessage(in[2], 2, 0, 6));
    // Rank 1's tag 6 is still to be received.
    std::vector<int32_t> last(count, -1);
    CHOIR_RETURN_IF_ERROR(c.Recv(last.data(), count, DataType::kInt32, 1, 6).Wait());
    return CheckMessage(last, 1, 0, 6);
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

// A pending receive finishes without anyone waiting for it: Done() turns
// true and Then() runs (the progress thread drives it).
TEST_P(P2PProgressTest, PendingReceiveFinishesWithoutAWait) {
  auto results = RunRanks(2, [](Communicator& c) -> Status {
    const size_t count = 1000;
    if (c.rank() == 1) {
      std::this_thread::sleep_for(100ms);
      const std::vector<int32_t> out = Message(1, 0, 4, count);
      return c.Send(out.data(), count, DataType::kInt32, 0, 4).Wait();
    }
    std::vector<int32_t> in(count, -1);
    Work r = c.Recv(in.data(), count, DataType::kInt32, 1, 4);
    if (r.Done()) return Wrong("the receive finished before its message was sent");
    std::atomic<int> called{0};
    r.Then([&](const Status& s) { called.store(s.ok() ? 1 : 2); });
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (!r.Done() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    if (!r.Done()) return Wrong("the receive did not finish within 10 s without a wait");
    if (called.load() != 1) return Wrong("Then() callback state " + std::to_string(called.load()));
    return CheckMessage(in, 1, 0, 4);
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

// A collective issued while a receive is pending waits for it, then runs:
// both results exact; small collectives after it run inline again.
TEST_P(P2PProgressTest, CollectiveAfterAPendingReceive) {
  auto results = RunRanks(2, [](Communicator& c) -> Status {
    const size_t count = 2000;
    std::vector<int32_t> in(count, -1);
    Work r;
    if (c.rank() == 0) {
      r = c.Recv(in.data(), count, DataType::kInt32, 1, 8);
    } else {
      const std::vector<int32_t> out = Message(1, 0, 8, count);
      CHOIR_RETURN_IF_ERROR(c.Send(out.data(), count, DataType::kInt32, 0, 8).Wait());
    }
    for (int round = 0; round < 3; ++round) {
      std::vector<int32_t> v(100, c.rank() + 1 + round);
      CHOIR_RETURN_IF_ERROR(c.Allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum).Wait());
      for (int32_t x : v) {
        if (x != 3 + 2 * round) return Wrong("allreduce gave " + std::to_string(x));
      }
    }
    if (c.rank() == 1) return Status::Ok();
    if (!r.Done()) return Wrong("the receive was not finished before the collective");
    CHOIR_RETURN_IF_ERROR(r.Wait());
    return CheckMessage(in, 1, 0, 8);
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

// A receive whose message never comes fails at its deadline, naming the
// peer and tag, and does not wait for the communicator's own timeout.
TEST_P(P2PProgressTest, PendingReceiveTimesOutNamingItsPeer) {
  std::atomic<bool> checked{false};
  auto results = RunRanks(2, [&](Communicator& c) -> Status {
    if (c.rank() == 1) {
      // Stays until rank 0 has its error, so that the peer is not lost.
      const auto until = std::chrono::steady_clock::now() + 30s;
      while (!checked.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(5ms);
      return Status::Ok();
    }
    struct Release {
      std::atomic<bool>& flag;
      ~Release() { flag.store(true); }
    } release{checked};
    int32_t x = -1;
    CallOptions o;
    o.timeout = 300ms;
    const auto t0 = std::chrono::steady_clock::now();
    Work r = c.Recv(&x, 1, DataType::kInt32, 1, 11, o);
    const Status s = r.Wait();
    const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (s.code() != Code::kCollectiveTimeout || s.message().find("recv from rank 1 (tag 11)") == std::string::npos) {
      return Wrong("want E400 naming the receive, got " + s.ToString());
    }
    // Its own 0.3 s deadline, not the communicator's 20 s.
    if (took < 0.25 || took > 10) return Wrong("took " + std::to_string(took) + " s");
    if (x != -1) return Wrong("the buffer was written");
    return Status::Ok();
  }, Opts(GetParam(), 20s));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].run.ok()) << results[0].run.ToString();
}

// Destroying a communicator with a receive pending completes its Work with
// E402 saying so, instead of waiting for the timeout.
TEST_P(P2PProgressTest, DestroyingTheCommunicatorFailsPendingOperations) {
  auto results = RunRanks(2, [](Communicator& world) -> Status {
    auto sub = world.Split(0, world.rank());
    if (!sub.ok()) return sub.status();
    if (world.rank() == 0) {
      int32_t x = -1;
      Work r = (*sub)->Recv(&x, 1, DataType::kInt32, 1, 2);
      const auto t0 = std::chrono::steady_clock::now();
      sub->reset();
      const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const Status s = r.Wait();
      if (s.code() != Code::kAborted || s.message().find("destroyed while this operation was pending") ==
                                            std::string::npos) {
        return Wrong("want E402 naming the destruction, got " + s.ToString());
      }
      if (took > 5) return Wrong("destruction took " + std::to_string(took) + " s");
    }
    CHOIR_RETURN_IF_ERROR(world.Barrier().Wait());
    sub->reset();
    return Status::Ok();
  }, Opts(GetParam(), 20s));
  ExpectAllOk(results);
}

// Many interleaved exchanges in both directions, as a pipeline schedule
// issues them: every message arrives exactly once, in its buffer.
TEST_P(P2PProgressTest, ManyInterleavedExchanges) {
  auto results = RunRanks(2, [](Communicator& c) -> Status {
    const int peer = 1 - c.rank();
    const size_t count = 777;
    for (int round = 0; round < 50; ++round) {
      std::vector<std::vector<int32_t>> in(4, std::vector<int32_t>(count, -1));
      std::vector<std::vector<int32_t>> out;
      std::vector<Work> works;
      for (int k = 0; k < 4; ++k) out.push_back(Message(c.rank(), peer, round * 4 + k, count));
      // Rank 0 posts receives first, rank 1 sends first; both reverse the tags.
      for (int k = 3; k >= 0; --k) {
        const int tag = round * 4 + k;
        Work recv = c.Recv(in[static_cast<size_t>(k)].data(), count, DataType::kInt32, peer, tag);
        Work send = c.Send(out[static_cast<size_t>(k)].data(), count, DataType::kInt32, peer, tag);
        if (c.rank() == 0) {
          works.push_back(recv);
          works.push_back(send);
        } else {
          works.push_back(send);
          works.push_back(recv);
        }
      }
      for (Work& w : works) CHOIR_RETURN_IF_ERROR(w.Wait());
      for (int k = 0; k < 4; ++k) CHOIR_RETURN_IF_ERROR(CheckMessage(in[static_cast<size_t>(k)], peer, c.rank(), round * 4 + k));
    }
    return Status::Ok();
  }, Opts(GetParam()));
  ExpectAllOk(results);
}

INSTANTIATE_TEST_SUITE_P(Transports, P2PProgressTest, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace choir
