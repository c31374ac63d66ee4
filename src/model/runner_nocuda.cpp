// Stands in for src/model/cuda/ when Pagoda is built without the CUDA toolkit.
#include "model/runner.h"

namespace pagoda {

Result<std::unique_ptr<ModelRunner>> make_cuda_runner(const GgufFile&, const RunnerOptions&) {
  return unsupported("this build of Pagoda has no CUDA backend (configure with -DPAGODA_CUDA=ON)");
}

bool cuda_built() {
  return false;
}

}  // namespace pagoda
