// Point-to-point progress (comm/p2p.cc): a Send or Recv that cannot finish at
// once is pending, the call returns, and later operations, waits and the
// progress thread finish it.
#include <gtest/gtest.h>

#include <algorithm>
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
using testing::ExpectAllOk;
using testing::RunRanks;
using testing::TransportOptions;


Status Wrong(const std::string& what) { return Status(Code::kInternal, what); }

// Element i of the message `from` sends to `to` with `tag`.
int32_t Value(int from, int to, int tag, size_t i) {
  return static_cast<int32_t>(from * 1000003 + to * 10007 + tag * 101 +
                              static_cast<int>(i % 99991));
}

Status CheckMessage(const std::vector<int32_t>& got, int from, int to, int tag) {
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != Value(from, to, tag, i)) {
      return Wrong("message from rank " + std::to_string(from) + " tag " + std::to_string(tag) +
                   ": element " + std::to_string(i) + " is " + std::to_string(got[i]) + ", want " +
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

// Waits until `done()` or until `limit` passed, napping `nap` between looks
// (0: yield). Ranks signal each other through atomics: a rank that returns
// early releases its peer with SetOnExit.
template <class F>
void WaitUntil(F done, std::chrono::milliseconds limit, std::chrono::milliseconds nap = 1ms) {
  const auto until = std::chrono::steady_clock::now() + limit;
  while (!done() && std::chrono::steady_clock::now() < until) {
    if (nap.count() == 0) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(nap);
    }
  }
}

// Stores `value` into `flag` when it goes out of scope.
template <class T>
struct SetOnExit {
  std::atomic<T>& flag;
  T value;
  ~SetOnExit() { flag.store(value); }
};

class P2PProgressTest : public ::testing::TestWithParam<std::string> {};

// Both ranks post their receive before the send the other one waits for
// (irecv, then send; batch_isend_irecv([irecv, isend])): small and large.
TEST_P(P2PProgressTest, ReceivePostedBeforeTheSendOnBothRanks) {
  auto results = RunRanks(
      2,
      [](Communicator& c) -> Status {
        const int peer = 1 - c.rank();
        for (size_t count : {size_t{1}, size_t{1000}, size_t{3} << 20}) {
          std::vector<int32_t> in(count, -1);
          const std::vector<int32_t> out = Message(c.rank(), peer, 3, count);
          Work r = c.Recv(in.data(), count, DataType::kInt32, peer, 3);
          Work s = c.Send(out.data(), count, DataType::kInt32, peer, 3);
          CHOIR_RETURN_IF_ERROR(s.Wait());
          CHOIR_RETURN_IF_ERROR(r.Wait());
          CHOIR_RETURN_IF_ERROR(CheckMessage(in, peer, c.rank(), 3));
          if (r.info().source_rank != peer)
            return Wrong("source rank " + std::to_string(r.info().source_rank));
        }
        return Status::Ok();
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// Two ranks that each send 12 MiB (more than any transport buffers) before
// they receive: both sends progress while each rank waits.
TEST_P(P2PProgressTest, LargeSendsBeforeReceivesOnBothRanks) {
  auto results = RunRanks(
      2,
      [](Communicator& c) -> Status {
        const int peer = 1 - c.rank();
        const size_t count = size_t{3} << 20;
        const std::vector<int32_t> out = Message(c.rank(), peer, 9, count);
        std::vector<int32_t> in(count, -1);
        Work s = c.Send(out.data(), count, DataType::kInt32, peer, 9);
        Work r = c.Recv(in.data(), count, DataType::kInt32, peer, 9);
        CHOIR_RETURN_IF_ERROR(s.Wait());
        CHOIR_RETURN_IF_ERROR(r.Wait());
        return CheckMessage(in, peer, c.rank(), 9);
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// Receives from one peer match by tag whatever the order they were posted
// in: with an older receive (tag 3) still open, a younger one (tag 1) gets
// its message and finishes, and the wait for it returns while tag 3 is only
// sent afterwards.
TEST_P(P2PProgressTest, ReceivesMatchByTagWhateverTheOrder) {
  std::atomic<bool> first_done{false};
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        const size_t count = 5000;
        if (c.rank() == 1) {
          for (int tag : {1, 2}) {
            const std::vector<int32_t> out = Message(1, 0, tag, count);
            CHOIR_RETURN_IF_ERROR(c.Send(out.data(), count, DataType::kInt32, 0, tag).Wait());
          }
          WaitUntil([&] { return first_done.load(); }, 20s);
          const std::vector<int32_t> out = Message(1, 0, 3, count);
          return c.Send(out.data(), count, DataType::kInt32, 0, 3).Wait();
        }
        SetOnExit<bool> release{first_done, true};
        std::vector<std::vector<int32_t>> in(4, std::vector<int32_t>(count, -1));
        Work r3 = c.Recv(in[3].data(), count, DataType::kInt32, 1, 3);
        Work r2 = c.Recv(in[2].data(), count, DataType::kInt32, 1, 2);
        Work r1 = c.Recv(in[1].data(), count, DataType::kInt32, 1, 1);
        CHOIR_RETURN_IF_ERROR(r1.Wait());
        CHOIR_RETURN_IF_ERROR(r2.Wait());
        if (r3.Done()) return Wrong("tag 3 finished before it was sent");
        first_done.store(true);
        CHOIR_RETURN_IF_ERROR(r3.Wait());
        for (int tag : {1, 2, 3})
          CHOIR_RETURN_IF_ERROR(CheckMessage(in[static_cast<size_t>(tag)], 1, 0, tag));
        return Status::Ok();
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// Receives from any source take the messages in the order they were posted
// (the first gets the first message to arrive), each reporting its sender;
// an open receive from any source does not hold a younger receive with
// another tag.
TEST_P(P2PProgressTest, AnySourceReceivesMatchInPostedOrder) {
  std::atomic<int> stage{0};
  auto wait_stage = [&](int want) {
    WaitUntil([&] { return stage.load() >= want; }, 20s);
  };
  auto results = RunRanks(
      3,
      [&](Communicator& c) -> Status {
        const size_t count = 64;
        if (c.rank() == 1) {
          const std::vector<int32_t> a = Message(1, 0, 5, count);
          CHOIR_RETURN_IF_ERROR(c.Send(a.data(), count, DataType::kInt32, 0, 5).Wait());
          const std::vector<int32_t> b = Message(1, 0, 6, count);
          return c.Send(b.data(), count, DataType::kInt32, 0, 6).Wait();
        }
        if (c.rank() == 2) {
          wait_stage(1);
          const std::vector<int32_t> a = Message(2, 0, 5, count);
          return c.Send(a.data(), count, DataType::kInt32, 0, 5).Wait();
        }
        SetOnExit<int> release{stage, 9};
        std::vector<std::vector<int32_t>> in(3, std::vector<int32_t>(count, -1));
        Work x = c.Recv(in[0].data(), count, DataType::kInt32, Communicator::kAnySource, 5);
        Work y = c.Recv(in[1].data(), count, DataType::kInt32, Communicator::kAnySource, 5);
        Work z = c.Recv(in[2].data(), count, DataType::kInt32, 1, 6);
        CHOIR_RETURN_IF_ERROR(x.Wait());
        CHOIR_RETURN_IF_ERROR(z.Wait());
        if (x.info().source_rank != 1)
          return Wrong("the first receive got rank " + std::to_string(x.info().source_rank));
        if (y.Done()) return Wrong("the second receive finished before rank 2 sent");
        stage.store(1);
        CHOIR_RETURN_IF_ERROR(y.Wait());
        if (y.info().source_rank != 2)
          return Wrong("the second receive got rank " + std::to_string(y.info().source_rank));
        CHOIR_RETURN_IF_ERROR(CheckMessage(in[0], 1, 0, 5));
        CHOIR_RETURN_IF_ERROR(CheckMessage(in[1], 2, 0, 5));
        return CheckMessage(in[2], 1, 0, 6);
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// A pending receive finishes without anyone waiting for it: Done() turns
// true and Then() runs (the progress thread drives it).
TEST_P(P2PProgressTest, PendingReceiveFinishesWithoutAWait) {
  std::atomic<bool> posted{false};
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        const size_t count = 1000;
        if (c.rank() == 1) {
          WaitUntil([&] { return posted.load(); }, 20s);
          const std::vector<int32_t> out = Message(1, 0, 4, count);
          return c.Send(out.data(), count, DataType::kInt32, 0, 4).Wait();
        }
        SetOnExit<bool> release{posted, true};
        std::vector<int32_t> in(count, -1);
        Work r = c.Recv(in.data(), count, DataType::kInt32, 1, 4);
        if (r.Done()) return Wrong("the receive finished before its message was sent");
        std::atomic<int> called{0};
        r.Then([&](const Status& s) { called.store(s.ok() ? 1 : 2); });
        posted.store(true);
        WaitUntil([&] { return r.Done(); }, 10s);
        if (!r.Done()) return Wrong("the receive did not finish within 10 s without a wait");
        if (called.load() != 1)
          return Wrong("Then() callback state " + std::to_string(called.load()));
        return CheckMessage(in, 1, 0, 4);
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// A collective issued while a receive is pending waits for its message,
// then runs: both results exact.
TEST_P(P2PProgressTest, CollectiveAfterAPendingReceive) {
  std::atomic<bool> posted{false};
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        const size_t count = 2000;
        std::vector<int32_t> in(count, -1);
        Work r;
        if (c.rank() == 0) {
          SetOnExit<bool> release{posted, true};
          r = c.Recv(in.data(), count, DataType::kInt32, 1, 8);
          if (r.Done()) return Wrong("the receive finished before its message was sent");
        } else {
          WaitUntil([&] { return posted.load(); }, 20s);
          const std::vector<int32_t> out = Message(1, 0, 8, count);
          CHOIR_RETURN_IF_ERROR(c.Send(out.data(), count, DataType::kInt32, 0, 8).Wait());
        }
        for (int round = 0; round < 3; ++round) {
          std::vector<int32_t> v(100, c.rank() + 1 + round);
          CHOIR_RETURN_IF_ERROR(
              c.Allreduce(v.data(), v.data(), v.size(), DataType::kInt32, ReduceOp::kSum).Wait());
          for (int32_t x : v) {
            if (x != 3 + 2 * round) return Wrong("allreduce gave " + std::to_string(x));
          }
        }
        if (c.rank() == 1) return Status::Ok();
        CHOIR_RETURN_IF_ERROR(r.Wait());
        return CheckMessage(in, 1, 0, 8);
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// A receive whose message never comes fails at its deadline, naming the
// peer and tag, and does not wait for the communicator's own timeout.
TEST_P(P2PProgressTest, PendingReceiveTimesOutNamingItsPeer) {
  std::atomic<bool> checked{false};
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        if (c.rank() == 1) {
          // Stays until rank 0 has its error, so that the peer is not lost.
          WaitUntil([&] { return checked.load(); }, 30s, 5ms);
          return Status::Ok();
        }
        SetOnExit<bool> release{checked, true};
        int32_t x = -1;
        CallOptions o;
        o.timeout = 300ms;
        const auto t0 = std::chrono::steady_clock::now();
        Work r = c.Recv(&x, 1, DataType::kInt32, 1, 11, o);
        const Status s = r.Wait();
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s.code() != Code::kCollectiveTimeout ||
            s.message().find("recv from rank 1 (tag 11)") == std::string::npos) {
          return Wrong("want E400 naming the receive, got " + s.ToString());
        }
        // Its own 0.3 s deadline, not the communicator's 20 s.
        if (took < 0.25 || took > 10) return Wrong("took " + std::to_string(took) + " s");
        // The message gives the whole wait, not the last restart of the drive.
        const size_t at = s.message().find("no progress for ");
        if (at == std::string::npos || std::stod(s.message().substr(at + 16)) < 0.2) {
          return Wrong("want the wait (about 0.3 s) in the message, got " + s.ToString());
        }
        if (x != -1) return Wrong("the buffer was written");
        return Status::Ok();
      },
      TransportOptions(GetParam(), 20s));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].run.ok()) << results[0].run.ToString();
}

// Destroying a communicator with a receive pending completes its Work with
// E402 saying so, instead of waiting for the timeout.
TEST_P(P2PProgressTest, DestroyingTheCommunicatorFailsPendingOperations) {
  auto results = RunRanks(
      2,
      [](Communicator& world) -> Status {
        auto sub = world.Split(0, world.rank());
        if (!sub.ok()) return sub.status();
        if (world.rank() == 0) {
          int32_t x = -1;
          Work r = (*sub)->Recv(&x, 1, DataType::kInt32, 1, 2);
          const auto t0 = std::chrono::steady_clock::now();
          sub->reset();
          const double took =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
          const Status s = r.Wait();
          if (s.code() != Code::kAborted ||
              s.message().find("destroyed while this operation was pending") == std::string::npos) {
            return Wrong("want E402 naming the destruction, got " + s.ToString());
          }
          if (took > 5) return Wrong("destruction took " + std::to_string(took) + " s");
        }
        CHOIR_RETURN_IF_ERROR(world.Barrier().Wait());
        sub->reset();
        return Status::Ok();
      },
      TransportOptions(GetParam(), 20s));
  ExpectAllOk(results);
}

// Many interleaved exchanges in both directions, as a pipeline schedule
// issues them: both ranks post each receive before its send, tags in
// descending order while the peer's messages of a round arrive in any
// order; every message arrives exactly once, in its buffer.
TEST_P(P2PProgressTest, ManyInterleavedExchanges) {
  auto results = RunRanks(
      2,
      [](Communicator& c) -> Status {
        const int peer = 1 - c.rank();
        const size_t count = 777;
        for (int round = 0; round < 50; ++round) {
          std::vector<std::vector<int32_t>> in(4, std::vector<int32_t>(count, -1));
          std::vector<std::vector<int32_t>> out;
          std::vector<Work> works;
          for (int k = 0; k < 4; ++k) out.push_back(Message(c.rank(), peer, round * 4 + k, count));
          for (int k = 3; k >= 0; --k) {
            const int tag = round * 4 + k;
            works.push_back(
                c.Recv(in[static_cast<size_t>(k)].data(), count, DataType::kInt32, peer, tag));
            // Rank 1 sends its tags in ascending order, rank 0 in descending order.
            const int send_k = c.rank() == 1 ? 3 - k : k;
            works.push_back(c.Send(out[static_cast<size_t>(send_k)].data(), count, DataType::kInt32,
                                   peer, round * 4 + send_k));
          }
          // Rank 0 waits in posting order, rank 1 in reverse.
          if (c.rank() == 1) std::reverse(works.begin(), works.end());
          for (Work& w : works) CHOIR_RETURN_IF_ERROR(w.Wait());
          for (int k = 0; k < 4; ++k) {
            CHOIR_RETURN_IF_ERROR(
                CheckMessage(in[static_cast<size_t>(k)], peer, c.rank(), round * 4 + k));
          }
        }
        return Status::Ok();
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// An older open receive from the same peer does not hold a younger one with
// another tag, even when the message the older one waits for is only sent
// after the younger one finished (the peer needs something first).
TEST_P(P2PProgressTest, AnOlderReceiveDoesNotHoldAYoungerOneWithAnotherTag) {
  auto results = RunRanks(
      2,
      [](Communicator& c) -> Status {
        int32_t a = -1, b = -1, nine = 9, back = -1;
        if (c.rank() == 0) {
          Work r3 = c.Recv(&a, 1, DataType::kInt32, 1, 3);
          Work r1 = c.Recv(&b, 1, DataType::kInt32, 1, 1);
          CHOIR_RETURN_IF_ERROR(r1.Wait());
          CHOIR_RETURN_IF_ERROR(c.Send(&nine, 1, DataType::kInt32, 1, 9).Wait());
          CHOIR_RETURN_IF_ERROR(r3.Wait());
          if (a != 33 || b != 11)
            return Wrong("got " + std::to_string(a) + ", " + std::to_string(b));
          return Status::Ok();
        }
        int32_t eleven = 11, thirty_three = 33;
        CHOIR_RETURN_IF_ERROR(c.Send(&eleven, 1, DataType::kInt32, 0, 1).Wait());
        CHOIR_RETURN_IF_ERROR(c.Recv(&back, 1, DataType::kInt32, 0, 9).Wait());
        if (back != 9) return Wrong("got " + std::to_string(back));
        return c.Send(&thirty_three, 1, DataType::kInt32, 0, 3).Wait();
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// The same with an open receive from any source: it holds only receives
// with its own tag.
TEST_P(P2PProgressTest, AnOpenAnySourceReceiveDoesNotHoldOtherTags) {
  auto results = RunRanks(
      2,
      [](Communicator& c) -> Status {
        int32_t a = -1, b = -1, three = 3, back = -1;
        if (c.rank() == 0) {
          Work any = c.Recv(&a, 1, DataType::kInt32, Communicator::kAnySource, 1);
          Work r2 = c.Recv(&b, 1, DataType::kInt32, 1, 2);
          CHOIR_RETURN_IF_ERROR(r2.Wait());
          CHOIR_RETURN_IF_ERROR(c.Send(&three, 1, DataType::kInt32, 1, 3).Wait());
          CHOIR_RETURN_IF_ERROR(any.Wait());
          if (a != 1 || b != 2 || any.info().source_rank != 1)
            return Wrong("got " + std::to_string(a) + ", " + std::to_string(b));
          return Status::Ok();
        }
        int32_t one = 1, two = 2;
        CHOIR_RETURN_IF_ERROR(c.Send(&two, 1, DataType::kInt32, 0, 2).Wait());
        CHOIR_RETURN_IF_ERROR(c.Recv(&back, 1, DataType::kInt32, 0, 3).Wait());
        if (back != 3) return Wrong("got " + std::to_string(back));
        return c.Send(&one, 1, DataType::kInt32, 0, 1).Wait();
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// A Then() callback of a pending receive never runs inside another call on
// the calling thread (the torch backend issues operations under a lock its
// future callbacks may take again): the receive that an inline Send finishes
// completes later, on a wait or the progress thread.
TEST_P(P2PProgressTest, CallbacksOfOtherOperationsNeverRunInsideACall) {
  std::atomic<int> stage{0};
  auto wait_stage = [&](int want) {
    WaitUntil([&] { return stage.load() >= want; }, 20s, 0ms);
  };
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        int32_t x = -1, one = 1, two = 2, got = -1;
        if (c.rank() == 1) {
          wait_stage(1);
          CHOIR_RETURN_IF_ERROR(c.Send(&one, 1, DataType::kInt32, 0, 1).Wait());
          stage.store(2);
          CHOIR_RETURN_IF_ERROR(c.Recv(&got, 1, DataType::kInt32, 0, 2).Wait());
          return got == 2 ? Status::Ok() : Wrong("got " + std::to_string(got));
        }
        SetOnExit<int> release{stage, 9};
        static thread_local bool in_call = false;
        std::atomic<int> inside{0}, ran{0};
        Work r = c.Recv(&x, 1, DataType::kInt32, 1, 1);
        if (r.Done()) return Wrong("the receive finished before its message was sent");
        r.Then([&](const Status&) {
          ran.fetch_add(1);
          if (in_call) inside.fetch_add(1);
        });
        stage.store(1);
        // The message is on its way: the Send below finds it (most runs; the
        // progress thread takes pending work only after 200 us).
        wait_stage(2);
        in_call = true;
        Work s = c.Send(&two, 1, DataType::kInt32, 1, 2);
        in_call = false;
        CHOIR_RETURN_IF_ERROR(s.Wait());
        CHOIR_RETURN_IF_ERROR(r.Wait());
        if (ran.load() != 1 || inside.load() != 0) {
          return Wrong("callback ran " + std::to_string(ran.load()) + " times, " +
                       std::to_string(inside.load()) + " inside a call");
        }
        return x == 1 ? Status::Ok() : Wrong("got " + std::to_string(x));
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// Abort() ends a pending receive at once with E402.
TEST_P(P2PProgressTest, AbortEndsPendingOperations) {
  std::atomic<bool> checked{false};
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        if (c.rank() == 1) {
          WaitUntil([&] { return checked.load(); }, 20s);
          return Status::Ok();
        }
        SetOnExit<bool> release{checked, true};
        int32_t x = -1;
        Work r = c.Recv(&x, 1, DataType::kInt32, 1, 1);
        std::this_thread::sleep_for(
            20ms);  // the progress thread may be asleep in the transport by now
        const auto t0 = std::chrono::steady_clock::now();
        c.Abort("test");
        const Status s = r.Wait();
        const double took =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (s.code() != Code::kAborted) return Wrong("want E402, got " + s.ToString());
        if (took > 5) return Wrong("took " + std::to_string(took) + " s");
        return Status::Ok();
      },
      TransportOptions(GetParam(), 60s));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].run.ok()) << results[0].run.ToString();
}

// Two threads of one rank wait for receives that one drive moves: the one
// whose receive finishes first wakes at once (while the other thread's drive
// goes on) and sends what the peer needs before the other message comes.
TEST_P(P2PProgressTest, AWaiterWakesWhenAnotherThreadsDriveFinishesItsReceive) {
  // Which thread drives is up to the scheduler: several rounds make the one
  // that matters (the other thread's drive finishes this receive) likely.
  for (int round = 0; round < 5; ++round) {
    std::atomic<int> waiting{0};
    auto results = RunRanks(
        2,
        [&](Communicator& c) -> Status {
          if (c.rank() == 1) {
            WaitUntil([&] { return waiting.load() >= 2; }, 20s);
            std::this_thread::sleep_for(20ms);  // both threads of rank 0 are inside Wait by now
            int32_t two = 2, one = 1, got = -1;
            CHOIR_RETURN_IF_ERROR(c.Send(&two, 1, DataType::kInt32, 0, 2).Wait());
            CHOIR_RETURN_IF_ERROR(c.Recv(&got, 1, DataType::kInt32, 0, 3).Wait());
            if (got != 3) return Wrong("got " + std::to_string(got));
            return c.Send(&one, 1, DataType::kInt32, 0, 1).Wait();
          }
          SetOnExit<int> release{waiting, 9};
          int32_t a = -1, b = -1, three = 3;
          Status first;
          std::thread other([&] {
            Work r1 = c.Recv(&a, 1, DataType::kInt32, 1, 1);
            waiting.fetch_add(1);
            first = r1.Wait();
          });
          Work r2 = c.Recv(&b, 1, DataType::kInt32, 1, 2);
          waiting.fetch_add(1);
          Status second = r2.Wait();
          if (second.ok()) second = c.Send(&three, 1, DataType::kInt32, 1, 3).Wait();
          other.join();
          CHOIR_RETURN_IF_ERROR(second);
          CHOIR_RETURN_IF_ERROR(first);
          if (a != 1 || b != 2) return Wrong("got " + std::to_string(a) + ", " + std::to_string(b));
          return Status::Ok();
        },
        TransportOptions(GetParam(), 10s));
    ExpectAllOk(results);
    if (HasFailure()) break;
  }
}

// A receive from any source is not held by an older open receive with its
// tag that names another sender: it takes the third rank's message while the
// named sender still waits for this rank.
TEST_P(P2PProgressTest, AnySourceReceiveIsNotHeldByAReceiveNamingAnotherSender) {
  auto results = RunRanks(
      3,
      [](Communicator& c) -> Status {
        int32_t from1 = -1, any = -1, six = 6, got = -1;
        if (c.rank() == 0) {
          Work named = c.Recv(&from1, 1, DataType::kInt32, 1, 5);
          Work anyone = c.Recv(&any, 1, DataType::kInt32, Communicator::kAnySource, 5);
          CHOIR_RETURN_IF_ERROR(anyone.Wait());
          if (anyone.info().source_rank != 2 || any != 52) {
            return Wrong("the receive from any source got " + std::to_string(any) + " from rank " +
                         std::to_string(anyone.info().source_rank));
          }
          if (named.Done()) return Wrong("the receive from rank 1 finished before rank 1 sent");
          CHOIR_RETURN_IF_ERROR(c.Send(&six, 1, DataType::kInt32, 1, 6).Wait());
          CHOIR_RETURN_IF_ERROR(named.Wait());
          return from1 == 51 ? Status::Ok()
                             : Wrong("the receive from rank 1 got " + std::to_string(from1));
        }
        if (c.rank() == 1) {
          CHOIR_RETURN_IF_ERROR(c.Recv(&got, 1, DataType::kInt32, 0, 6).Wait());
          if (got != 6) return Wrong("got " + std::to_string(got));
          int32_t v = 51;
          return c.Send(&v, 1, DataType::kInt32, 0, 5).Wait();
        }
        int32_t v = 52;
        return c.Send(&v, 1, DataType::kInt32, 0, 5).Wait();
      },
      TransportOptions(GetParam()));
  ExpectAllOk(results);
}

// A pending receive that gets a shorter message than it expects fails with
// E107, and so does the collective issued after it on that rank (naming the
// receive's problem, not a peer's abort).
TEST_P(P2PProgressTest, AShortMessageForAPendingReceiveFailsTheNextCollectiveWithItsCause) {
  std::atomic<bool> posted{false};
  auto results = RunRanks(
      2,
      [&](Communicator& c) -> Status {
        std::vector<int32_t> buf(10, -1);
        if (c.rank() == 1) {
          WaitUntil([&] { return posted.load(); }, 20s);
          (void)c.Send(buf.data(), 5, DataType::kInt32, 0, 4).Wait();
          (void)c.Allreduce(buf.data(), buf.data(), 1, DataType::kInt32, ReduceOp::kSum).Wait();
          return Status::Ok();
        }
        SetOnExit<bool> release{posted, true};
        Work r = c.Recv(buf.data(), 10, DataType::kInt32, 1, 4);
        posted.store(true);
        const Status coll =
            c.Allreduce(buf.data() + 5, buf.data() + 5, 1, DataType::kInt32, ReduceOp::kSum).Wait();
        const Status recv = r.Wait();
        if (recv.code() != Code::kBufferTooSmall)
          return Wrong("receive: want E107, got " + recv.ToString());
        if (coll.code() != Code::kBufferTooSmall)
          return Wrong("allreduce: want E107, got " + coll.ToString());
        return Status::Ok();
      },
      TransportOptions(GetParam()));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_TRUE(results[0].run.ok()) << results[0].run.ToString();
}

INSTANTIATE_TEST_SUITE_P(Transports, P2PProgressTest, ::testing::Values("shm", "tcp"),
                         [](const auto& param_info) { return param_info.param; });

}  // namespace
}  // namespace choir
