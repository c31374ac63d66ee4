#include "kv/block_pool.h"

#include <cassert>

#include "core/arith.h"

namespace pagoda::kv {

BlockHash hash_block(const BlockKey& key) {
  uint64_t h = splitmix64(key.parent ^ 0x5bd1e9955bd1e995ull);
  h = splitmix64(h ^ key.extra);
  for (int32_t t : key.tokens) h = splitmix64(h ^ static_cast<uint32_t>(t));
  return splitmix64(h ^ key.tokens.size());
}

BlockPool::BlockPool(int n_blocks, bool enable_caching)
    : caching_(enable_caching),
      ref_(static_cast<size_t>(n_blocks), 0),
      prev_(static_cast<size_t>(n_blocks), -1),
      next_(static_cast<size_t>(n_blocks), -1),
      in_queue_(static_cast<size_t>(n_blocks), 0),
      hash_of_(static_cast<size_t>(n_blocks)) {
  for (BlockId b = 0; b < n_blocks; ++b) push_tail(b);
}

void BlockPool::push_tail(BlockId b) {
  assert(!in_queue_[b]);
  prev_[b] = tail_;
  next_[b] = -1;
  if (tail_ >= 0)
    next_[tail_] = b;
  else
    head_ = b;
  tail_ = b;
  in_queue_[b] = 1;
  ++n_free_;
}

void BlockPool::unlink(BlockId b) {
  assert(in_queue_[b]);
  if (prev_[b] >= 0)
    next_[prev_[b]] = next_[b];
  else
    head_ = next_[b];
  if (next_[b] >= 0)
    prev_[next_[b]] = prev_[b];
  else
    tail_ = prev_[b];
  prev_[b] = next_[b] = -1;
  in_queue_[b] = 0;
  --n_free_;
}

void BlockPool::uncache(BlockId b) {
  std::optional<BlockHash>& h = hash_of_[static_cast<size_t>(b)];
  if (!h) return;
  auto it = by_hash_.find(*h);
  if (it != by_hash_.end() && it->second.block == b) by_hash_.erase(it);
  h.reset();
}

bool BlockPool::allocate(int n, std::vector<BlockId>* out) {
  if (n > n_free_) return false;
  for (int i = 0; i < n; ++i) {
    const BlockId b = head_;
    unlink(b);
    uncache(b);  // its old contents are about to be overwritten
    ref_[b] = 1;
    out->push_back(b);
  }
  return true;
}

void BlockPool::release(BlockId b) {
  assert(ref_[b] > 0);
  if (--ref_[b] == 0) push_tail(b);
}

void BlockPool::release(const std::vector<BlockId>& blocks) {
  for (BlockId b : blocks) release(b);
}

std::optional<BlockId> BlockPool::lookup(BlockHash h, const BlockKey& key) const {
  if (!caching_) return std::nullopt;
  auto it = by_hash_.find(h);
  if (it == by_hash_.end() || !(it->second.key == key)) return std::nullopt;
  return it->second.block;
}

void BlockPool::acquire(BlockId b) {
  if (ref_[b]++ == 0) unlink(b);
}

void BlockPool::cache(BlockId b, BlockHash h, BlockKey key) {
  if (!caching_ || hash_of_[static_cast<size_t>(b)]) return;
  if (by_hash_.count(h)) return;  // an identical block is cached already; keep that one
  by_hash_.emplace(h, Entry{b, std::move(key)});
  hash_of_[static_cast<size_t>(b)] = h;
}

void BlockPool::clear_cache() {
  by_hash_.clear();
  for (auto& h : hash_of_) h.reset();
}

}  // namespace pagoda::kv
