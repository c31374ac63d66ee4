# The CUDA backend: kernels in src/backend/cuda/*.cu, built as their own library (with
# nvcc's flags) that pagoda_lib links; the host code using them is ordinary C++ in
# src/backend/cuda/*.cpp and src/model/cuda/*.cpp. Hopper (sm_90) by default: CI compiles
# every .cu on every run on 2 cores, so more architectures are opt-in
# (-DCMAKE_CUDA_ARCHITECTURES="80;89;90": every kernel compiles for sm_80 and sm_89 too,
# which scripts/test.sh checks in a tree of its own; there programmatic dependent launch
# is off, and nothing has run on such a GPU yet).
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
set_target_properties(pagoda_cuda_kernels PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(pagoda_cuda_kernels PUBLIC ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
# Warnings as errors for device code (nvcc's own) and for the host half of .cu files.
target_compile_options(pagoda_cuda_kernels PRIVATE
  --Werror all-warnings -Xcompiler=-Wall,-Wextra,-Wno-unused-parameter,-Werror -lineinfo)
target_link_libraries(pagoda_cuda_kernels PUBLIC CUDA::cudart CUDA::cublasLt CUDA::cublas)

# The host half (ordinary C++), compiled once for the plugin and the CUDA tests. It uses
# pagoda_lib's headers but must not link it: the plugin takes those symbols from the
# executable that opens it.
file(GLOB PAGODA_CUDA_HOST_SOURCES CONFIGURE_DEPENDS
     ${CMAKE_SOURCE_DIR}/src/backend/cuda/*.cpp ${CMAKE_SOURCE_DIR}/src/model/cuda/*.cpp)
add_library(pagoda_cuda_host OBJECT ${PAGODA_CUDA_HOST_SOURCES})
set_target_properties(pagoda_cuda_host PROPERTIES POSITION_INDEPENDENT_CODE ON)
target_include_directories(pagoda_cuda_host PRIVATE ${CMAKE_SOURCE_DIR}/src ${CMAKE_SOURCE_DIR}/include)
target_compile_options(pagoda_cuda_host PRIVATE ${PAGODA_WARNINGS})
target_link_libraries(pagoda_cuda_host PRIVATE nlohmann_json::nlohmann_json CUDA::cudart CUDA::cublasLt)

# libpagoda_cuda.so beside the pagoda executable; only a process that asks for the GPU
# loads it (and cuBLASLt with it).
add_library(pagoda_cuda MODULE $<TARGET_OBJECTS:pagoda_cuda_host>)
target_link_libraries(pagoda_cuda PRIVATE pagoda_cuda_kernels)
set_target_properties(pagoda_cuda PROPERTIES LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR})
set_source_files_properties(${CMAKE_SOURCE_DIR}/src/model/runner_cuda_loader.cpp
                            PROPERTIES COMPILE_DEFINITIONS PAGODA_CUDA_PLUGIN_BUILT)
