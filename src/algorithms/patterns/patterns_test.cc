// Exhaustive checks of the rank/chunk arithmetic for every world size 1..17:
// each pattern is simulated symbolically (which ranks' contributions each
// block holds) so that a wrong index shows up as a missing or doubled rank.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <set>
#include <vector>

#include "algorithms/patterns/binomial_tree.h"
#include "algorithms/patterns/blocks.h"
#include "algorithms/patterns/pairwise.h"
#include "algorithms/patterns/recursive_doubling.h"
#include "algorithms/patterns/ring.h"

namespace choir::patterns {
namespace {

constexpr int kMaxWorld = 17;
using Contrib = std::multiset<int>;  // multiset: a rank counted twice is a bug

Contrib Everyone(int n) {
  Contrib all;
  for (int r = 0; r < n; ++r) all.insert(r);
  return all;
}

TEST(EvenBlockTest, CoversExactlyWithBalancedSizes) {
  for (int parts = 1; parts <= kMaxWorld; ++parts) {
    for (size_t count = 0; count <= 70; ++count) {
      size_t next = 0;
      size_t min_size = count, max_size = 0;
      for (int i = 0; i < parts; ++i) {
        const Block b = EvenBlock(count, parts, i);
        EXPECT_EQ(b.offset, next) << "parts=" << parts << " count=" << count << " i=" << i;
        next = b.offset + b.count;
        min_size = std::min(min_size, b.count);
        max_size = std::max(max_size, b.count);
      }
      EXPECT_EQ(next, count);
      EXPECT_LE(max_size - min_size, 1u);
    }
  }
}

TEST(WeightedBlocksTest, HeavyBlockGetsItsWeightAndTheRestSplitEvenly) {
  // 2 parts, weight 3: the heavy block takes 3/4, rounded down to 16.
  auto b = patterns::WeightedBlocks(1000, 2, 0, 3.0, 16);
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(b[0], (patterns::Block{0, 736}));
  EXPECT_EQ(b[1], (patterns::Block{736, 264}));
  // The heavy block in the middle; the others split the rest as EvenBlock.
  b = patterns::WeightedBlocks(1001, 3, 1, 2.0, 1);
  ASSERT_EQ(b.size(), 3u);
  EXPECT_EQ(b[0], (patterns::Block{0, 251}));
  EXPECT_EQ(b[1], (patterns::Block{251, 500}));
  EXPECT_EQ(b[2], (patterns::Block{751, 250}));
  // Weight 1 is an even split up to the alignment.
  b = patterns::WeightedBlocks(64, 4, 3, 1.0, 1);
  for (const auto& x : b) EXPECT_EQ(x.count, 16u);
  EXPECT_EQ(b[3].offset, 48u);
}

TEST(WeightedBlocksTest, CoversExactlyForEveryShape) {
  for (size_t count : {0, 1, 5, 15, 16, 17, 1000, 1 << 20}) {
    for (int parts = 1; parts <= 6; ++parts) {
      for (int heavy = 0; heavy < parts; ++heavy) {
        for (double w : {1.0, 1.13, 1.26, 1.29, 1.71, 100.0}) {
          const auto b = patterns::WeightedBlocks(count, parts, heavy, w, 16);
          ASSERT_EQ(b.size(), static_cast<size_t>(parts));
          size_t next = 0;
          for (const auto& x : b) {
            EXPECT_EQ(x.offset, next) << count << " " << parts << " " << heavy << " " << w;
            next += x.count;
          }
          EXPECT_EQ(next, count);
          if (parts > 1) {
            EXPECT_EQ(b[static_cast<size_t>(heavy)].count % 16, 0u);
          }
        }
      }
    }
  }
  // Weights outside [1, 1e6] (or not a number) are clamped.
  EXPECT_EQ(patterns::WeightedBlocks(100, 2, 0, 0.2, 1), patterns::WeightedBlocks(100, 2, 0, 1.0, 1));
  EXPECT_EQ(patterns::WeightedBlocks(100, 2, 0, std::nan(""), 1), patterns::WeightedBlocks(100, 2, 0, 1.0, 1));
  EXPECT_EQ(patterns::WeightedBlocks(100, 2, 1, 1e300, 1)[1].count, 99u);
  // Too few elements for one aligned piece: the heavy block is empty.
  const auto tiny = patterns::WeightedBlocks(10, 2, 1, 1.71, 16);
  EXPECT_EQ(tiny[1].count, 0u);
  EXPECT_EQ(tiny[0], (patterns::Block{0, 10}));
}

TEST(BlocksFromCountsTest, PrefixSums) {
  const auto blocks = BlocksFromCounts({3, 0, 5, 1});
  ASSERT_EQ(blocks.size(), 4u);
  EXPECT_EQ(blocks[0], (Block{0, 3}));
  EXPECT_EQ(blocks[1], (Block{3, 0}));
  EXPECT_EQ(blocks[2], (Block{3, 5}));
  EXPECT_EQ(blocks[3], (Block{8, 1}));
}

TEST(RingTest, ReduceScatterThenAllgatherGivesEveryoneEverything) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    // held[r][b] = contributions rank r holds for block b
    std::vector<std::vector<Contrib>> held(n, std::vector<Contrib>(n));
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) held[r][b] = {r};
    for (int s = 0; s < Ring{0, n}.Steps(); ++s) {
      std::vector<std::vector<Contrib>> next = held;
      for (int r = 0; r < n; ++r) {
        const Ring me{r, n};
        const Ring right{me.Right(), n};
        ASSERT_EQ(right.Left(), r);
        const int sent = me.ReduceScatterSendBlock(s);
        ASSERT_EQ(right.ReduceScatterRecvBlock(s), sent) << "n=" << n << " step=" << s;
        for (int x : held[r][sent]) next[right.rank][sent].insert(x);
      }
      held = next;
    }
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(held[r][r], Everyone(n)) << "n=" << n << " rank=" << r << " after reduce-scatter";
    }
    // Allgather: each rank starts with its finished block r.
    std::vector<std::vector<bool>> have(n, std::vector<bool>(n, false));
    for (int r = 0; r < n; ++r) have[r][r] = true;
    for (int s = 0; s < Ring{0, n}.Steps(); ++s) {
      auto next = have;
      for (int r = 0; r < n; ++r) {
        const Ring me{r, n};
        const int sent = me.AllgatherSendBlock(s);
        ASSERT_TRUE(have[r][sent]) << "n=" << n << " rank " << r << " sends block it lacks";
        const Ring right{me.Right(), n};
        ASSERT_EQ(right.AllgatherRecvBlock(s), sent);
        ASSERT_FALSE(have[right.rank][sent]) << "block received twice";
        next[right.rank][sent] = true;
      }
      have = next;
    }
    for (int r = 0; r < n; ++r)
      for (int b = 0; b < n; ++b) EXPECT_TRUE(have[r][b]) << "n=" << n;
  }
}

TEST(RecursiveDoublingTest, AllreduceSimulation) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<Contrib> held(n);
    for (int r = 0; r < n; ++r) held[r] = {r};
    const int core = RecursiveDoubling{0, n}.Core();
    EXPECT_LE(core, n);
    EXPECT_GT(core * 2, n);
    // Fold extras into their partners.
    for (int r = core; r < n; ++r) {
      const RecursiveDoubling me{r, n};
      ASSERT_TRUE(me.IsExtra());
      const int partner = me.ExtraPartner();
      ASSERT_EQ((RecursiveDoubling{partner, n}.ExtraPartner()), r);
      for (int x : held[r]) held[partner].insert(x);
    }
    for (int round = 0; round < RecursiveDoubling{0, n}.Rounds(); ++round) {
      auto next = held;
      for (int r = 0; r < core; ++r) {
        const int partner = RecursiveDoubling{r, n}.Partner(round);
        ASSERT_LT(partner, core);
        ASSERT_EQ((RecursiveDoubling{partner, n}.Partner(round)), r);
        for (int x : held[partner]) next[r].insert(x);
      }
      held = next;
    }
    for (int r = core; r < n; ++r) held[r] = held[RecursiveDoubling{r, n}.ExtraPartner()];
    for (int r = 0; r < n; ++r) EXPECT_EQ(held[r], Everyone(n)) << "n=" << n << " rank=" << r;
  }
}

TEST(BinomialTreeTest, EveryRankReachedOnceWithLogDepth) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    int max_depth = 0;
    while ((1 << max_depth) < n) ++max_depth;
    for (int root = 0; root < n; ++root) {
      std::vector<int> received(n, 0);
      std::vector<int> depth(n, -1);
      depth[root] = 0;
      // Breadth-first over children lists; each rank appears as a child exactly once.
      std::vector<int> frontier = {root};
      while (!frontier.empty()) {
        std::vector<int> next;
        for (int r : frontier) {
          for (int c : BinomialTree{r, n, root}.Children()) {
            ++received[c];
            EXPECT_EQ((BinomialTree{c, n, root}.Parent()), r) << "n=" << n << " root=" << root;
            depth[c] = depth[r] + 1;
            next.push_back(c);
          }
        }
        frontier = next;
      }
      EXPECT_EQ((BinomialTree{root, n, root}.Parent()), -1);
      for (int r = 0; r < n; ++r) {
        EXPECT_EQ(received[r], r == root ? 0 : 1) << "n=" << n << " root=" << root << " r=" << r;
        EXPECT_LE(depth[r], max_depth);
      }
    }
  }
}

TEST(BinomialTreeTest, ReduceOrderCollectsEverything) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    for (int root = 0; root < n; ++root) {
      // Post-order: a rank forwards to its parent after all children reported.
      std::vector<Contrib> held(n);
      for (int r = 0; r < n; ++r) held[r] = {r};
      std::function<void(int)> visit = [&](int r) {
        const auto children = BinomialTree{r, n, root}.Children();
        for (auto it = children.rbegin(); it != children.rend(); ++it) {
          visit(*it);
          for (int x : held[*it]) held[r].insert(x);
        }
      };
      visit(root);
      EXPECT_EQ(held[root], Everyone(n)) << "n=" << n << " root=" << root;
    }
  }
}

TEST(PairwiseTest, EveryPairOnceAndEachStepAPermutation) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::set<std::pair<int, int>> pairs;
    for (int s = 1; s <= Pairwise{0, n}.Steps(); ++s) {
      std::vector<int> recv_count(n, 0);
      for (int r = 0; r < n; ++r) {
        const int to = Pairwise{r, n}.SendTo(s);
        EXPECT_NE(to, r);
        EXPECT_EQ((Pairwise{to, n}.RecvFrom(s)), r);
        ++recv_count[to];
        EXPECT_TRUE(pairs.insert({r, to}).second) << "pair sent twice";
      }
      for (int c : recv_count) EXPECT_EQ(c, 1);
    }
    EXPECT_EQ(pairs.size(), static_cast<size_t>(n * (n - 1)));
  }
}

TEST(DisseminationTest, EveryoneHearsFromEveryone) {
  for (int n = 1; n <= kMaxWorld; ++n) {
    std::vector<std::set<int>> heard(n);
    for (int r = 0; r < n; ++r) heard[r] = {r};
    for (int k = 0; k < Dissemination{0, n}.Rounds(); ++k) {
      auto next = heard;
      for (int r = 0; r < n; ++r) {
        const int to = Dissemination{r, n}.SendTo(k);
        EXPECT_EQ((Dissemination{to, n}.RecvFrom(k)), r);
        next[to].insert(heard[r].begin(), heard[r].end());
      }
      heard = next;
    }
    for (int r = 0; r < n; ++r) EXPECT_EQ(heard[r].size(), static_cast<size_t>(n)) << "n=" << n;
  }
}

}  // namespace
}  // namespace choir::patterns
