// Rows moved by index on a GPU (labkit/ops.h; ops_rows.cpp on the CPU): one
// thread per element, the scatter's adds atomic (a token's k rows meet in it),
// the dots one thread per row.
#include "labkit/ops_cuda.h"

#include <cuda_runtime.h>

#include "cuda_support.h"

namespace labkit::ops::cuda {

using namespace cuda_launch;

namespace {

__global__ void gather_rows_kernel(float* dst, const float* src, const int* index, const float* weights, long n,
                                   int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * C) return;
  const long row = i / C, c = i % C;
  const float value = src[long(index[row]) * C + c];
  dst[i] = weights ? weights[row] * value : value;
}

__global__ void scatter_add_rows_kernel(float* dst, const float* src, const int* index, const float* weights, long n,
                                        int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n * C) return;
  const long row = i / C, c = i % C;
  atomicAdd(&dst[long(index[row]) * C + c], weights ? weights[row] * src[i] : src[i]);
}

__global__ void row_dots_kernel(float* out, const float* a, const int* index, const float* b, long n, int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float* x = a + long(index[i]) * C;
  const float* y = b + i * C;
  float sum = 0;
  for (int c = 0; c < C; ++c) sum += x[c] * y[c];
  out[i] = sum;
}

}  // namespace

void gather_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C) {
  launch("gather_rows", gather_rows_kernel, blocks(n * C), stream(), dst, src, index, weights, n, C);
}

void scatter_add_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C) {
  launch("scatter_add_rows", scatter_add_rows_kernel, blocks(n * C), stream(), dst, src, index, weights, n, C);
}

void row_dots(float* out, const float* a, const int* index, const float* b, long n, int C) {
  launch("row_dots", row_dots_kernel, blocks(n), stream(), out, a, index, b, n, C);
}

}  // namespace labkit::ops::cuda
