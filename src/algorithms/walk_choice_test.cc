// The measured choice between the pipe and the kernel copy: every rank must
// reach the same walk from the same exchanged numbers, the kernel copy must
// win only by the margin, the other walk is tried once per period, and a
// rank that does not adapt keeps everyone on the pipe.
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

std::vector<int> CallsTaking(const std::vector<Walk>& walks, Walk w) {
  std::vector<int> calls;
  for (size_t i = 0; i < walks.size(); ++i) {
    if (walks[i] == w) calls.push_back(static_cast<int>(i));
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

}  // namespace
}  // namespace choir::algorithms
