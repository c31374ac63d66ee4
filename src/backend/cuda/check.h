// CUDA and cuBLAS return codes as Status values, so a failed launch or allocation
// becomes an error message naming the call instead of a crash or silent garbage.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include "core/status.h"

namespace pagoda::cuda {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return Status::ok();
  return Status(StatusCode::kInternal, str_format("%s: CUDA error %d (%s)", what,
                                                  static_cast<int>(e), cudaGetErrorString(e)));
}

inline Status cublas_status(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return Status::ok();
  return Status(StatusCode::kInternal, str_format("%s: cuBLAS error %d (%s)", what,
                                                  static_cast<int>(e), cublasLtGetStatusString(e)));
}

// The last launch's error (launch configuration problems surface here at once).
inline Status launch_status(const char* kernel) {
  return cuda_status(cudaGetLastError(), kernel);
}

}  // namespace pagoda::cuda

#define PAGODA_CUDA_TRY(expr) PAGODA_RETURN_IF_ERROR(::pagoda::cuda::cuda_status((expr), #expr))
#define PAGODA_CUBLAS_TRY(expr) PAGODA_RETURN_IF_ERROR(::pagoda::cuda::cublas_status((expr), #expr))
