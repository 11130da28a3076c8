// Ring attention's block ops on a GPU (labkit/ops.h; ops_attention_block.cpp on
// the CPU): one thread per row and head (b, i, h). The forward keeps the
// block's softmax online (a running max, sum and output, Milakov and
// Gimelshein 2018) in registers, then folds it into the row as
// merge_attention does; the backward adds into the block's key and value
// gradients atomically, since every query of the block adds to them.
#include "labkit/ops_cuda.h"

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "cuda_support.h"

namespace labkit::ops::cuda {

using namespace cuda_launch;

namespace {

constexpr int kMaxHeadSize = 128;  // a thread's running output lives in registers

__device__ float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

// The thread's row and head (b, i, h), from its index over B x L x NH
// (valid: not past the end): its head's width and scale, its row of the
// (B, L, *) buffers and its entry of the (B, NH, L) statistics.
struct BlockRow {
  bool valid;
  int b, i, h, hs;
  float scale;
  long row, stat;
  __device__ BlockRow(int B, int L, int C, int NH) {
    const long n = long(blockIdx.x) * blockDim.x + threadIdx.x;
    valid = n < long(B) * L * NH;
    b = int(n / (long(L) * NH)), i = int(n / NH % L), h = int(n % NH), hs = C / NH;
    scale = 1.0f / sqrtf(float(hs));
    row = long(b) * L + i, stat = (long(b) * NH + h) * L + i;
  }
};

__global__ void attention_block_forward_kernel(float* out, float* lse, const float* qkv, const float* kv,
                                               const int* query_positions, const int* key_positions, int B, int L,
                                               int C, int NH) {
  const BlockRow r(B, L, C, NH);
  if (!r.valid) return;
  const int hs = r.hs;
  const float* q = qkv + r.row * 3 * C + r.h * hs;
  float acc[kMaxHeadSize];
  for (int d = 0; d < hs; ++d) acc[d] = 0;
  float max = -INFINITY, sum = 0;
  for (int j = 0; j < L; ++j) {
    if (key_positions[j] > query_positions[r.i]) continue;
    const float* k = kv + (long(r.b) * L + j) * 2 * C + r.h * hs;
    const float s = dot(q, k, hs) * r.scale;
    if (s > max) {  // a new largest score: what was summed so far shrinks by exp(old max - new)
      const float shrink = expf(max - s);
      sum *= shrink;
      for (int d = 0; d < hs; ++d) acc[d] *= shrink;
      max = s;
    }
    const float w = expf(s - max);
    sum += w;
    for (int d = 0; d < hs; ++d) acc[d] += w * k[C + d];
  }
  if (sum == 0) return;  // every key of the block is in this query's future
  const float block_lse = max + logf(sum);
  float& row_lse = lse[r.stat];
  const float merged = fmaxf(row_lse, block_lse) + log1pf(expf(-fabsf(row_lse - block_lse)));
  const float old_weight = expf(row_lse - merged), block_weight = expf(block_lse - merged) / sum;
  float* o = out + r.row * C + r.h * hs;
  for (int d = 0; d < hs; ++d) o[d] = old_weight * o[d] + block_weight * acc[d];
  row_lse = merged;
}

__global__ void attention_block_delta_kernel(float* delta, const float* dout, const float* out, int B, int L, int C,
                                             int NH) {
  const BlockRow r(B, L, C, NH);
  if (!r.valid) return;
  const long at = r.row * C + r.h * r.hs;
  delta[r.stat] = dot(dout + at, out + at, r.hs);
}

__global__ void attention_block_backward_kernel(float* dqkv, float* dkv, const float* qkv, const float* kv,
                                                const float* dout, const float* lse, const float* delta,
                                                const int* query_positions, const int* key_positions, int B, int L,
                                                int C, int NH) {
  const BlockRow r(B, L, C, NH);
  if (!r.valid) return;
  const int hs = r.hs;
  const float* q = qkv + r.row * 3 * C + r.h * hs;
  float* dq = dqkv + r.row * 3 * C + r.h * hs;  // this thread's alone
  const float* d = dout + r.row * C + r.h * hs;
  for (int j = 0; j < L; ++j) {
    if (key_positions[j] > query_positions[r.i]) continue;
    const long at = (long(r.b) * L + j) * 2 * C + r.h * hs;
    const float* k = kv + at;
    const float* v = k + C;
    const float p = expf(dot(q, k, hs) * r.scale - lse[r.stat]);
    const float ds = p * (dot(d, v, hs) - delta[r.stat]) * r.scale;
    for (int c = 0; c < hs; ++c) {
      atomicAdd(&dkv[at + C + c], p * d[c]);
      dq[c] += ds * k[c];
      atomicAdd(&dkv[at + c], ds * q[c]);
    }
  }
}

__global__ void copy_columns_kernel(float* dst, int dst_stride, const float* src, int src_stride, long rows,
                                    int width) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= rows * width) return;
  const long r = i / width, c = i % width;
  dst[r * dst_stride + c] = src[r * src_stride + c];
}

}  // namespace

void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, const int* query_positions,
                             const int* key_positions, int B, int L, int C, int NH, MergeRow) {
  if (C / NH > kMaxHeadSize)
    throw std::runtime_error("cuda: attention_block_forward: heads of " + std::to_string(C / NH) +
                             " channels, more than its kernel's " + std::to_string(kMaxHeadSize));
  launch("attention_block_forward", attention_block_forward_kernel, blocks(long(B) * L * NH), stream(), out, lse, qkv,
         kv, query_positions, key_positions, B, L, C, NH);
}

void attention_block_delta(float* delta, const float* dout, const float* out, int B, int L, int C, int NH) {
  launch("attention_block_delta", attention_block_delta_kernel, blocks(long(B) * L * NH), stream(), delta, dout, out,
         B, L, C, NH);
}

void attention_block_backward(float* dqkv, float* dkv, const float* qkv, const float* kv, const float* dout,
                              const float* lse, const float* delta, const int* query_positions,
                              const int* key_positions, int B, int L, int C, int NH) {
  launch("attention_block_backward", attention_block_backward_kernel, blocks(long(B) * L * NH), stream(), dqkv, dkv,
         qkv, kv, dout, lse, delta, query_positions, key_positions, B, L, C, NH);
}

void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, long rows, int width) {
  launch("copy_columns", copy_columns_kernel, blocks(rows * width), stream(), dst, dst_stride, src, src_stride, rows,
         width);
}

}  // namespace labkit::ops::cuda
