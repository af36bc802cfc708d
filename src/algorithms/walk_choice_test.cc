// The measured choice between the pipe and the kernel copy: every rank must
// reach the same walk from the same exchanged numbers, the kernel copy must
// win only by the margin, the other walk is tried once per period, and a
// rank that does not adapt keeps everyone on the pipe. Then the store kind
// of the pipe's staging (StagingChooser): each rank alone, with exact call
// numbers for its schedule.
#include "algorithms/walk_choice.h"

#include <gtest/gtest.h>

#include <bit>
#include <functional>
#include <vector>

namespace choir::algorithms {
namespace {

using Walk = WalkChooser::Walk;
constexpr size_t kBytes = 1 << 20;

// `ranks` choosers fed the same timings per rank; returns every rank's walks
// for `calls` calls, with `pipe_ns`/`kernel_ns` as rank r's time for each.
std::vector<std::vector<Walk>> RunRanks(int ranks, int calls, const std::vector<int64_t>& pipe_ns,
                                   const std::vector<int64_t>& kernel_ns, std::vector<bool> adapt = {}) {
  std::vector<WalkChooser> choosers(static_cast<size_t>(ranks));
  if (adapt.empty()) adapt.assign(static_cast<size_t>(ranks), true);
  std::vector<std::vector<Walk>> walks(static_cast<size_t>(ranks));
  for (int call = 0; call < calls; ++call) {
    std::vector<std::vector<uint64_t>> tables;
    for (int r = 0; r < ranks; ++r) {
      tables.push_back(choosers[static_cast<size_t>(r)].Table(CollKind::kAlltoall, kBytes, adapt[static_cast<size_t>(r)]));
    }
    for (int r = 0; r < ranks; ++r) {
      const size_t i = static_cast<size_t>(r);
      const Walk w = choosers[i].Choose(CollKind::kAlltoall, kBytes, tables);
      walks[i].push_back(w);
      choosers[i].Record(CollKind::kAlltoall, kBytes, w, w == Walk::kPipe ? pipe_ns[i] : kernel_ns[i]);
    }
  }
  return walks;
}

constexpr int kPeriod = static_cast<int>(WalkChooser::kExplorePeriod);
constexpr int kRarePeriod = static_cast<int>(WalkChooser::kRareExplorePeriod);

// One rank's choice for a call of `kind` moving `bytes`.
Walk ChooseAlone(WalkChooser& c, CollKind kind, size_t bytes) {
  return c.Choose(kind, bytes, {c.Table(kind, bytes, true)});
}

// `calls` calls of one rank on `c`, each taking ns(call, walk); its walks.
std::vector<Walk> Drive(WalkChooser& c, CollKind kind, int calls, const std::function<int64_t(int, Walk)>& ns) {
  std::vector<Walk> walks;
  for (int call = 0; call < calls; ++call) {
    const Walk w = ChooseAlone(c, kind, kBytes);
    walks.push_back(w);
    c.Record(kind, kBytes, w, ns(call, w));
  }
  return walks;
}

// The calls (indices) whose choice was `w`.
template <typename Choice>
std::vector<int> CallsTaking(const std::vector<Choice>& choices, Choice w) {
  std::vector<int> calls;
  for (size_t i = 0; i < choices.size(); ++i) {
    if (choices[i] == w) calls.push_back(static_cast<int>(i));
  }
  return calls;
}

TEST(WalkChooserTest, PipeUntilTheKernelCopyIsMeasuredThenTriedOncePerPeriod) {
  // The kernel copy 1.5x slower: tried once per period. Its first time
  // (call 16) is dropped as cold.
  const auto walks = RunRanks(2, 4 * kPeriod, {100'000, 100'000}, {150'000, 150'000});
  EXPECT_EQ(CallsTaking(walks[0], Walk::kKernel), (std::vector<int>{16, 48, 80, 112}));
  EXPECT_EQ(walks[0], walks[1]);
}

TEST(WalkChooserTest, RareTriesOfAWalkTwiceAsSlow) {
  // 3x slower once measured (call 48): tried at call 64, then every 128.
  const auto walks = RunRanks(2, 2 * kRarePeriod, {100'000, 100'000}, {300'000, 300'000});
  EXPECT_EQ(CallsTaking(walks[0], Walk::kKernel), (std::vector<int>{16, 48, kRarePeriod / 2, kRarePeriod + kRarePeriod / 2}));
  EXPECT_EQ(walks[0], walks[1]);
}

TEST(WalkChooserTest, KernelCopyTakesOverWhenClearlyFasterOnEveryRank) {
  // The pipe is slow on rank 1 only: the slowest rank decides.
  const auto walks = RunRanks(2, 3 * kPeriod, {100'000, 300'000}, {150'000, 150'000});
  EXPECT_EQ(walks[0], walks[1]);
  // After the kernel copy's second try (call 48) it leads (150 < 0.8 x 300);
  // the pipe, twice as slow, is tried at call 64.
  EXPECT_EQ(CallsTaking(walks[0], Walk::kPipe).size(), 47u + 1u);  // calls 0-47 but 16, and 64
  for (int call = 49; call < 3 * kPeriod; ++call) {
    EXPECT_EQ(walks[0][static_cast<size_t>(call)], call == 64 ? Walk::kPipe : Walk::kKernel) << "call " << call;
  }
}

TEST(WalkChooserTest, KernelCopyMustLeadByTheMargin) {
  // 85 % of the pipe's time is not enough (the margin is 80 %).
  const auto walks = RunRanks(3, 3 * kPeriod, {100'000, 100'000, 100'000}, {85'000, 85'000, 85'000});
  EXPECT_EQ(CallsTaking(walks[0], Walk::kKernel), (std::vector<int>{16, 48, 80}));  // the tries only
  EXPECT_EQ(walks[0], walks[2]);
}

TEST(WalkChooserTest, BackToThePipeAfterOneTryWhenItRecovers) {
  // The pipe 4x slower until call 64: the kernel copy from call 49 (after
  // its second try); the pipe's try at call 64 finds it fast again.
  WalkChooser c;
  const auto walks = Drive(c, CollKind::kAllgather, 5 * kPeriod, [](int call, Walk w) -> int64_t {
    return w == Walk::kPipe ? (call < 2 * kPeriod ? 400'000 : 50'000) : 100'000;
  });
  for (int call = 49; call < 5 * kPeriod; ++call) {
    EXPECT_EQ(walks[static_cast<size_t>(call)], call < 64 ? Walk::kKernel : Walk::kPipe) << "call " << call;
  }
}

// Both walks change speed at call 100 (as in a slow minute on the AMD VM:
// the pipe slower, the kernel copy faster): the walk in use got 3x slower,
// so the next call tries the other at once instead of at the next period.
TEST(WalkChooserTest, AChangeOfTheWalkInUseIsTriedAtOnce) {
  WalkChooser c;
  const auto walks = Drive(c, CollKind::kAlltoall, 200, [](int call, Walk w) -> int64_t {
    const bool slow_minute = call >= 100;
    return w == Walk::kPipe ? (slow_minute ? 300'000 : 100'000) : (slow_minute ? 150'000 : 250'000);
  });
  // Before: the kernel copy 2.5x slower, tried at 16, 48, then 64.
  EXPECT_EQ(CallsTaking(std::vector<Walk>(walks.begin(), walks.begin() + 100), Walk::kKernel),
            (std::vector<int>{16, 48, 64}));
  // The pipe's median of three shows the change after two slow calls (100,
  // 101): call 102 tries the kernel copy, which leads from then on; the
  // pipe, now twice as slow, is tried at 192.
  EXPECT_EQ(walks[101], Walk::kPipe);
  for (int call = 102; call < 200; ++call) {
    EXPECT_EQ(walks[static_cast<size_t>(call)], call == 192 ? Walk::kPipe : Walk::kKernel) << "call " << call;
  }
}

// The walk in use getting faster needs no try: it only gains.
TEST(WalkChooserTest, AWalkThatGetsFasterTriggersNoTry) {
  WalkChooser c;
  const auto walks = Drive(c, CollKind::kAlltoall, 200, [](int call, Walk w) -> int64_t {
    return w == Walk::kPipe ? (call < 100 ? 200'000 : 100'000) : 450'000;
  });
  EXPECT_EQ(CallsTaking(walks, Walk::kKernel), (std::vector<int>{16, 48, 64, 192}));
}

TEST(WalkChooserTest, TheMarginIsStrict) {
  // 0.79x the pipe's time wins from the second try on; 0.81x never does.
  const auto ahead = RunRanks(2, 3 * kPeriod, {100'000, 100'000}, {79'000, 79'000});
  for (int call = 49; call < 3 * kPeriod; ++call) {
    EXPECT_EQ(ahead[0][static_cast<size_t>(call)], call == 80 ? Walk::kPipe : Walk::kKernel) << "call " << call;
  }
  const auto behind = RunRanks(2, 3 * kPeriod, {100'000, 100'000}, {81'000, 81'000});
  EXPECT_EQ(CallsTaking(behind[0], Walk::kKernel), (std::vector<int>{16, 48, 80}));
}

TEST(WalkChooserTest, OneSlowCallDoesNotMoveTheChoice) {
  WalkChooser c;
  const auto walks = Drive(c, CollKind::kAlltoall, 3 * kPeriod, [](int call, Walk w) -> int64_t {
    // Every 5th pipe call is interrupted and takes 10x as long.
    return w == Walk::kPipe ? (call % 5 == 3 ? 1'000'000 : 100'000) : 150'000;
  });
  EXPECT_EQ(CallsTaking(walks, Walk::kKernel), (std::vector<int>{16, 48, 80}));  // the tries only
}

TEST(WalkChooserTest, OneRankThatDoesNotAdaptKeepsEveryRankOnThePipe) {
  const auto walks = RunRanks(2, 3 * kPeriod, {300'000, 300'000}, {100'000, 100'000}, {true, false});
  EXPECT_TRUE(CallsTaking(walks[0], Walk::kKernel).empty());
  EXPECT_EQ(walks[0], walks[1]);
}

TEST(WalkChooserTest, SizeClassesAndCollectivesAreMeasuredApart) {
  WalkChooser c;
  // Teach 1 MiB alltoalls that the kernel copy is faster (from call 49).
  Drive(c, CollKind::kAlltoall, 70, [](int, Walk w) -> int64_t { return w == Walk::kPipe ? 500'000 : 100'000; });
  EXPECT_EQ(ChooseAlone(c, CollKind::kAlltoall, kBytes), Walk::kKernel);
  // Not 4 MiB alltoalls, nor 1 MiB allgathers: still unmeasured, the pipe.
  EXPECT_EQ(ChooseAlone(c, CollKind::kAlltoall, 4 * kBytes), Walk::kPipe);
  EXPECT_EQ(ChooseAlone(c, CollKind::kAllgather, kBytes), Walk::kPipe);
}

TEST(WalkChooserTest, MalformedOrEmptyTablesKeepThePipe) {
  WalkChooser c;
  EXPECT_EQ(c.Choose(CollKind::kAlltoall, kBytes, {{1}}), Walk::kPipe);
  // The cold first time is dropped; failed calls and empty ones are ignored.
  c.Record(CollKind::kAlltoall, kBytes, Walk::kKernel, 5000);
  c.Record(CollKind::kAlltoall, kBytes, Walk::kKernel, 0);
  c.Record(CollKind::kAlltoall, 0, Walk::kKernel, 1000);
  std::vector<uint64_t> t = c.Table(CollKind::kAlltoall, kBytes, true);
  ASSERT_EQ(t.size(), 3u);
  EXPECT_EQ(t[0], 1u);
  EXPECT_EQ(t[2], 0u);
  // The next time counts.
  c.Record(CollKind::kAlltoall, kBytes, Walk::kKernel, static_cast<int64_t>(kBytes) * 2);
  t = c.Table(CollKind::kAlltoall, kBytes, true);
  EXPECT_EQ(std::bit_cast<double>(t[2]), 2.0);
}

// StagingChooser: each rank alone, from its own times.
using Stores = StagingChooser::Stores;
constexpr int kStagePeriod = static_cast<int>(StagingChooser::kExplorePeriod);
constexpr int kStageRarePeriod = static_cast<int>(StagingChooser::kRareExplorePeriod);

// `calls` calls of `kind` moving `bytes` on `c`, each taking ns(call, stores),
// on a host whose home kind is `home`.
std::vector<Stores> DriveStaging(StagingChooser& c, CollKind kind, size_t bytes, int calls,
                                 const std::function<int64_t(int, Stores)>& ns, Stores home = Stores::kPlain) {
  std::vector<Stores> kinds;
  for (int call = 0; call < calls; ++call) {
    const Stores s = c.Choose(kind, bytes, home);
    kinds.push_back(s);
    c.Record(kind, bytes, s, ns(call, s));
  }
  return kinds;
}

// The calls of a try of the other kind in [from, to): kTryCalls from the
// middle of every period.
std::vector<int> TryCalls(int from, int to, int period) {
  std::vector<int> calls;
  for (int c = from; c < to; ++c) {
    if (c % period >= period / 2 && c % period < period / 2 + static_cast<int>(StagingChooser::kTryCalls)) {
      calls.push_back(c);
    }
  }
  return calls;
}

// The calls [from, to).
std::vector<int> Range(int from, int to) {
  std::vector<int> calls;
  for (int c = from; c < to; ++c) calls.push_back(c);
  return calls;
}

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(StagingChooserTest, PlainFirstThenStreamingOnceThenTheFasterWithPeriodicTries) {
  StagingChooser c;
  // Streaming 1.5x slower: calls 1-2 measure it (the first class of a
  // communicator; 3-4 measure plain), then a try once per period.
  const auto kinds = DriveStaging(c, CollKind::kAllreduce, kBytes, 4 * kStagePeriod,
                                  [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 100'000 : 150'000; });
  EXPECT_EQ(CallsTaking(kinds, Stores::kStreaming), Concat({1, 2}, TryCalls(5, 4 * kStagePeriod, kStagePeriod)));
}

TEST(StagingChooserTest, StreamingTakesOverAtOnceWhenFasterAndIsLeftOnlyForRareTries) {
  StagingChooser c;
  // The slow spell: plain stores 3x slower. Streaming from call 6 (once
  // plain has two figures); plain, twice as slow or more, tried once per
  // rare period.
  const auto kinds = DriveStaging(c, CollKind::kAllgather, kBytes, 2 * kStageRarePeriod,
                                  [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 300'000 : 100'000; });
  EXPECT_EQ(CallsTaking(kinds, Stores::kPlain),
            Concat({0, 3, 4, 5}, TryCalls(6, 2 * kStageRarePeriod, kStageRarePeriod)));
}

// The kind that is not home takes over at once in less than half the
// home kind's time, or on a lead of two tries in a row below 0.8 of it:
// calls 1-2 were the first try, which led, so the second comes
// kLeadSpacing calls after it (calls 17-19) and the kind changes at the
// decision after it, call 20. At 0.81 of it, never.
TEST(StagingChooserTest, StreamingTakesOverInHalfThePlainTimeOrOnASteadyLead) {
  auto plain_calls = [](int64_t streaming) {
    StagingChooser c;
    const auto kinds = DriveStaging(c, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
                                    [streaming](int, Stores s) -> int64_t { return s == Stores::kPlain ? 100'000 : streaming; });
    return CallsTaking(kinds, Stores::kPlain);
  };
  const std::vector<int> after_two_tries = Concat({0, 3, 4, 5}, Concat(Range(6, 17), TryCalls(20, 3 * kStagePeriod, kStagePeriod)));
  EXPECT_EQ(plain_calls(49'000), Concat({0, 3, 4, 5}, TryCalls(6, 3 * kStagePeriod, kStageRarePeriod)));
  EXPECT_EQ(plain_calls(51'000), after_two_tries);
  EXPECT_EQ(plain_calls(79'000), after_two_tries);
  StagingChooser close;
  const auto kept = DriveStaging(close, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
                                 [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 100'000 : 81'000; });
  EXPECT_EQ(CallsTaking(kept, Stores::kStreaming), Concat({1, 2}, TryCalls(5, 3 * kStagePeriod, kStagePeriod)));
}

// A lead in one try and not in the next is no steady lead; two tries in a
// row after an even one are. A try that leads brings the next one forward
// to kLeadSpacing calls after it.
TEST(StagingChooserTest, ALeadMustHoldForTwoTriesInARow) {
  StagingChooser c;
  const auto kinds = DriveStaging(c, CollKind::kAllreduce, kBytes, 3 * kStagePeriod, [](int call, Stores s) -> int64_t {
    if (s == Stores::kPlain) return 100'000;
    return call < 10 || call >= 64 ? 70'000 : 100'000;  // ahead in calls 1-2 and from call 64
  });
  // Ahead in calls 1-2, even in the confirming try at 17 and the periodic
  // one at 32: no lead; ahead at 96 and in its confirming try at 112:
  // streaming from 115, plain tried at 160-162.
  EXPECT_EQ(CallsTaking(kinds, Stores::kStreaming),
            Concat({1, 2, 17, 18, 19, 32, 33, 34, 96, 97, 98}, Concat(Range(112, 160), Range(163, 3 * kStagePeriod))));
}

// Where streaming stores are home (the Zen 5 table), the choice mirrors
// the plain-first one: streaming from the start, plain measured in calls
// 1-2 and tried once per period, taken in less than half the time or on a
// steady lead.
TEST(StagingChooserTest, StreamingAtHomeStartsStreamingAndPlainTakesOverAsStreamingDoesElsewhere) {
  StagingChooser faster;
  const auto kept = DriveStaging(
      faster, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
      [](int, Stores s) -> int64_t { return s == Stores::kStreaming ? 100'000 : 150'000; }, Stores::kStreaming);
  EXPECT_EQ(CallsTaking(kept, Stores::kPlain), Concat({1, 2}, TryCalls(5, 3 * kStagePeriod, kStagePeriod)));
  StagingChooser close;
  const auto still = DriveStaging(
      close, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
      [](int, Stores s) -> int64_t { return s == Stores::kStreaming ? 100'000 : 81'000; }, Stores::kStreaming);
  EXPECT_EQ(CallsTaking(still, Stores::kPlain), Concat({1, 2}, TryCalls(5, 3 * kStagePeriod, kStagePeriod)));
  // Plain steadily ahead (0.7x): taken after the second try in a row, the
  // one kLeadSpacing calls after the first (calls 17-19).
  StagingChooser lead;
  const auto led = DriveStaging(
      lead, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
      [](int, Stores s) -> int64_t { return s == Stores::kStreaming ? 100'000 : 70'000; }, Stores::kStreaming);
  EXPECT_EQ(CallsTaking(led, Stores::kStreaming),
            Concat({0, 3, 4, 5}, Concat(Range(6, 17), TryCalls(20, 3 * kStagePeriod, kStagePeriod))));
  StagingChooser ahead;
  const auto taken = DriveStaging(
      ahead, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
      [](int, Stores s) -> int64_t { return s == Stores::kStreaming ? 100'000 : 49'000; }, Stores::kStreaming);
  EXPECT_EQ(CallsTaking(taken, Stores::kStreaming),
            Concat({0, 3, 4, 5}, TryCalls(6, 3 * kStagePeriod, kStageRarePeriod)));
  // Streaming, tried back, takes over again at level (the home margin).
  StagingChooser back;
  const auto home_again = DriveStaging(
      back, CollKind::kAllreduce, kBytes, 3 * kStagePeriod,
      [](int call, Stores s) -> int64_t {
        if (call < kStagePeriod) return s == Stores::kStreaming ? 100'000 : 40'000;
        return s == Stores::kStreaming ? 40'000 : 41'000;
      },
      Stores::kStreaming);
  EXPECT_EQ(home_again.back(), Stores::kStreaming);
}

TEST(StagingChooserTest, TheCallAfterAChangeOfKindIsNotCounted) {
  StagingChooser c;
  // Streaming runs at 0.4x of plain's time, but its first call after plain
  // ones at 3x (and plain's first after streaming at 2x): the first call
  // of a try does not count, so streaming is taken from call 6 (plain's
  // second figure at call 5).
  Stores prev = Stores::kPlain;
  const auto kinds = DriveStaging(c, CollKind::kAlltoall, kBytes, 3 * kStagePeriod, [&](int, Stores s) -> int64_t {
    const bool changed = s != prev;
    prev = s;
    if (s == Stores::kStreaming) return changed ? 300'000 : 40'000;
    return changed ? 200'000 : 100'000;
  });
  EXPECT_EQ(CallsTaking(kinds, Stores::kPlain), Concat({0, 3, 4, 5}, TryCalls(6, 3 * kStagePeriod, kStageRarePeriod)));
}

TEST(StagingChooserTest, ASpellStartingMovesToStreamingWithoutWaitingForATry) {
  StagingChooser c;
  // Plain stores 4x slower from call 50: once three slow calls show it
  // (their least), call 53 takes streaming.
  const auto kinds = DriveStaging(c, CollKind::kAllgather, kBytes, 100, [](int call, Stores s) -> int64_t {
    if (s == Stores::kStreaming) return 130'000;
    return call < 50 ? 100'000 : 400'000;
  });
  for (int call = 35; call < 100; ++call) {
    EXPECT_EQ(kinds[static_cast<size_t>(call)] == Stores::kPlain, call < 53) << "call " << call;
  }
}

TEST(StagingChooserTest, AChangeOfTheKindInUseTriesTheOtherAtOnce) {
  StagingChooser c;
  // The first 40 calls run 4-10x slower (a launch warming up), streaming
  // then 2.5x faster than plain, afterwards 1.5x slower. Streaming from call
  // 6; when its own figure shows the change (after call 40), plain is
  // tried at once, not at the rare period's middle, and taken after the
  // try.
  const auto kinds = DriveStaging(c, CollKind::kReduceScatter, kBytes, 64, [](int call, Stores s) -> int64_t {
    if (s == Stores::kStreaming) return call < 40 ? 400'000 : 150'000;
    return call < 40 ? 1'000'000 : 100'000;
  });
  for (int call = 6; call < 64; ++call) {
    EXPECT_EQ(kinds[static_cast<size_t>(call)] == Stores::kPlain, call >= 41) << "call " << call;
  }
}

// Plain 3x slower until call 100, then 2x faster than streaming, or only
// 0.95x its time (plain takes back over as soon as it is faster): the rare
// try after the spell finds that, and plain is kept from then on.
TEST(StagingChooserTest, BackToPlainStoresWhenTheSpellEnds) {
  for (const auto& [kind, after] : {std::pair{CollKind::kReduceScatter, int64_t{50'000}},
                                    std::pair{CollKind::kAllgather, int64_t{95'000}}}) {
    StagingChooser c;
    constexpr int kCalls = kStageRarePeriod / 2 + 12;
    const auto kinds = DriveStaging(c, kind, kBytes, kCalls, [after](int call, Stores s) -> int64_t {
      if (s == Stores::kStreaming) return 100'000;
      return call < 100 ? 300'000 : after;
    });
    for (int call = 6; call < kCalls; ++call) {
      EXPECT_EQ(kinds[static_cast<size_t>(call)] == Stores::kPlain, call >= kStageRarePeriod / 2)
          << "plain at " << after << " ns, call " << call;
    }
  }
}

TEST(StagingChooserTest, OneSlowCallDoesNotMoveTheChoice) {
  StagingChooser c;
  const auto kinds = DriveStaging(c, CollKind::kAllreduce, kBytes, 3 * kStagePeriod, [](int call, Stores s) -> int64_t {
    // Every 7th call is interrupted and takes 10x as long with plain stores.
    return s == Stores::kPlain ? (call % 7 == 5 ? 1'000'000 : 100'000) : 130'000;
  });
  EXPECT_EQ(CallsTaking(kinds, Stores::kStreaming), Concat({1, 2}, TryCalls(5, 3 * kStagePeriod, kStagePeriod)));
}

// A class's first counted call slow (a peer still busy with its first
// touches) tries the other kind at once, but the kind in use is kept: its
// second figure shows it faster (and, being 20x faster than the first,
// starts one more try).
TEST(StagingChooserTest, OneSlowFirstFigureDoesNotHandTheClassOver) {
  StagingChooser c;
  DriveStaging(
      c, CollKind::kAllreduce, kBytes, 10, [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 150'000 : 100'000; },
      Stores::kStreaming);
  const auto kinds = DriveStaging(
      c, CollKind::kAllreduce, 4 * kBytes, kStagePeriod / 2 - 1,
      [](int call, Stores s) -> int64_t {
        if (call == 1) return 8'000'000;  // 20x the usual time
        return s == Stores::kPlain ? 600'000 : 400'000;
      },
      Stores::kStreaming);
  EXPECT_EQ(CallsTaking(kinds, Stores::kPlain), (std::vector<int>{2, 3, 4, 7, 8, 9}));
}

// Tries close together count as one lead: the two a slow first figure
// starts (calls 2-4 and 7-9, as above) find plain ahead at 0.75x, but
// plain takes over only after a try kLeadSpacing calls after the first
// (18-20) leads too; the one at 7, too close, neither counts nor puts the
// confirming try off.
TEST(StagingChooserTest, TriesCloseTogetherCountAsOneLead) {
  StagingChooser c;
  DriveStaging(
      c, CollKind::kAllreduce, kBytes, 10, [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 150'000 : 100'000; },
      Stores::kStreaming);
  const auto kinds = DriveStaging(
      c, CollKind::kAllreduce, 4 * kBytes, kStagePeriod,
      [](int call, Stores s) -> int64_t {
        if (call == 1) return 8'000'000;  // 20x the usual time
        return s == Stores::kPlain ? 300'000 : 400'000;
      },
      Stores::kStreaming);
  EXPECT_EQ(CallsTaking(kinds, Stores::kPlain), Concat({2, 3, 4, 7, 8, 9}, Concat(Range(18, 32), Range(35, kStagePeriod))));
}

TEST(StagingChooserTest, TheColdFirstCallIsDropped) {
  StagingChooser c;
  // Call 0 takes 100x as long (first touches): it must not count against plain.
  const auto kinds = DriveStaging(c, CollKind::kAlltoall, kBytes, kStagePeriod, [](int call, Stores s) -> int64_t {
    if (call == 0) return 10'000'000;
    return s == Stores::kPlain ? 100'000 : 120'000;
  });
  EXPECT_EQ(CallsTaking(kinds, Stores::kStreaming), Concat({1, 2}, TryCalls(5, kStagePeriod, kStagePeriod)));
}

TEST(StagingChooserTest, ANewSizeOrCollectiveStartsWithTheLastChoice) {
  StagingChooser c;
  // 16 MiB allreduces learn that streaming is faster ...
  DriveStaging(c, CollKind::kAllreduce, 16 * kBytes, 10,
               [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 300'000 : 100'000; });
  // ... so 64 MiB allgathers take it from their first call and try plain
  // only at the period; their own figures decide from then on.
  const int calls = kStagePeriod / 2 + static_cast<int>(StagingChooser::kTryCalls) + 4;
  const auto kinds = DriveStaging(c, CollKind::kAllgather, 64 * kBytes, calls,
                                  [](int, Stores s) -> int64_t { return s == Stores::kPlain ? 70'000 : 100'000; });
  for (int call = 0; call < calls; ++call) {
    EXPECT_EQ(kinds[static_cast<size_t>(call)] == Stores::kPlain, call >= kStagePeriod / 2) << "call " << call;
  }
  // Collectives and size classes keep their own figures: 16 MiB allreduces
  // still take streaming.
  EXPECT_EQ(c.Choose(CollKind::kAllreduce, 16 * kBytes), Stores::kStreaming);
}

TEST(StagingChooserTest, FailedAndEmptyCallsAreIgnored) {
  StagingChooser c;
  const CollKind k = CollKind::kAllreduce;
  EXPECT_EQ(c.Choose(k, kBytes), Stores::kPlain);      // call 0
  c.Record(k, kBytes, Stores::kPlain, 1);              // the first: not counted
  EXPECT_EQ(c.Choose(k, kBytes), Stores::kStreaming);  // calls 1-2: the other kind
  c.Record(k, kBytes, Stores::kStreaming, 0);          // failed: no time
  c.Record(k, 0, Stores::kStreaming, 1000);            // empty
  EXPECT_EQ(c.Choose(k, kBytes), Stores::kStreaming);
  c.Record(k, kBytes, Stores::kStreaming, 100'000);    // after a plain call: not counted
  // Streaming has no figure (its one time came after a plain call), so
  // nothing is decided and plain stays.
  for (int call = 3; call < 8; ++call) {
    EXPECT_EQ(c.Choose(k, kBytes), Stores::kPlain) << "call " << call;
    c.Record(k, kBytes, Stores::kPlain, 100'000);
  }
}

// The sizes of a collective past the first start from the smaller size's
// figure: 64 MiB allreduces 3x slower per byte than the 16 MiB ones (a
// spell that began) try streaming at once, and take it once plain has a
// second figure; 1.2x slower, or faster, do not.
TEST(StagingChooserTest, ALargerSizeMuchSlowerPerByteTriesTheOtherAtOnce) {
  const size_t small = 16 * kBytes;
  const size_t large = 64 * kBytes;
  for (const double slower : {3.0, 1.2, 0.5}) {
    StagingChooser c;
    DriveStaging(c, CollKind::kAllreduce, small, 10, [&](int, Stores s) -> int64_t {
      return static_cast<int64_t>((s == Stores::kPlain ? 1.0 : 1.5) * static_cast<double>(small));
    });
    const auto kinds = DriveStaging(c, CollKind::kAllreduce, large, 8, [&](int, Stores s) -> int64_t {
      return static_cast<int64_t>((s == Stores::kPlain ? slower : 1.0) * static_cast<double>(large));
    });
    const std::vector<Stores> want =
        slower == 3.0 ? std::vector<Stores>{Stores::kPlain, Stores::kPlain, Stores::kStreaming, Stores::kStreaming,
                                            Stores::kStreaming, Stores::kPlain, Stores::kPlain, Stores::kStreaming}
                      : std::vector<Stores>(8, Stores::kPlain);
    EXPECT_EQ(kinds, want) << slower << "x per byte";
  }
}

}  // namespace
}  // namespace choir::algorithms
