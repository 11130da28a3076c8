// What labkit's CUDA files share: a failed CUDA call as an exception naming
// what failed, and how they launch their kernels.
#pragma once

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include <cublas_v2.h>
#include <cuda_runtime.h>

namespace labkit {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

namespace cuda_launch {
constexpr int kThreads = 256;
// At least one block: a grid of none is a launch error, and an op on no elements (an
// expert that no token chose) is a no-op, as every kernel checks its index's range.
inline int blocks(long n) { return int(std::max(1L, (n + kThreads - 1) / kThreads)); }
cudaStream_t stream();  // the issuing rank's stream (cuda_streams.cu)
// kernel<<<grid, kThreads, 0, on>>>(args...), written as the runtime's function
// (cudaLaunchKernelEx, which takes the kernel's own argument types) so that
// these files also compile as C++ over the CPU's CUDA (cuda_emulation/), where
// the asan build runs every kernel; a launch's error names the op.
template <class... Params, class... Args>
void launch(const char* what, void (*kernel)(Params...), dim3 grid, cudaStream_t on, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = dim3(kThreads);
  config.stream = on;
  check_cuda(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...), what);
}
cublasHandle_t blas();  // and its cuBLAS handle, on that stream
// The cuBLAS functions labkit calls, from the library opened at the first use
// (cublas_library.cpp; linked, it would slow every process's start).
struct Cublas {
  decltype(&cublasCreate_v2) create;
  decltype(&cublasSetStream_v2) set_stream;
  decltype(&cublasSgemm_v2) sgemm;
};
const Cublas& cublas();
// The legacy default stream: after all earlier work of every rank's stream, and
// before all later work, so what crosses ranks (a copy, a reduction) goes there.
inline const cudaStream_t kAllRanks = cudaStreamLegacy;
}  // namespace cuda_launch

}  // namespace labkit
