// The block pool on its own: free-queue order, refcounts, cached blocks kept until
// evicted least recently used first, and lookups that compare the whole key.
#include "kv/block_pool.h"

#include <gtest/gtest.h>

namespace pagoda::kv {
namespace {

BlockKey key(BlockHash parent, std::vector<int32_t> toks) {
  BlockKey k;
  k.parent = parent;
  k.tokens = std::move(toks);
  return k;
}

TEST(BlockPool, AllocatesInOrderAndRefusesWhenShort) {
  BlockPool p(4, true);
  std::vector<BlockId> a;
  ASSERT_TRUE(p.allocate(3, &a));
  EXPECT_EQ(a, (std::vector<BlockId>{0, 1, 2}));
  std::vector<BlockId> b;
  EXPECT_FALSE(p.allocate(2, &b));
  EXPECT_TRUE(b.empty());
  EXPECT_EQ(p.num_free(), 1);
  p.acquire(1);  // shared: needs two releases
  p.release(std::vector<BlockId>{2, 1, 0});
  EXPECT_EQ(p.num_free(), 3);
  EXPECT_EQ(p.refcount(1), 1);
  p.release(1);
  EXPECT_EQ(p.num_free(), 4);
  // Free queue now: 3 (never used), 2, 0, 1.
  std::vector<BlockId> c;
  ASSERT_TRUE(p.allocate(4, &c));
  EXPECT_EQ(c, (std::vector<BlockId>{3, 2, 0, 1}));
}

TEST(BlockPool, CachedBlocksSurviveUntilEvictedLeastRecentlyFreedFirst) {
  BlockPool p(3, true);
  std::vector<BlockId> a;
  ASSERT_TRUE(p.allocate(3, &a));
  for (BlockId b : a) p.cache(b, hash_block(key(0, {b, 7})), key(0, {b, 7}));
  p.release(std::vector<BlockId>{1, 0, 2});  // freed in this order
  EXPECT_EQ(p.num_free(), 3);
  EXPECT_EQ(p.num_cached(), 3);
  // Reusing block 0 from the free queue takes it out of the queue.
  auto hit = p.lookup(hash_block(key(0, {0, 7})), key(0, {0, 7}));
  ASSERT_TRUE(hit);
  EXPECT_EQ(*hit, 0);
  p.acquire(0);
  EXPECT_EQ(p.num_free(), 2);
  // The next allocation evicts block 1 (freed first), then 2.
  std::vector<BlockId> b;
  ASSERT_TRUE(p.allocate(1, &b));
  EXPECT_EQ(b[0], 1);
  EXPECT_FALSE(p.lookup(hash_block(key(0, {1, 7})), key(0, {1, 7})));
  EXPECT_TRUE(p.lookup(hash_block(key(0, {2, 7})), key(0, {2, 7})));
}

TEST(BlockPool, LookupComparesTheKeyNotJustTheHash) {
  BlockPool p(2, true);
  std::vector<BlockId> a;
  ASSERT_TRUE(p.allocate(1, &a));
  const BlockKey k = key(5, {1, 2, 3});
  const BlockHash h = hash_block(k);
  p.cache(a[0], h, k);
  EXPECT_TRUE(p.lookup(h, k));
  // Same hash value claimed for different contents (a forced collision): no hit.
  EXPECT_FALSE(p.lookup(h, key(5, {1, 2, 4})));
  EXPECT_FALSE(p.lookup(h, key(6, {1, 2, 3})));
  // The chain hash depends on the parent and the extra key.
  EXPECT_NE(hash_block(key(5, {1, 2, 3})), hash_block(key(6, {1, 2, 3})));
  BlockKey salted = k;
  salted.extra = 1;
  EXPECT_NE(hash_block(salted), h);
}

TEST(BlockPool, CachingOffHashesNothing) {
  BlockPool p(2, false);
  std::vector<BlockId> a;
  ASSERT_TRUE(p.allocate(1, &a));
  const BlockKey k = key(0, {1});
  p.cache(a[0], hash_block(k), k);
  EXPECT_EQ(p.num_cached(), 0);
  EXPECT_FALSE(p.lookup(hash_block(k), k));
}

}  // namespace
}  // namespace pagoda::kv
