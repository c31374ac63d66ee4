// Which KV blocks each sequence holds. The scheduler asks it for room ("sequence s will
// hold n tokens after this step") and gets yes or no; the model gets plain block tables.
// Prefix caching, sharing between the n completions of one prompt and copy-on-write
// of a shared partial block all live here, out of the scheduler's sight.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <utility>
#include <vector>

#include "kv/block_pool.h"

namespace pagoda::kv {

using SeqId = int64_t;

// A block whose contents must be copied before the step runs (copy-on-write).
struct BlockCopy {
  BlockId src, dst;
};

class KvCacheManager {
 public:
  KvCacheManager(int n_blocks, int block_size, bool enable_prefix_caching);

  int block_size() const { return block_size_; }
  int n_blocks() const { return pool_.n_blocks(); }
  int num_free_blocks() const { return pool_.num_free(); }
  // Blocks held by sequences (free cached blocks do not count).
  int num_used_blocks() const { return pool_.n_blocks() - pool_.num_free(); }
  bool prefix_caching() const { return pool_.caching(); }
  int blocks_for(int64_t tokens) const {
    return static_cast<int>((tokens + block_size_ - 1) / block_size_);
  }

  // The cached full blocks that start `tokens`, stopping before the block holding the
  // last token (a step must compute at least one token to produce logits). Takes no
  // references: pass the result to allocate() in the same step.
  std::vector<BlockId> find_cached_prefix(const std::vector<int32_t>& tokens, uint64_t extra) const;

  // Makes sequence `id` hold slots for positions [0, num_tokens), about to write positions
  // from `write_from` on. A sequence without blocks first takes `cached` (from
  // find_cached_prefix). A shared block that will be written is replaced by a private
  // copy, listed in `copies`. When the pool cannot supply the blocks plus `headroom` more,
  // nothing changes and it returns false.
  bool allocate(SeqId id, int64_t num_tokens, int64_t write_from,
                const std::vector<BlockId>& cached, std::vector<BlockCopy>* copies,
                int headroom = 0);

  // Registers the full blocks among the first `num_computed` of `tokens` (the sequence's
  // tokens) in the prefix cache.
  void cache_computed_blocks(SeqId id, const std::vector<int32_t>& tokens, int64_t num_computed,
                             uint64_t extra);

  // The child shares all the parent's blocks (n completions of one prompt).
  void fork(SeqId parent, SeqId child);
  // Releases everything the sequence holds; its cached blocks stay findable until evicted.
  void free(SeqId id);

  bool has(SeqId id) const { return seqs_.count(id) != 0; }
  const std::vector<BlockId>& blocks(SeqId id) const;
  // Token slots reserved by sequences' blocks (for the waste statistic).
  int64_t reserved_slots() const { return static_cast<int64_t>(num_used_blocks()) * block_size_; }
  const BlockPool& pool() const { return pool_; }

 private:
  struct Seq {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> hashes;  // chain hashes of the first hashes.size() full blocks
  };
  BlockKey key_of(const std::vector<int32_t>& tokens, size_t block, BlockHash parent,
                  uint64_t extra) const;

  int block_size_;
  BlockPool pool_;
  std::unordered_map<SeqId, Seq> seqs_;
};

}  // namespace pagoda::kv
