// A warp per row, for the kernels that reduce along a row (layer norm, softmax,
// attention, the vocabulary slice's cross-entropy): the row's 32 lanes read its
// elements side by side and add up with shuffles. A thread per row would read
// 32 rows a row's length apart at each step, and a batch of 8 x 256 rows would
// give a GPU of 132 SMs 8 blocks (llm.c moved its layer norm to a warp per row,
// layernorm_forward_kernel3, for the same reason).
#pragma once

#include <cuda_runtime.h>

#include "cuda_support.h"

namespace labkit::cuda_launch {

constexpr int kWarp = 32;

__device__ inline float warp_sum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Which row this warp has, and this thread's lane in it. Rows are warp-aligned
// (kThreads is a multiple of 32), so a warp past the last row leaves whole.
struct WarpRow {
  long row;
  int lane;
  __device__ WarpRow() {
    const long thread = long(blockIdx.x) * blockDim.x + threadIdx.x;
    row = thread / kWarp;
    lane = int(thread % kWarp);
  }
};

inline int warp_blocks(long rows) { return blocks(rows * kWarp); }

}  // namespace labkit::cuda_launch
