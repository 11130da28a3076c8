// Ring attention's block ops on a GPU (labkit/ops.h; ops_attention_block.cpp on
// the CPU): a warp per row and head (b, i, h), its lanes splitting the head's
// channels (cuda_warp.h), so that a key's or value's row is read side by side
// and a score is a warp's sum. The forward keeps the block's softmax online (a
// running max, sum and output, Milakov and Gimelshein 2018), the output in
// registers, then folds it into the row as merge_attention does; the backward
// adds into the block's key and value gradients atomically, since every query
// of the block adds to them.
#include "labkit/ops_cuda.h"

#include <stdexcept>
#include <string>

#include <cuda_runtime.h>

#include "cuda_support.h"
#include "cuda_warp.h"

namespace labkit::ops::cuda {

using namespace cuda_launch;

namespace {

constexpr int kMaxHeadSize = 128;               // a lane's share of the running output lives in registers
constexpr int kPerLane = kMaxHeadSize / kWarp;  // channels lane, lane + 32, ...

// The dot product of two of a head's rows: each lane's channels, then the warp's sum.
__device__ float dot(const float* a, const float* b, int hs, int lane) {
  float s = 0;
  for (int c = lane; c < hs; c += kWarp) s += a[c] * b[c];
  return warp_sum(s);
}

// The warp's row and head (b, i, h), from its index over B x L x NH (past_end:
// a whole warp beyond the last): its head's width and scale, its row of the
// (B, L, *) buffers and its entry of the (B, NH, L) statistics.
struct BlockRow : WarpRow {
  bool past_end;
  int b, i, h, hs;
  float scale;
  long at, stat;
  __device__ BlockRow(int B, int L, int C, int NH) {
    past_end = row >= long(B) * L * NH;
    b = int(row / (long(L) * NH)), i = int(row / NH % L), h = int(row % NH), hs = C / NH;
    scale = 1.0f / sqrtf(float(hs));
    at = long(b) * L + i, stat = (long(b) * NH + h) * L + i;
  }
};

__global__ void attention_block_forward_kernel(float* out, float* lse, const float* qkv, const float* kv,
                                               const int* query_positions, const int* key_positions, int B, int L,
                                               int C, int NH) {
  const BlockRow r(B, L, C, NH);
  if (r.past_end) return;
  const int hs = r.hs;
  const float* q = qkv + r.at * 3 * C + r.h * hs;
  float acc[kPerLane] = {};  // channel lane + 32 k
  float max = -INFINITY, sum = 0;
  for (int j = 0; j < L; ++j) {
    if (key_positions[j] > query_positions[r.i]) continue;  // the same for the whole warp
    const float* k = kv + (long(r.b) * L + j) * 2 * C + r.h * hs;
    const float s = dot(q, k, hs, r.lane) * r.scale;
    if (s > max) {  // a new largest score: what was summed so far shrinks by exp(old max - new)
      const float shrink = expf(max - s);
      sum *= shrink;
      for (int n = 0; n < kPerLane; ++n) acc[n] *= shrink;
      max = s;
    }
    const float w = expf(s - max);
    sum += w;
    for (int n = 0, c = r.lane; c < hs; ++n, c += kWarp) acc[n] += w * k[C + c];
  }
  if (sum == 0) return;  // every key of the block is in this query's future
  const float block_lse = max + logf(sum);
  const float row_lse = lse[r.stat];
  const float merged = fmaxf(row_lse, block_lse) + log1pf(expf(-fabsf(row_lse - block_lse)));
  const float old_weight = expf(row_lse - merged), block_weight = expf(block_lse - merged) / sum;
  float* o = out + r.at * C + r.h * hs;
  for (int n = 0, c = r.lane; c < hs; ++n, c += kWarp) o[c] = old_weight * o[c] + block_weight * acc[n];
  __syncwarp();  // every lane has read the row's old log-sum-exp
  if (r.lane == 0) lse[r.stat] = merged;
}

__global__ void attention_block_delta_kernel(float* delta, const float* dout, const float* out, int B, int L, int C,
                                             int NH) {
  const BlockRow r(B, L, C, NH);
  if (r.past_end) return;
  const long at = r.at * C + r.h * r.hs;
  const float d = dot(dout + at, out + at, r.hs, r.lane);
  if (r.lane == 0) delta[r.stat] = d;
}

__global__ void attention_block_backward_kernel(float* dqkv, float* dkv, const float* qkv, const float* kv,
                                                const float* dout, const float* lse, const float* delta,
                                                const int* query_positions, const int* key_positions, int B, int L,
                                                int C, int NH) {
  const BlockRow r(B, L, C, NH);
  if (r.past_end) return;
  const int hs = r.hs;
  const float* q = qkv + r.at * 3 * C + r.h * hs;
  float* dq = dqkv + r.at * 3 * C + r.h * hs;  // this warp's alone
  const float* d = dout + r.at * C + r.h * hs;
  for (int j = 0; j < L; ++j) {
    if (key_positions[j] > query_positions[r.i]) continue;
    const long at = (long(r.b) * L + j) * 2 * C + r.h * hs;
    const float* k = kv + at;
    const float* v = k + C;
    const float p = expf(dot(q, k, hs, r.lane) * r.scale - lse[r.stat]);
    const float ds = p * (dot(d, v, hs, r.lane) - delta[r.stat]) * r.scale;
    for (int c = r.lane; c < hs; c += kWarp) {
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
  launch("attention_block_forward", attention_block_forward_kernel, warp_blocks(long(B) * L * NH), stream(), out, lse,
         qkv, kv, query_positions, key_positions, B, L, C, NH);
}

void attention_block_delta(float* delta, const float* dout, const float* out, int B, int L, int C, int NH) {
  launch("attention_block_delta", attention_block_delta_kernel, warp_blocks(long(B) * L * NH), stream(), delta, dout,
         out, B, L, C, NH);
}

void attention_block_backward(float* dqkv, float* dkv, const float* qkv, const float* kv, const float* dout,
                              const float* lse, const float* delta, const int* query_positions,
                              const int* key_positions, int B, int L, int C, int NH) {
  launch("attention_block_backward", attention_block_backward_kernel, warp_blocks(long(B) * L * NH), stream(), dqkv,
         dkv, qkv, kv, dout, lse, delta, query_positions, key_positions, B, L, C, NH);
}

void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, long rows, int width) {
  launch("copy_columns", copy_columns_kernel, blocks(rows * width), stream(), dst, dst_stride, src, src_stride, rows,
         width);
}

}  // namespace labkit::ops::cuda
