// One step's work as every backend takes it: token ids, which batch rows belong to which
// sequence at which positions, each sequence's KV block table, and the rows whose logits
// are wanted. Plain data in the core layer, so the engine builds it and the CPU and CUDA
// backends read it alike without either's types leaking into the other (FlashInfer's
// paged layout is the same idea: plain index arrays).
#pragma once

#include <cstdint>
#include <vector>

namespace pagoda {

// The queries of one sequence in a batch: rows [q_row, q_row + n_q) of the batch, at
// positions [pos0, pos0 + n_q); the sequence's cache covers positions [0, pos0 + n_q).
struct BatchSeq {
  int q_row = 0;
  int n_q = 0;
  int pos0 = 0;
  const int32_t* blocks = nullptr;  // block table (ids in the backend's KV pool)
};

// Tokens of several sequences run together: sequence i owns batch rows
// [seqs[i].q_row, seqs[i].q_row + seqs[i].n_q) at positions pos0.. and reaches its KV
// through seqs[i].blocks.
struct Batch {
  std::vector<int32_t> tokens;
  std::vector<BatchSeq> seqs;
  // Batch rows whose logits are wanted, in the order they are written to `logits`.
  std::vector<int> logit_rows;
};

}  // namespace pagoda
