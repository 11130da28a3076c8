// The vocabulary slice's ops on a GPU (labkit/ops.h, ops_vocab_slice.cpp on
// the CPU): the embedding one thread per element, the cross-entropy's row
// maxima and sums a warp per row (cuda_warp.h), its softmax and gradient one
// thread per logit.
#include "labkit/ops_cuda.h"

#include <cuda_runtime.h>

#include "cuda_support.h"
#include "cuda_warp.h"

namespace labkit::ops::cuda {

using namespace cuda_launch;

namespace {

__device__ int local_row(int token, int first, int V) {
  return token >= first && token < first + V ? token - first : -1;
}

__global__ void vocab_slice_encoder_forward_kernel(float* out, const int* tokens, const float* wte, const float* wpe,
                                                   int first, int V, int B, int T, int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(B) * T * C) return;
  const int c = int(i % C), bt = int(i / C), local = local_row(tokens[bt], first, V);
  float value = local >= 0 ? wte[long(local) * C + c] : 0.0f;
  if (wpe) value += wpe[long(bt % T) * C + c];
  out[i] = value;
}

__global__ void vocab_slice_encoder_backward_kernel(float* dwte, float* dwpe, const float* dout, const int* tokens,
                                                    int first, int V, int B, int T, int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(B) * T * C) return;
  const int c = int(i % C), bt = int(i / C), local = local_row(tokens[bt], first, V);
  if (local >= 0) atomicAdd(&dwte[long(local) * C + c], dout[i]);  // a token may repeat
  if (dwpe) atomicAdd(&dwpe[long(bt % T) * C + c], dout[i]);
}

__global__ void vocab_slice_max_kernel(float* largest, float* logits, int first, int vocab, int N, int V) {
  const WarpRow r;
  if (r.row >= N) return;
  float* z = logits + r.row * V;
  float max = -INFINITY;
  for (int j = r.lane; j < V; j += kWarp) {
    if (first + j >= vocab) z[j] = -INFINITY;
    max = fmaxf(max, z[j]);
  }
  max = warp_max(max);
  if (r.lane == 0) largest[r.row] = max;
}

__global__ void vocab_slice_exp_sums_kernel(float* sums, const float* logits, const float* largest, const int* targets,
                                            int first, int N, int V) {
  const WarpRow r;
  if (r.row >= N) return;
  const float* z = logits + r.row * V;
  const float max = largest[r.row];
  float sum = 0;
  for (int j = r.lane; j < V; j += kWarp) sum += expf(z[j] - max);
  sum = warp_sum(sum);
  if (r.lane != 0) return;
  sums[r.row] = sum;
  const int local = local_row(targets[r.row], first, V);
  sums[N + r.row] = local >= 0 ? z[local] - max : 0.0f;
}

__global__ void vocab_slice_softmax_kernel(float* probs, float* losses, const float* logits, const float* largest,
                                           const float* sums, int N, int V) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(N) * V) return;
  const int n = int(i / V);
  probs[i] = expf(logits[i] - largest[n]) / sums[n];
  if (i % V == 0) losses[n] = logf(sums[n]) - sums[N + n];
}

__global__ void vocab_slice_crossentropy_backward_kernel(float* dlogits, const float* probs, const int* targets,
                                                         int first, int N, int V) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(N) * V) return;
  const int n = int(i / V), j = int(i % V);
  dlogits[i] += (probs[i] - (first + j == targets[n] ? 1.0f : 0.0f)) / float(N);
}

}  // namespace

void vocab_slice_encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int first, int V,
                                 int B, int T, int C) {
  launch("vocab_slice_encoder_forward", vocab_slice_encoder_forward_kernel, blocks(long(B) * T * C), stream(), out,
         tokens, wte, wpe, first, V, B, T, C);
}

void vocab_slice_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int first, int V,
                                  int B, int T, int C) {
  launch("vocab_slice_encoder_backward", vocab_slice_encoder_backward_kernel, blocks(long(B) * T * C), stream(), dwte,
         dwpe, dout, tokens, first, V, B, T, C);
}

void vocab_slice_max(float* largest, float* logits, int first, int vocab, int N, int V) {
  launch("vocab_slice_max", vocab_slice_max_kernel, warp_blocks(N), stream(), largest, logits, first, vocab, N, V);
}

void vocab_slice_exp_sums(float* sums, const float* logits, const float* largest, const int* targets, int first, int N,
                          int V) {
  launch("vocab_slice_exp_sums", vocab_slice_exp_sums_kernel, warp_blocks(N), stream(), sums, logits, largest, targets,
         first, N, V);
}

void vocab_slice_softmax(float* probs, float* losses, const float* logits, const float* largest, const float* sums,
                         int N, int V) {
  launch("vocab_slice_softmax", vocab_slice_softmax_kernel, blocks(long(N) * V), stream(), probs, losses, logits,
         largest, sums, N, V);
}

void vocab_slice_crossentropy_backward(float* dlogits, const float* probs, const int* targets, int first, int N,
                                       int V) {
  launch("vocab_slice_crossentropy_backward", vocab_slice_crossentropy_backward_kernel, blocks(long(N) * V), stream(),
         dlogits, probs, targets, first, N, V);
}

}  // namespace labkit::ops::cuda
