// Importance matrices, as llama.cpp's llama-imatrix makes them and its quantizer uses
// them: for every layer matrix, the sum over the calibration text's tokens of the
// square of each input column, and the token count. Their ratio (the mean square of the
// input each weight multiplies) says how much an error in that weight moves the
// product, so the quantizers weigh each weight's rounding error by it
// (cpu::quantize_row_weighted). The file is llama.cpp's GGUF format: tensors
// "<name>.in_sum2" (F32, [cols, 1]) and "<name>.counts" (F32, [1, 1]) per weight matrix,
// general.type "imatrix", imatrix.datasets / chunk_count / chunk_size; files from
// llama-imatrix load here and ours there. Its older .dat format is not read.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/model.h"

namespace pagoda {

// Accumulates the sums from the CPU model's forward passes (RunnerOptions::observer).
class ImatrixCollector : public ActivationObserver {
 public:
  explicit ImatrixCollector(int n_layers);
  void observe(int layer, Input which, const float* x, int64_t n, int64_t cols) override;

  // The GGUF file, for the layer matrices seen (q, k and v each with their shared input,
  // likewise gate and up).
  Status write(const std::string& path, const std::vector<std::string>& datasets, int chunks,
               int chunk_size) const;

 private:
  struct Sums {
    std::vector<double> sum2;
    int64_t count = 0;
  };
  std::vector<Sums> sums_;  // [layer * 4 + input]
};

struct Imatrix {
  // Weight matrix name -> the mean square of each input column (in_sum2 / counts).
  std::map<std::string, std::vector<float>> values;
  std::vector<std::string> datasets;
  int64_t chunks = 0;
};

// Reads a GGUF importance matrix (ours or llama-imatrix's); a clear error for anything
// else (a model file, a truncated file, sums without counts).
Result<Imatrix> read_imatrix(const std::string& path);

}  // namespace pagoda
