// Which walk a same-host copy collective (allgather, alltoall) takes at run
// time: shm_pipe's staging through the shared pipe, or the kernel copy
// (process_vm_readv straight out of the peers' buffers, cma.cc's walks)
// (WalkChooser); and, below, which kind of stores the pipe's staging uses
// (StagingChooser).
//
// Why: which walk is faster for a size depends on the host and, on some
// hosts, on the minute. On the AMD VM this project measures on, a hand-off
// between its two cores took 60-100 ns in some spells and about 340 ns in
// others, and a copy of data the other core had just written ran at 23-36
// or at 9-13 GB/s; the pipe passes every byte through that path. The
// switch points (switch_points.cc) are fixed per host class; this measures
// instead. Off by default (CHOIR_SHM_ADAPT=1 turns it on): on that VM it
// cost 3-13 % (medians of 20 launches) and did not beat the pipe in the
// slow spell it was caught in, where the kernel copy was slow too
// (docs/algorithms.md); it is meant for hosts whose switch points were
// never measured. A try also runs slower than the same walk in a row (the
// kernel copy right after pipe calls: 1.15-1.2x at 1 MiB, 1.7x at 4 MiB),
// so tries overrate the walk not in use.
//
// How: per collective and power-of-two size class, each rank keeps its last
// three times per byte for each walk and takes their median (interference
// only ever makes a call slower: one slow call must not move the choice).
// Before a call the ranks exchange these (in the same slot exchange that
// carries their buffer addresses) and take the walk whose slowest rank was
// fastest; the kernel copy must be ahead by kKernelMargin to replace the
// pipe. One call in kExplorePeriod takes the other walk (one in
// kRareExplorePeriod when that walk measured at least twice as slow), and
// so does the next call after the walk in use got kChange times slower
// than at the last try or since it last got faster (a slow spell starting:
// it moves the other walk's time too, sometimes the other way), so that
// both figures follow the host; the time of such a try replaces the
// three of its walk, so that a walk that became faster is taken again after
// one try (a try that was fast by chance costs a few calls: the walk in use
// gets a time every call). A walk's first time is dropped (it pays for
// first touches of the pipe and the buffers). Every rank decides from the
// same exchanged numbers and the same call count, so every rank takes the
// same walk. A rank with CHOIR_SHM_ADAPT=0 (the default) publishes that,
// and then every rank keeps the pipe.
//
// Thread-safety: one per communicator, used by the thread running its
// operation (operations of a communicator run one at a time).
#ifndef CHOIR_ALGORITHMS_WALK_CHOICE_H_
#define CHOIR_ALGORITHMS_WALK_CHOICE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "algorithms/op.h"

namespace choir::algorithms {

// A measure's last three times per byte, their median and their least
// (interference only ever makes a call slower: one slow call must not move
// a choice).
struct RecentTimes {
  std::array<double, 3> last{};
  size_t kept = 0;  // entries of `last` in use
  size_t next = 0;  // where the next time goes (the oldest)
  void Add(double v);
  void Reset(double v);   // a try speaks for its choice alone
  double Median() const;  // 0: none yet
  double Least() const;   // 0: none yet
};

class WalkChooser {
 public:
  enum class Walk { kPipe = 0, kKernel = 1 };
  // One call in 32 tries the other walk, one in 128 when it measured at
  // least twice as slow: a try of the kernel copy in a 4 MiB allgather took
  // 2.0-2.6x as long as a pipe call (the chooser's own figures, one launch;
  // a try runs slower than the same walk in a row). With the rarer tries,
  // 4 MiB allgathers still ran 5-30 % slower than the pipe alone (4
  // interleaved launches of 300 calls each).
  static constexpr uint64_t kExplorePeriod = 32;
  static constexpr uint64_t kRareExplorePeriod = 128;
  // The kernel copy wins below 0.8x the pipe's time, so that close figures
  // keep the pipe. Measured on the AMD VM (2 ranks, 256 KiB-4 MiB of buffer,
  // launches of one walk, medians): cma/pipe 1.2-1.9 (docs/performance-log.md).
  static constexpr double kKernelMargin = 0.8;
  // The walk in use getting this much slower since the last try (or since
  // it last got faster) makes the next call a try.
  static constexpr double kChange = 1.5;
  // Calls of a smaller buffer (the whole receive buffer) do not choose, nor
  // exchange the figures: below, the pipe
  // led clearly (alltoall 64 KiB: 8.4 against 13.2 µs for cma, a cma call's
  // handshake alone about 2 µs; docs/algorithms.md).
  static constexpr size_t kMinBytes = 256 * 1024;

  // What this rank publishes before a call of `kind` moving `bytes`
  // (kTableWords on every rank): whether it adapts, and its figures for the
  // two walks.
  static constexpr size_t kTableWords = 3;
  std::vector<uint64_t> Table(CollKind kind, size_t bytes, bool adapt);
  // The walk of this call from every rank's Table (the same result on every
  // rank); counts the call.
  Walk Choose(CollKind kind, size_t bytes, const std::vector<std::vector<uint64_t>>& tables);
  // This rank's time for the walk the call took.
  void Record(CollKind kind, size_t bytes, Walk walk, int64_t nanos);

 private:
  // A walk's last three times per byte (the first time it ran dropped).
  struct Times : RecentTimes {
    bool warm = false;  // the cold first time was dropped
  };
  struct Entry {
    uint64_t calls = 0;
    std::array<Times, 2> walks;  // by Walk
    bool trying = false;         // this call tries the walk not in use
    // The walk in use and its slowest rank's figure at the last try (or
    // when it came into use): what kChange compares with.
    Walk ref_walk = Walk::kPipe;
    double ref_value = 0;
  };
  Entry& At(CollKind kind, size_t bytes);

  static constexpr size_t kKinds = 3;  // allgather(v), alltoall, any other
  static constexpr size_t kClasses = 65;
  std::array<std::array<Entry, kClasses>, kKinds> entries_{};
};

// How the pipe walks (shm_pipe.cc) stage the chunks their peers read: with
// plain stores, so that a peer reads them out of this core's cache, or with
// streaming stores, so that it reads them from memory.
//
// Why: on the AMD EPYC Zen 4 VM this project measures on, reading what the
// other vCPU has just written runs in some spells, seconds to minutes
// long, at a third to a quarter of its usual speed, and in others twice as
// fast (a 256 KiB allgather through the pipe took 20-33 us per call in
// some launches, 93-170 in others; docs/performance-log.md, "The pipe's
// launches run in modes"). Streaming staging is steady through the slow
// spells, but slower for most walks outside them (allreduce, reduce and
// alltoall 0.62-0.97x of plain's median busbw; docs/algorithms.md). Neither
// kind is right for a whole job, so each rank measures both. On the AMD
// EPYC Zen 5 VM it is the other way round: streaming staging ran
// 1.2-2.5x faster at 1-256 MiB in every collective with a core per rank,
// and level with 4 ranks on 2 cores (docs/performance-log.md, "The AMD EPYC
// Zen 5 host"). So each call names the host's home kind
// (StagingStreamsFirst in switch_points.h): plain stores but on that
// table with a core per rank.
//
// How: per collective and power-of-two size class, each rank keeps its last
// three times per byte for each store kind and takes the least
// (RecentTimes::Least: interference only ever makes a call slower). A
// class's first call (first touches) and every call of a class after one
// of the other kind in it (what that kind left in the caches slowed the
// next call) are not counted. A class starts with the kind in use in the
// last class that had both measured (a spell shows in every collective).
// Its reference for kChange below is, until its first decision, the figure
// of the nearest smaller size class of its collective that has run (four
// classes down at most), if that one uses the same kind. A class that
// starts before any class had both kinds measured (nothing to go by)
// starts with the home kind and measures the other kind first (calls 1-2),
// then the home kind (calls 3-4). From then on a call keeps the kind in
// use, left only once it has two figures of its own, until the other's
// figure is below kAwayMargin (for the kind that is not home) or
// kHomeMargin (for the home kind) times its own, or below kLeadMargin
// times it in kLeadTries tries in a row (kLeadSpacing calls apart at
// least; a try that leads brings the next one forward to kLeadSpacing
// calls after it), and a try of kTryCalls
// calls of the other kind comes once per kExplorePeriod calls
// (kRareExplorePeriod when the
// other kind measured at least twice as slow), and at once when the kind
// in use got kChange times slower or faster since the last try (a spell
// starting or ending). Unlike WalkChooser, nothing is exchanged: the store
// kind changes nothing a peer relies on, and every rank's time of these
// synchronous walks includes its peers' stores, so the ranks' figures, and
// their choices, agree but for noise; ranks that disagree only run mixed.
// Ranks whose figures agree try at the same call numbers, so a try
// measures every rank on the other kind.
//
// Thread-safety: one per communicator, used by the thread running its
// operation (operations of a communicator run one at a time).
class StagingChooser {
 public:
  enum class Stores { kPlain = 0, kStreaming = 1 };
  // A try is kTryCalls calls of the other kind, the first not counted: in
  // a trace of 1 MiB alltoalls through the pipe, the first call after a
  // change of kind ran 1.4-2.5x as long as the next (plain 62-64 us after
  // streaming against 44-48 in a row; streaming 165 against 66). One try
  // per kExplorePeriod calls is, by count, about 3 % more time where the
  // other kind runs at 0.6x (not measured apart from the A/B runs in
  // docs/algorithms.md).
  static constexpr uint64_t kTryCalls = 3;
  static constexpr uint64_t kExplorePeriod = 64;
  static constexpr uint64_t kRareExplorePeriod = 256;
  // The kind in use getting this much slower or faster since the other was
  // last tried starts a try at once: the first 10-150 calls of a launch ran
  // 3-10x slower with either kind, and the spells come and go within a
  // launch.
  static constexpr double kChange = 1.5;
  // How many size classes down a new class looks for its reference.
  static constexpr size_t kNeighbourClasses = 4;
  // The kind that is not home (streaming stores, on most tables) takes
  // over below this share of the home kind's time, and the home kind takes
  // back over below kHomeMargin times the other's. Measured on the Zen 4
  // VM, plain stores at home: the slow spells cost plain stores 2-5x
  // (1.2-2.0 against 4-9 GB/s of busbw at 16-256 MiB); outside them
  // streaming ran at 0.62-0.97x (allreduce, reduce, alltoall), and in the
  // first calls of a launch either kind measured 1.5-1.8x the other by
  // chance (traces of 1 MiB alltoalls through the pipe), which with an
  // even margin of 0.8 took streaming for whole launches (1 MiB
  // reduce_scatters and reduces 0.72-0.73x as fast as with plain stores
  // alone, 7 interleaved launches). Streaming at home (Zen 5) mirrors it.
  static constexpr double kAwayMargin = 0.5;
  static constexpr double kHomeMargin = 1.0;
  // A steady lead takes over too: the other kind below kLeadMargin times
  // the kind in use in kLeadTries tries in a row, each begun at least
  // kLeadSpacing calls after the last one that counted (so the tries a
  // class's first calls start, at calls 1-2 or on a change, count for one
  // at most: there either kind measured 1.5-1.8x the other by chance, see
  // kAwayMargin). On the Zen 5 VM plain staging ran
  // 1.13x-1.92x faster than streaming, the home kind there, in every cell
  // of 2026-12-05 (256 KiB-16 MiB, five collectives), while on 2026-12-04
  // it had run 1.19x-2.49x slower; under the half-time margin alone auto
  // kept streaming (docs/algorithms.md, "The pipe's store kind"). The
  // second try comes kLeadSpacing calls after one that led, not at the next
  // period: on that VM on 2026-12-07, plain ahead 1.5x-2.2x, launches of
  // 30 calls per size (`benchmarks/compare`'s at 16 MiB) ended before the
  // periodic try at call 32 and streamed throughout; confirming at 17 ran
  // them 1.50x-1.84x faster (paired medians, 8 interleaved launches), and
  // 0.98x-1.02x when streaming led again within the hour.
  static constexpr double kLeadMargin = 0.8;
  static constexpr int kLeadTries = 2;
  static constexpr uint64_t kLeadSpacing = kExplorePeriod / 4;
  // So a lead needs confirming only while the home kind is in use.
  static_assert(kLeadMargin < kHomeMargin);
  // Under auto, smaller walks (the whole buffer) stage with the home kind
  // and are not timed (CHOIR_SHM_STAGING=streaming streams every size).
  static constexpr size_t kMinBytes = 256 * 1024;

  // The stores of this call of `kind` moving `bytes`; counts the call.
  // `home`: the host's usual winner (the same on every call of a
  // communicator).
  Stores Choose(CollKind kind, size_t bytes, Stores home = Stores::kPlain);
  // This rank's time for the call, which took `stores`.
  void Record(CollKind kind, size_t bytes, Stores stores, int64_t nanos);

 private:
  struct Entry {
    uint64_t calls = 0;
    std::array<RecentTimes, 2> kinds;  // by Stores
    Stores in_use = Stores::kPlain;
    uint64_t try_left = 0;  // calls of the try under way still to come
    bool fresh = false;     // no call of the try under way counted yet
    int last = -1;          // the Stores of the last call recorded (-1: none)
    double ref = 0;         // the figure of the kind in use when the other was last tried
    bool neighbour_ref = false;  // ref is still the smaller size's figure
    bool judge = false;     // a try's figure, recorded, still to be compared with the kind in use's
    int leads = 0;          // tries in a row in which the other kind measured below kLeadMargin
    uint64_t try_start = 0;   // the call that began the last try
    uint64_t lead_start = 0;  // the call that began the last try counted in `leads`
  };
  static size_t KindIndex(CollKind kind);  // callers pass only the five kinds above
  Entry& At(CollKind kind, size_t bytes);
  // Starts a try of `calls` calls of the kind not in use; returns it.
  Stores StartTry(Entry& e, uint64_t calls);

  static constexpr size_t kKinds = 5;  // allreduce, reduce, reduce_scatter, allgather(v), alltoall
  static constexpr size_t kClasses = 65;
  std::array<std::array<Entry, kClasses>, kKinds> entries_{};
  Stores preferred_ = Stores::kPlain;  // the kind in use of the last class with both kinds measured
  bool decided_ = false;               // some class has had both kinds measured (preferred_ is set)
};

}  // namespace choir::algorithms

#endif  // CHOIR_ALGORITHMS_WALK_CHOICE_H_
