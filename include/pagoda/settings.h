// Developer and test switches: what the PAGODA_* environment variables set. The CLI reads
// them once at start-up (src/core/settings.cpp holds the one table of them; `pagoda info
// --env` prints it) and passes them down in EngineConfig and the runner's options; a
// program using the library sets these fields itself. Nothing below reads the environment.
#pragma once

#include <string>

namespace pagoda {

// CUDA backend switches (A/B experiments; the defaults are the measured best).
struct CudaSwitches {
  // Fusions one-token steps take (PAGODA_CUDA_FUSE names them): RoPE and the KV store in
  // the qkv product's epilogue; block weights quantizing their input in the product; the
  // RMSNorm before qkv / before gate_up folded into the products beside it.
  static constexpr unsigned kFuseRope = 1, kFuseQuant = 4, kFuseNormAttn = 8, kFuseNormFfn = 16;
  static constexpr unsigned kFuseAll = kFuseRope | kFuseQuant | kFuseNormAttn | kFuseNormFfn;
  // Kinds of op left out of every step (PAGODA_CUDA_OMIT): a timing experiment only.
  static constexpr unsigned kOmitNorm = 1, kOmitQkv = 2, kOmitRope = 4, kOmitAttention = 8,
                            kOmitWo = 16, kOmitGateUp = 32, kOmitSilu = 64, kOmitDown = 128,
                            kOmitOutput = 256;
  static constexpr unsigned kOmitAll = 2 * kOmitOutput - 1;

  unsigned fuse = kFuseAll;
  unsigned omit = 0;
  bool graphs = true;           // capture steps as CUDA graphs
  bool profile = false;         // time every op (eager steps)
  bool pdl = true;              // programmatic dependent launch (Hopper on)
  int split_keys = 256;         // keys per split of decode attention; 0: no split
  int q8_unroll = 2;            // blocks per thread step in the q8 products (2 or 4)
  bool fp8_fast_accum = false;  // cuBLASLt's FP8 fast accumulation
};

struct Settings {
  std::string log = "warn";  // debug, info, warn, error, silent
  std::string isa;           // "" (the best the CPU has), or a cap: generic, avx2, avx512
  std::string cuda_plugin;   // path of libpagoda_cuda.so; "": beside the executable
  CudaSwitches cuda;
  bool device_sampling = true;  // sample on the device when the backend can
  std::string fault_inject;     // tests: make forward passes fail (engine/fault_injection.h)
  std::string api_key;          // `pagoda serve`: the key clients must present
};

}  // namespace pagoda
