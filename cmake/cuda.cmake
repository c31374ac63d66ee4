# The CUDA backend: kernels in src/backend/cuda/*.cu, built as their own library (with
# nvcc's flags) that pagoda_lib links; the host code using them is ordinary C++ in
# src/backend/cuda/*.cpp and src/model/cuda/*.cpp. Hopper (sm_90) by default: CI compiles
# every .cu on every run on 2 cores, so more architectures are opt-in
# (-DCMAKE_CUDA_ARCHITECTURES="80;90").
if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
  set(CMAKE_CUDA_ARCHITECTURES 90)
endif()
enable_language(CUDA)
find_package(CUDAToolkit REQUIRED)
# CMake 3.25 knows no C++20 flag for nvcc; kernels need only C++17.
set(CMAKE_CUDA_STANDARD 17)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
option(PAGODA_CUDA_TESTS "Build the CUDA op and model tests (tests/cuda)" ON)

file(GLOB PAGODA_CUDA_SOURCES CONFIGURE_DEPENDS ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cu)
add_library(pagoda_cuda_kernels STATIC ${PAGODA_CUDA_SOURCES})
target_include_directories(pagoda_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR}/src)
# Warnings as errors for device code (nvcc's own) and for the host half of .cu files.
target_compile_options(pagoda_cuda_kernels PRIVATE
  --Werror all-warnings -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Werror -lineinfo)
target_link_libraries(pagoda_cuda_kernels PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)
target_link_libraries(pagoda_lib PUBLIC pagoda_cuda_kernels)
