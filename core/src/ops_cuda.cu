#include "labkit/ops_cuda.h"

#include "labkit/device.h"

#include "cuda_caching_allocator.h"
#include "cuda_support.h"
#include "cuda_warp.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace labkit::ops::cuda {

using namespace cuda_launch;

namespace {
__global__ void encoder_forward_kernel(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T,
                                       int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(B) * T * C) return;
  const int c = int(i % C), bt = int(i / C), t = bt % T;
  out[i] = wte[long(tokens[bt]) * C + c] + wpe[long(t) * C + c];
}

__global__ void encoder_backward_kernel(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T,
                                        int C) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(B) * T * C) return;
  const int c = int(i % C), bt = int(i / C), t = bt % T;
  atomicAdd(&dwte[long(tokens[bt]) * C + c], dout[i]);  // a token may repeat
  atomicAdd(&dwpe[long(t) * C + c], dout[i]);
}

__global__ void add_bias_kernel(float* out, const float* bias, int N, int OC) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < long(N) * OC) out[i] += bias[i % OC];
}

// Column sums (a bias's or a norm's gradient) take a thread per column and a
// grid row per chunk of rows: one thread per column alone would leave a GPU's
// SMs idle and walk every row in turn. Each chunk adds its partial sum.
constexpr int kRowsPerChunk = 64;
dim3 column_grid(int N, int columns) { return dim3(blocks(columns), std::max(1, (N + kRowsPerChunk - 1) / kRowsPerChunk)); }

__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  const int first = blockIdx.y * kRowsPerChunk, last = min(N, first + kRowsPerChunk);
  float sum = 0;
  for (int n = first; n < last; ++n) sum += dout[long(n) * OC + o];
  atomicAdd(&dbias[o], sum);
}

// Layer norm and softmax take a warp per row (cuda_warp.h).
__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
  const WarpRow r;
  if (r.row >= N) return;
  const float* x = inp + r.row * C;
  float sum = 0;
  for (int i = r.lane; i < C; i += kWarp) sum += x[i];
  const float m = warp_sum(sum) / C;
  float squares = 0;
  for (int i = r.lane; i < C; i += kWarp) squares += (x[i] - m) * (x[i] - m);
  const float s = rsqrtf(warp_sum(squares) / C + 1e-5f);
  float* o = out + r.row * C;
  for (int i = r.lane; i < C; i += kWarp) o[i] = (x[i] - m) * s * weight[i] + bias[i];
  if (r.lane == 0) mean[r.row] = m, rstd[r.row] = s;
}

__global__ void layernorm_backward_kernel(float* dinp, const float* dout, const float* inp, const float* weight,
                                          const float* mean, const float* rstd, int N, int C) {
  const WarpRow r;
  if (r.row >= N) return;
  const float* x = inp + r.row * C;
  const float* d = dout + r.row * C;
  const float m = mean[r.row], s = rstd[r.row];
  float dnorm = 0, dnorm_norm = 0;
  for (int i = r.lane; i < C; i += kWarp) {
    dnorm += weight[i] * d[i];
    dnorm_norm += weight[i] * d[i] * (x[i] - m) * s;
  }
  const float dnorm_mean = warp_sum(dnorm) / C, dnorm_norm_mean = warp_sum(dnorm_norm) / C;
  float* dx = dinp + r.row * C;
  for (int i = r.lane; i < C; i += kWarp)
    dx[i] += (weight[i] * d[i] - dnorm_mean - (x[i] - m) * s * dnorm_norm_mean) * s;
}

// The norm's weight and bias gradients: column sums, as bias_backward_kernel's.
__global__ void layernorm_params_backward_kernel(float* dweight, float* dbias, const float* dout, const float* inp,
                                                 const float* mean, const float* rstd, int N, int C) {
  const int c = blockIdx.x * blockDim.x + threadIdx.x;
  if (c >= C) return;
  const int first = blockIdx.y * kRowsPerChunk, last = min(N, first + kRowsPerChunk);
  float dw = 0, db = 0;
  for (int n = first; n < last; ++n) {
    const float d = dout[long(n) * C + c];
    dw += (inp[long(n) * C + c] - mean[n]) * rstd[n] * d;
    db += d;
  }
  atomicAdd(&dweight[c], dw);
  atomicAdd(&dbias[c], db);
}

constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__global__ void gelu_forward_kernel(float* out, const float* inp, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i];
  out[i] = 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
}

__global__ void gelu_backward_kernel(float* dinp, const float* inp, const float* dout, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const float x = inp[i], th = tanhf(kGeluScale * (x + 0.044715f * x * x * x)), sech2 = 1.0f - th * th;
  dinp[i] += (0.5f * (1.0f + th) + x * 0.5f * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x)) * dout[i];
}

__global__ void relu_forward_kernel(float* out, const float* inp, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = inp[i] > 0 ? inp[i] : 0.0f;
}

__global__ void relu_backward_kernel(float* dinp, const float* inp, const float* dout, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) dinp[i] += inp[i] > 0 ? dout[i] : 0.0f;
}

__global__ void residual_forward_kernel(float* out, const float* a, const float* b, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = a[i] + b[i];
}

__global__ void residual_backward_kernel(float* da, float* db, const float* dout, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  da[i] += dout[i];
  db[i] += dout[i];
}

__global__ void softmax_forward_kernel(float* probs, const float* logits, int N, int V) {
  const WarpRow r;
  if (r.row >= N) return;
  const float* l = logits + r.row * V;
  float* p = probs + r.row * V;
  float max = -INFINITY;
  for (int v = r.lane; v < V; v += kWarp) max = fmaxf(max, l[v]);
  max = warp_max(max);
  float sum = 0;
  for (int v = r.lane; v < V; v += kWarp) sum += p[v] = expf(l[v] - max);
  sum = warp_sum(sum);
  for (int v = r.lane; v < V; v += kWarp) p[v] /= sum;
}

__global__ void softmax_backward_kernel(float* dlogits, const float* probs, const float* dprobs, int N, int V) {
  const WarpRow r;
  if (r.row >= N) return;
  const float* p = probs + r.row * V;
  const float* dp = dprobs + r.row * V;
  float dot = 0;
  for (int v = r.lane; v < V; v += kWarp) dot += p[v] * dp[v];
  dot = warp_sum(dot);
  for (int v = r.lane; v < V; v += kWarp) dlogits[r.row * V + v] += p[v] * (dp[v] - dot);
}

// Attention, a warp per row (b, t, h) of the T x T scores: its 32 lanes split
// the row's positions, then the head's channels, so a small batch still gives
// the GPU B x T x NH warps of work. The causal mask stops each row at t. A
// block takes 8 consecutive rows t of one (b, h), which read the same keys,
// values and score columns.
//
// A score needs a lane's own position, whose key is a row of the qkv matrix 3C
// floats from the next lane's: read straight from memory, every step of a dot
// product would touch 32 cache lines at once. So the block's warps bring the
// keys they share into shared memory 32 positions by 32 channels at a time,
// each row read side by side; a lane then reads its position's row there. The
// tile is a column wider than 32, so that row i starts in bank i: the 32 lanes,
// reading 32 rows at the same channel, meet 32 banks (the transpose in NVIDIA's
// "An Efficient Matrix Transpose in CUDA C/C++" pads the same way).
constexpr int kRowsPerBlock = kThreads / kWarp;

struct AttentionRow {
  int b, h, t, lane, warp;
  int last;     // the block's last row: as a query, the positions its keys reach
  bool active;  // t < T; a warp past the end still loads and waits with the block
  __device__ AttentionRow(int T, int NH) {
    const int blocks_per_head = (T + kRowsPerBlock - 1) / kRowsPerBlock;
    const int head = blockIdx.x / blocks_per_head, first = (blockIdx.x % blocks_per_head) * kRowsPerBlock;
    warp = threadIdx.x / kWarp, lane = threadIdx.x % kWarp;
    b = head / NH, h = head % NH, t = first + warp;
    last = min(T, first + kRowsPerBlock) - 1;
    active = t < T;
  }
};

int attention_blocks(int B, int T, int NH) {
  return B * NH * ((T + kRowsPerBlock - 1) / kRowsPerBlock);
}

struct SharedRows {
  float rows[kWarp][kWarp + 1];  // 32 positions x 32 channels, and a column of padding
  float x[kRowsPerBlock][kWarp];  // each warp's own vector (read by all its lanes at once), the same channels
};

// Lane i's dot of this warp's x (hs floats; null past the end) with row
// first + i of `rows` (a row every `stride` floats, `count` of them), summed
// over the channels in order, as the CPU's loop does.
__device__ float tile_dot(SharedRows& tile, const AttentionRow& q, const float* x, const float* rows, long stride,
                          int first, int count, int hs) {
  float dot = 0;
  for (int k0 = 0; k0 < hs; k0 += kWarp) {
    const int k = k0 + q.lane;
    for (int i = q.warp; i < kWarp; i += kRowsPerBlock)
      tile.rows[i][q.lane] = first + i < count && k < hs ? rows[long(first + i) * stride + k] : 0.0f;
    tile.x[q.warp][q.lane] = x && k < hs ? x[k] : 0.0f;
    __syncthreads();
    for (int j = 0; j < kWarp && k0 + j < hs; ++j) dot += tile.x[q.warp][j] * tile.rows[q.lane][j];
    __syncthreads();
  }
  return dot;
}

__global__ void attention_forward_kernel(float* out, float* preatt, float* att, const float* inp, int T, int C,
                                         int NH) {
  __shared__ SharedRows tile;
  const AttentionRow q(T, NH);
  const int C3 = 3 * C, hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const float* qkv = inp + long(q.b) * T * C3 + q.h * hs;  // this batch row and head: query at 0, key C, value 2C
  const float* query = q.active ? qkv + long(q.t) * C3 : nullptr;
  float* pre = preatt + (long(q.b * NH + q.h) * T + q.t) * T;
  float* a = att + (long(q.b * NH + q.h) * T + q.t) * T;
  float max = -INFINITY;
  for (int first = 0; first <= q.last; first += kWarp) {
    const float dot = tile_dot(tile, q, query, qkv + C, C3, first, T, hs);
    const int t2 = first + q.lane;
    if (q.active && t2 <= q.t) {
      pre[t2] = dot * scale;
      max = fmaxf(max, pre[t2]);
    }
  }
  if (!q.active) return;  // past the block's last barrier
  max = warp_max(max);
  float sum = 0;
  for (int t2 = q.lane; t2 <= q.t; t2 += kWarp) sum += a[t2] = expf(pre[t2] - max);
  sum = warp_sum(sum);
  for (int t2 = q.lane; t2 < T; t2 += kWarp) a[t2] = t2 <= q.t ? a[t2] / sum : 0.0f;
  __syncwarp();  // each lane reads every position's weight below
  float* o = out + long(q.b) * T * C + long(q.t) * C + q.h * hs;
  for (int k = q.lane; k < hs; k += kWarp) {
    float acc = 0;
    for (int t2 = 0; t2 <= q.t; ++t2) acc += a[t2] * qkv[long(t2) * C3 + 2 * C + k];
    o[k] = acc;
  }
}

// Backward, part one, a warp per query row t, in blocks as the forward's: the
// gradient of its weights (its output's gradient against each value, a tile
// of values at a time), of its scores, and of its query. Nothing is shared
// with another row, so no atomics.
__global__ void attention_backward_query_kernel(float* dinp, float* dpreatt, float* datt, const float* dout,
                                                const float* inp, const float* att, int T, int C, int NH) {
  __shared__ SharedRows tile;
  const AttentionRow q(T, NH);
  const int C3 = 3 * C, hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const long row = (long(q.b * NH + q.h) * T + q.t) * T;
  const float* a = att + row;
  float* da = datt + row;
  float* dpre = dpreatt + row;
  const float* qkv = inp + long(q.b) * T * C3 + q.h * hs;
  const float* d = q.active ? dout + long(q.b) * T * C + long(q.t) * C + q.h * hs : nullptr;
  for (int first = 0; first <= q.last; first += kWarp) {
    const float dot = tile_dot(tile, q, d, qkv + 2 * C, C3, first, T, hs);
    if (const int t2 = first + q.lane; q.active && t2 <= q.t) da[t2] += dot;
  }
  if (!q.active) return;  // past the block's last barrier
  // Softmax backward, sum_t2 a[t2] (delta(t2,t3) - a[t3]) da[t2], is a[t3] (da[t3] - a . da).
  float a_dot_da = 0;
  for (int t2 = q.lane; t2 <= q.t; t2 += kWarp) a_dot_da += a[t2] * da[t2];
  a_dot_da = warp_sum(a_dot_da);
  for (int t3 = q.lane; t3 <= q.t; t3 += kWarp) dpre[t3] += a[t3] * (da[t3] - a_dot_da);
  __syncwarp();  // each lane reads every position's score gradient below
  float* dquery = dinp + long(q.b) * T * C3 + long(q.t) * C3 + q.h * hs;
  for (int k = q.lane; k < hs; k += kWarp) {
    float acc = 0;
    for (int t2 = 0; t2 <= q.t; ++t2) acc += dpre[t2] * qkv[long(t2) * C3 + C + k];
    dquery[k] += acc * scale;
  }
}

// Part two, a warp per key row t2, in blocks as the forward's: its key's and
// value's gradients, summed over the later queries t >= t2 that saw it. Its
// lanes split the channels, so each step reads a query and an output gradient
// side by side, and the block's 8 warps read the same ones, and the same
// cache line of each score row, one after another.
__global__ void attention_backward_key_value_kernel(float* dinp, const float* dpreatt, const float* dout,
                                                    const float* inp, const float* att, int T, int C, int NH) {
  const AttentionRow r(T, NH);
  if (!r.active) return;
  const int C3 = 3 * C, hs = C / NH, t2 = r.t;
  const float scale = rsqrtf(float(hs));
  const float* qkv = inp + long(r.b) * T * C3 + r.h * hs;
  float* dkey = dinp + long(r.b) * T * C3 + long(t2) * C3 + r.h * hs + C;
  float* dvalue = dkey + C;
  const long rows = long(r.b * NH + r.h) * T;  // row t of the scores is (rows + t) * T
  for (int k = r.lane; k < hs; k += kWarp) {
    float dk = 0, dv = 0;
    for (int t = t2; t < T; ++t) {
      const long score = (rows + t) * T + t2;
      dk += dpreatt[score] * qkv[long(t) * C3 + k];
      dv += att[score] * dout[long(r.b) * T * C + long(t) * C + r.h * hs + k];
    }
    dkey[k] += dk * scale;
    dvalue[k] += dv;
  }
}

__global__ void crossentropy_forward_kernel(float* losses, const float* probs, const int* targets, int N, int V) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n < N) losses[n] = -logf(probs[long(n) * V + targets[n]]);
}

__global__ void crossentropy_softmax_backward_kernel(float* dlogits, const float* dlosses, const float* probs,
                                                     const int* targets, int N, int V) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= long(N) * V) return;
  const int n = int(i / V), v = int(i % V);
  dlogits[i] += (probs[i] - (v == targets[n] ? 1.0f : 0.0f)) * dlosses[n];
}
__device__ float round_to_bf16(float x) {
  unsigned bits = __float_as_uint(x);
  if ((bits & 0x7f800000u) == 0x7f800000u) return x;
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return __uint_as_float(bits & 0xffff0000u);
}

__global__ void adamw_kernel(float* params, float* master, const float* grads, float* m, float* v, long n,
                             AdamWStep s) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  m[i] = s.beta1 * m[i] + (1 - s.beta1) * grads[i];
  v[i] = s.beta2 * v[i] + (1 - s.beta2) * grads[i] * grads[i];
  float& weight = master ? master[i] : params[i];
  weight -= s.lr * ((m[i] / s.correct1) / (sqrtf(v[i] / s.correct2) + s.eps) + s.weight_decay * weight);
  if (s.bf16_weights) params[i] = round_to_bf16(weight);
}

__global__ void sgd_momentum_kernel(float* params, float* velocity, const float* grads, long n, float lr,
                                    float momentum) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  velocity[i] = momentum * velocity[i] + grads[i];
  params[i] -= lr * velocity[i];
}

__global__ void lamb_direction_kernel(float* direction, float* m, float* v, const float* grads, const float* params,
                                      long n, LambStep s) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  m[i] = s.beta1 * m[i] + (1 - s.beta1) * grads[i];
  v[i] = s.beta2 * v[i] + (1 - s.beta2) * grads[i] * grads[i];
  direction[i] = float((m[i] / s.correct1) / (sqrt(v[i] / s.correct2) + s.eps)) + s.weight_decay * params[i];
}

__global__ void axpy_kernel(float* y, float a, const float* x, long n) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] += a * x[i];
}

__global__ void fill_kernel(float* out, float value, long n) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = value;
}

__global__ void scale_kernel(float* inout, float factor, long n) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) inout[i] *= factor;
}

// Each block sums its squares in double in shared memory (a tree), then adds
// its sum to *out: atomicAdd on double, sm_60 and newer.
__global__ void sum_of_squares_kernel(double* out, const float* in, long n) {
  __shared__ double partial[kThreads];
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  partial[threadIdx.x] = i < n ? double(in[i]) * in[i] : 0.0;
  __syncthreads();
  for (int half = blockDim.x / 2; half > 0; half /= 2) {
    if (int(threadIdx.x) < half) partial[threadIdx.x] += partial[threadIdx.x + half];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(out, partial[0]);
}
}  // namespace

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C) {
  launch("encoder_forward", encoder_forward_kernel, blocks(long(B) * T * C), stream(), out, tokens, wte, wpe, B, T, C);
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
  launch("encoder_backward", encoder_backward_kernel, blocks(long(B) * T * C), stream(), dwte, dwpe, dout, tokens, B,
         T, C);
}

// Row-major out (N,OC) = inp (N,C) . W^T is column-major out^T = W^T' . inp^T: cuBLAS sees the
// transposes of our matrices, so the operands swap (as llm.c's matmul_forward_cublas).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
  const float one = 1, zero = 0;
  if (cublas().sgemm(blas(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C, &zero, out, OC) !=
      CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublas: matmul_forward");
  if (bias) {
    launch("matmul_forward bias", add_bias_kernel, blocks(long(N) * OC), stream(), out, bias, N, OC);
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  const float one = 1;
  // dinp (N,C) += dout (N,OC) . W (OC,C);  dW (OC,C) += dout^T (OC,N) . inp (N,C).
  // Either may be null: a zero-bubble pipeline computes them apart.
  if ((dinp && cublas().sgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC, &one, dinp, C) !=
                   CUBLAS_STATUS_SUCCESS) ||
      (dweight && cublas().sgemm(blas(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dweight,
                              C) != CUBLAS_STATUS_SUCCESS))
    throw std::runtime_error("cublas: matmul_backward");
  if (dbias) {
    launch("matmul_backward bias", bias_backward_kernel, column_grid(N, OC), stream(), dbias, dout, N, OC);
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
  launch("layernorm_forward", layernorm_forward_kernel, warp_blocks(N), stream(), out, mean, rstd, inp, weight, bias,
         N, C);
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  launch("layernorm_backward", layernorm_backward_kernel, warp_blocks(N), stream(), dinp, dout, inp, weight, mean,
         rstd, N, C);
  launch("layernorm_backward", layernorm_params_backward_kernel, column_grid(N, C), stream(), dweight, dbias, dout,
         inp, mean, rstd, N, C);
}

void gelu_forward(float* out, const float* inp, int n) {
  launch("gelu_forward", gelu_forward_kernel, blocks(n), stream(), out, inp, n);
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int n) {
  launch("gelu_backward", gelu_backward_kernel, blocks(n), stream(), dinp, inp, dout, n);
}

void relu_forward(float* out, const float* inp, int n) {
  launch("relu_forward", relu_forward_kernel, blocks(n), stream(), out, inp, n);
}

void relu_backward(float* dinp, const float* inp, const float* dout, int n) {
  launch("relu_backward", relu_backward_kernel, blocks(n), stream(), dinp, inp, dout, n);
}

void residual_forward(float* out, const float* a, const float* b, int n) {
  launch("residual_forward", residual_forward_kernel, blocks(n), stream(), out, a, b, n);
}

void residual_backward(float* da, float* db, const float* dout, int n) {
  launch("residual_backward", residual_backward_kernel, blocks(n), stream(), da, db, dout, n);
}

void softmax_forward(float* probs, const float* logits, int N, int V) {
  launch("softmax_forward", softmax_forward_kernel, warp_blocks(N), stream(), probs, logits, N, V);
}

void softmax_backward(float* dlogits, const float* probs, const float* dprobs, int N, int V) {
  launch("softmax_backward", softmax_backward_kernel, warp_blocks(N), stream(), dlogits, probs, dprobs, N, V);
}

void attention_forward(float* out, float* preatt, float* att, const float* inp, int B, int T, int C, int NH) {
  launch("attention_forward", attention_forward_kernel, attention_blocks(B, T, NH), stream(), out, preatt, att,
         inp, T, C, NH);
}

void attention_backward(float* dinp, float* dpreatt, float* datt, const float* dout, const float* inp,
                        const float* att, int B, int T, int C, int NH) {
  launch("attention_backward", attention_backward_query_kernel, attention_blocks(B, T, NH), stream(), dinp,
         dpreatt, datt, dout, inp, att, T, C, NH);
  launch("attention_backward", attention_backward_key_value_kernel, attention_blocks(B, T, NH), stream(), dinp,
         dpreatt, dout, inp, att, T, C, NH);
}

void crossentropy_forward(float* losses, const float* probs, const int* targets, int N, int V) {
  launch("crossentropy_forward", crossentropy_forward_kernel, blocks(N), stream(), losses, probs, targets, N, V);
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets, int N,
                                   int V) {
  launch("crossentropy_softmax_backward", crossentropy_softmax_backward_kernel, blocks(long(N) * V), stream(),
         dlogits, dlosses, probs, targets, N, V);
}

void adamw_update(float* params, float* master, const float* grads, float* m, float* v, long n, const AdamWStep& step) {
  launch("adamw_update", adamw_kernel, blocks(n), stream(), params, master, grads, m, v, n, step);
}

void sgd_momentum_update(float* params, float* velocity, const float* grads, long n, float lr, float momentum) {
  launch("sgd_momentum_update", sgd_momentum_kernel, blocks(n), stream(), params, velocity, grads, n, lr, momentum);
}

void lamb_direction(float* direction, float* m, float* v, const float* grads, const float* params, long n,
                    const LambStep& step) {
  if (n == 0) return;
  launch("lamb_direction", lamb_direction_kernel, blocks(n), stream(), direction, m, v, grads, params, n, step);
}

void axpy(float* y, float a, const float* x, long n) {
  if (n == 0) return;
  launch("axpy", axpy_kernel, blocks(n), stream(), y, a, x, n);
}

void fill(float* out, float value, long n) {
  if (n == 0) return;
  launch("fill", fill_kernel, blocks(n), stream(), out, value, n);
}

void scale(float* inout, float factor, long n) {
  if (n == 0) return;
  launch("scale", scale_kernel, blocks(n), stream(), inout, factor, n);
}

// The one number that comes back: copied to the host, which waits for it.
double sum_of_squares(const float* in, long n) {
  if (n == 0) return 0;
  double* sum = static_cast<double*>(cuda_memory::allocate(sizeof(double)));  // zero-filled
  launch("sum_of_squares", sum_of_squares_kernel, blocks(n), stream(), sum, in, n);
  double host = 0;
  check_cuda(cudaMemcpyAsync(&host, sum, sizeof(double), cudaMemcpyDeviceToHost, stream()), "sum_of_squares to the host");
  check_cuda(cudaStreamSynchronize(stream()), "sum_of_squares to the host");
  cuda_memory::release(sum);
  return host;
}

}  // namespace labkit::ops::cuda

namespace labkit {

namespace {

using namespace cuda_launch;

// reduce_local and divide_local on GPU memory: one thread per element, computed
// in Wide and stored as T (bf16 in float, rounded to nearest even once, as the host does).
template <class T, class Wide = T> __global__ void reduce_kernel(ReduceOp op, const T* in, T* inout, long n) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= n) return;
  const Wide a = Wide(inout[i]), b = Wide(in[i]);
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: inout[i] = T(a + b); break;
    case ReduceOp::prod: inout[i] = T(a * b); break;
    case ReduceOp::min: inout[i] = T(b < a ? b : a); break;
    case ReduceOp::max: inout[i] = T(b > a ? b : a); break;
  }
}

template <class T, class Wide = T> __global__ void divide_kernel(T* inout, long n, int divisor) {
  const long i = long(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) inout[i] = T(Wide(inout[i]) / Wide(divisor));
}

// Launched on the legacy default stream (kAllRanks), after the kernels of every
// rank that wrote either buffer and before any that reads the result: no wait,
// the streams keep the order (cuda_streams.cu).
template <class T, class Wide = T> void reduce_as(ReduceOp op, const void* in, void* inout, long n) {
  launch("reduce_local on the GPU", reduce_kernel<T, Wide>, blocks(n), kAllRanks, op, static_cast<const T*>(in),
         static_cast<T*>(inout), n);
}

template <class T, class Wide = T> void divide_as(void* inout, long n, int divisor) {
  launch("divide_local on the GPU", divide_kernel<T, Wide>, blocks(n), kAllRanks, static_cast<T*>(inout), n, divisor);
}

void gpu_reduce(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count) {
  const long n = long(count);
  switch (dtype) {
    case DType::f32: return reduce_as<float>(op, in, inout, n);
    case DType::f64: return reduce_as<double>(op, in, inout, n);
    case DType::i32: return reduce_as<int>(op, in, inout, n);
    case DType::i64: return reduce_as<long long>(op, in, inout, n);
    case DType::u8: return reduce_as<unsigned char>(op, in, inout, n);
    case DType::bf16: return reduce_as<__nv_bfloat16, float>(op, in, inout, n);
  }
}

void gpu_divide(DType dtype, void* inout, std::size_t count, int divisor) {
  const long n = long(count);
  switch (dtype) {
    case DType::f32: return divide_as<float>(inout, n, divisor);
    case DType::f64: return divide_as<double>(inout, n, divisor);
    case DType::i32: return divide_as<int>(inout, n, divisor);
    case DType::i64: return divide_as<long long>(inout, n, divisor);
    case DType::u8: return divide_as<unsigned char>(inout, n, divisor);
    case DType::bf16: return divide_as<__nv_bfloat16, float>(inout, n, divisor);
  }
}

void* gpu_allocate(std::size_t bytes) {
  note_gpu_memory();
  return cuda_memory::allocate(bytes);
}

// Filled field by field: designated initializers are C++20, and nvcc builds this file as C++17.
const Device kCuda = [] {
  Device d{};
  d.kind = DeviceKind::cuda;
  d.name = "cuda";
  d.allocate = gpu_allocate;
  d.release = cuda_memory::release;
  // A rank's own copies to and from the host go on its stream: the source is
  // staged before the call returns, and a copy back waits for that stream only.
  d.copy_from_host = [](void* dst, const void* src, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream()), "copy to the GPU");
    note_host_copy(bytes, false);
  };
  d.copy_to_host = [](void* dst, const void* src, std::size_t bytes) {
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream()), "copy from the GPU");
    check_cuda(cudaStreamSynchronize(stream()), "copy from the GPU");
    note_host_copy(bytes, true);
  };
  d.zero = [](void* p, std::size_t bytes) { check_cuda(cudaMemsetAsync(p, 0, bytes, stream()), "cudaMemsetAsync"); };
  d.synchronize = [] { check_cuda(cudaStreamSynchronize(stream()), "synchronize"); };
  d.holds = cuda_memory::holds;  // its own blocks: no call into CUDA per question
  d.copy = [](void* dst, const void* src, std::size_t bytes) {  // between ranks too: ordered with all of them
    check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, kAllRanks), "copy on the GPU");
  };
  d.reduce = gpu_reduce;
  d.divide = gpu_divide;
  using namespace ops::cuda;
  d.encoder_forward = encoder_forward;
  d.encoder_backward = encoder_backward;
  d.matmul_forward = matmul_forward;
  d.matmul_backward = matmul_backward;
  d.layernorm_forward = layernorm_forward;
  d.layernorm_backward = layernorm_backward;
  d.gelu_forward = gelu_forward;
  d.gelu_backward = gelu_backward;
  d.residual_forward = residual_forward;
  d.residual_backward = residual_backward;
  d.softmax_forward = softmax_forward;
  d.relu_forward = relu_forward;
  d.relu_backward = relu_backward;
  d.softmax_backward = softmax_backward;
  d.attention_forward = attention_forward;
  d.attention_backward = attention_backward;
  d.crossentropy_forward = crossentropy_forward;
  d.crossentropy_softmax_backward = crossentropy_softmax_backward;
  d.adamw_update = adamw_update;
  d.sgd_momentum_update = ops::cuda::sgd_momentum_update;
  d.fill = ops::cuda::fill;
  d.scale = ops::cuda::scale;
  d.lamb_direction = ops::cuda::lamb_direction;
  d.axpy = ops::cuda::axpy;
  d.sum_of_squares = ops::cuda::sum_of_squares;
  d.vocab_slice_encoder_forward = ops::cuda::vocab_slice_encoder_forward;
  d.vocab_slice_encoder_backward = ops::cuda::vocab_slice_encoder_backward;
  d.vocab_slice_max = ops::cuda::vocab_slice_max;
  d.vocab_slice_exp_sums = ops::cuda::vocab_slice_exp_sums;
  d.vocab_slice_softmax = ops::cuda::vocab_slice_softmax;
  d.vocab_slice_crossentropy_backward = ops::cuda::vocab_slice_crossentropy_backward;
  d.attention_block_forward = ops::cuda::attention_block_forward;
  d.attention_block_delta = ops::cuda::attention_block_delta;
  d.attention_block_backward = ops::cuda::attention_block_backward;
  d.copy_columns = ops::cuda::copy_columns;
  d.gather_rows = ops::cuda::gather_rows;
  d.scatter_add_rows = ops::cuda::scatter_add_rows;
  d.row_dots = ops::cuda::row_dots;
  d.quantize = ops::cuda::quantize;
  d.dequantize = ops::cuda::dequantize;
  return d;
}();
}  // namespace

bool cuda_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

const Device& cuda_device() {
  if (!cuda_available())
    throw std::runtime_error("cuda: no CUDA GPU on this machine (--device fenced runs the GPU's code path on the CPU)");
  return kCuda;
}

}  // namespace labkit
