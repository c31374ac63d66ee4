#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

namespace pagoda::kv {

KvCacheManager::KvCacheManager(int n_blocks, int block_size, bool enable_prefix_caching)
    : block_size_(block_size), pool_(n_blocks, enable_prefix_caching) {}

BlockKey KvCacheManager::key_of(const std::vector<int32_t>& tokens, size_t block, BlockHash parent,
                                uint64_t extra) const {
  BlockKey k;
  k.parent = parent;
  k.extra = extra;
  const auto b = tokens.begin() + static_cast<std::ptrdiff_t>(block * block_size_);
  k.tokens.assign(b, b + block_size_);
  return k;
}

std::vector<BlockId> KvCacheManager::find_cached_prefix(const std::vector<int32_t>& tokens,
                                                        uint64_t extra) const {
  std::vector<BlockId> out;
  if (!pool_.caching() || tokens.empty()) return out;
  const size_t usable = (tokens.size() - 1) / static_cast<size_t>(block_size_);
  BlockHash parent = 0;
  for (size_t i = 0; i < usable; ++i) {
    BlockKey key = key_of(tokens, i, parent, extra);
    const BlockHash h = hash_block(key);
    auto b = pool_.lookup(h, key);
    if (!b) break;
    out.push_back(*b);
    parent = h;
  }
  return out;
}

bool KvCacheManager::allocate(SeqId id, int64_t num_tokens, int64_t write_from,
                              const std::vector<BlockId>& cached, std::vector<BlockCopy>* copies,
                              int headroom) {
  Seq* s = nullptr;
  auto it = seqs_.find(id);
  const bool fresh = it == seqs_.end() || it->second.blocks.empty();
  const std::vector<BlockId>& held = fresh ? cached : it->second.blocks;
  const int have = static_cast<int>(held.size());
  const int need_total = blocks_for(num_tokens);
  int need_new = std::max(0, need_total - have);
  // Shared blocks that this step writes into need private copies.
  const int first_written = static_cast<int>(write_from / block_size_);
  int n_cow = 0;
  if (!fresh)
    for (int b = first_written; b < have; ++b)
      if (pool_.refcount(held[static_cast<size_t>(b)]) > 1) ++n_cow;
  // Cached blocks sitting in the free queue stop being free when taken.
  int cached_free = 0;
  if (fresh)
    for (BlockId b : cached)
      if (pool_.refcount(b) == 0) ++cached_free;
  if (need_new + n_cow + cached_free + headroom > pool_.num_free()) return false;

  if (fresh) {
    s = &seqs_[id];
    for (BlockId b : cached) pool_.acquire(b);
    s->blocks = cached;
  } else {
    s = &it->second;
  }
  if (n_cow > 0) {
    for (int b = first_written; b < have; ++b) {
      BlockId& blk = s->blocks[static_cast<size_t>(b)];
      if (pool_.refcount(blk) <= 1) continue;
      std::vector<BlockId> fresh_block;
      pool_.allocate(1, &fresh_block);
      copies->push_back({blk, fresh_block[0]});
      pool_.release(blk);
      blk = fresh_block[0];
      // A full block's hash stays valid for the copy; the copy is not registered again.
    }
  }
  if (need_new > 0) pool_.allocate(need_new, &s->blocks);
  return true;
}

void KvCacheManager::cache_computed_blocks(SeqId id, const std::vector<int32_t>& tokens,
                                           int64_t num_computed, uint64_t extra) {
  if (!pool_.caching()) return;
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  Seq& s = it->second;
  const size_t full = static_cast<size_t>(num_computed / block_size_);
  assert(full <= s.blocks.size() && static_cast<int64_t>(tokens.size()) >= num_computed);
  while (s.hashes.size() < full) {
    const size_t i = s.hashes.size();
    BlockKey key = key_of(tokens, i, i == 0 ? 0 : s.hashes[i - 1], extra);
    const BlockHash h = hash_block(key);
    pool_.cache(s.blocks[i], h, std::move(key));
    s.hashes.push_back(h);
  }
}

void KvCacheManager::fork(SeqId parent, SeqId child) {
  const Seq& p = seqs_.at(parent);
  Seq c = p;
  for (BlockId b : c.blocks) pool_.acquire(b);
  seqs_[child] = std::move(c);
}

void KvCacheManager::free(SeqId id) {
  auto it = seqs_.find(id);
  if (it == seqs_.end()) return;
  // Last block first: a sequence's tail is the least likely part to be shared later, so
  // it should be evicted before its head.
  std::vector<BlockId>& b = it->second.blocks;
  std::reverse(b.begin(), b.end());
  pool_.release(b);
  seqs_.erase(it);
}

const std::vector<BlockId>& KvCacheManager::blocks(SeqId id) const {
  static const std::vector<BlockId> kNone;
  auto it = seqs_.find(id);
  return it == seqs_.end() ? kNone : it->second.blocks;
}

}  // namespace pagoda::kv
