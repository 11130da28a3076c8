// A failed CUDA call as an exception naming what failed: the one helper
// labkit's CUDA files share.
#pragma once

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

namespace labkit {

inline void check_cuda(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace labkit
