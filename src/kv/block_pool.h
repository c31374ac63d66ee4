// The KV cache's blocks as a resource: which are free, who holds each one, and which
// hold a cached prefix. It knows nothing of layers or bytes; the model's KvStorage holds
// the data and this pool hands out indices into it.
//
// Free blocks sit in one queue in eviction order: a block freed at refcount 0 goes to
// the tail with its contents (and prefix hash) kept, and allocation takes from the head,
// so the least recently freed cached block is evicted first (LRU). A cached block that a
// new request reuses is pulled out of the queue wherever it is. With prefix caching off
// nothing is hashed and the queue is a plain free list.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

namespace pagoda::kv {

using BlockId = int32_t;
using BlockHash = uint64_t;

// What identifies a full block's contents: the hash of everything before it, its token
// ids and any extra key (a cache salt, an adapter). Kept beside the hash so a lookup
// compares the real key and a 64-bit hash collision can never hand out the wrong KV.
struct BlockKey {
  BlockHash parent = 0;
  uint64_t extra = 0;
  std::vector<int32_t> tokens;
  bool operator==(const BlockKey&) const = default;
};

// Chain hash of a block: depends on the parent's hash, the extra key and the tokens.
BlockHash hash_block(const BlockKey& key);

class BlockPool {
 public:
  BlockPool(int n_blocks, bool enable_caching);

  int n_blocks() const { return static_cast<int>(ref_.size()); }
  // Blocks that allocate() can hand out now (refcount 0, cached or not).
  int num_free() const { return n_free_; }
  bool caching() const { return caching_; }

  // Takes n blocks off the head of the free queue, each with refcount 1, dropping any
  // cached contents they held. Returns false (and takes nothing) when fewer are free.
  bool allocate(int n, std::vector<BlockId>* out);
  // Drops one reference to each block; blocks reaching 0 join the free queue's tail in
  // the order given (pass a request's blocks last-first so its tail is evicted first).
  void release(const std::vector<BlockId>& blocks);
  void release(BlockId b);

  // The block caching `key` under hash `h`, if any.
  std::optional<BlockId> lookup(BlockHash h, const BlockKey& key) const;
  // Takes one more reference to a block, pulling it out of the free queue if it was free.
  void acquire(BlockId b);
  // Records that block b (full, refcount > 0) holds `key`. A block already cached, or a
  // key already cached in another block, is left as it is.
  void cache(BlockId b, BlockHash h, BlockKey key);
  bool is_cached(BlockId b) const { return hash_of_[static_cast<size_t>(b)].has_value(); }

  int refcount(BlockId b) const { return ref_[static_cast<size_t>(b)]; }
  // Drops every cached hash (blocks in use keep their data but are no longer found).
  void clear_cache();
  // Blocks currently cached (in use or free).
  int num_cached() const { return static_cast<int>(by_hash_.size()); }

 private:
  void push_tail(BlockId b);
  void unlink(BlockId b);
  void uncache(BlockId b);

  bool caching_;
  std::vector<int> ref_;
  // Free queue as a doubly linked list over block ids; -1 ends it.
  std::vector<BlockId> prev_, next_;
  std::vector<uint8_t> in_queue_;
  BlockId head_ = -1, tail_ = -1;
  int n_free_ = 0;
  struct Entry {
    BlockId block;
    BlockKey key;
  };
  std::unordered_map<BlockHash, Entry> by_hash_;
  std::vector<std::optional<BlockHash>> hash_of_;
};

}  // namespace pagoda::kv
