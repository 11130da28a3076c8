#include "labkit/ops_cuda.h"

#include "labkit/device.h"

#include <cmath>
#include <stdexcept>
#include <string>

#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

namespace labkit::ops::cuda {

namespace {
constexpr int kThreads = 256;
int blocks(long n) { return int((n + kThreads - 1) / kThreads); }

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("cuda: ") + what + ": " + cudaGetErrorString(e));
}

cublasHandle_t handle() {
  static cublasHandle_t h = [] {
    cublasHandle_t created;
    if (cublasCreate(&created) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("cublas: cannot create a handle");
    return created;
  }();
  return h;
}

void launched(const char* what) { check(cudaGetLastError(), what); }

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

__global__ void bias_backward_kernel(float* dbias, const float* dout, int N, int OC) {
  const int o = blockIdx.x * blockDim.x + threadIdx.x;
  if (o >= OC) return;
  float sum = 0;
  for (int n = 0; n < N; ++n) sum += dout[long(n) * OC + o];
  dbias[o] += sum;
}

__global__ void layernorm_forward_kernel(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                                         const float* bias, int N, int C) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* x = inp + long(n) * C;
  float m = 0, v = 0;
  for (int i = 0; i < C; ++i) m += x[i];
  m /= C;
  for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
  const float s = rsqrtf(v / C + 1e-5f);
  for (int i = 0; i < C; ++i) out[long(n) * C + i] = (x[i] - m) * s * weight[i] + bias[i];
  mean[n] = m;
  rstd[n] = s;
}

__global__ void layernorm_backward_kernel(float* dinp, float* dweight, float* dbias, const float* dout,
                                          const float* inp, const float* weight, const float* mean, const float* rstd,
                                          int N, int C) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* x = inp + long(n) * C;
  const float* d = dout + long(n) * C;
  float dnorm_mean = 0, dnorm_norm_mean = 0;
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - mean[n]) * rstd[n];
    dnorm_mean += weight[i] * d[i];
    dnorm_norm_mean += weight[i] * d[i] * norm;
  }
  dnorm_mean /= C;
  dnorm_norm_mean /= C;
  for (int i = 0; i < C; ++i) {
    const float norm = (x[i] - mean[n]) * rstd[n];
    atomicAdd(&dbias[i], d[i]);
    atomicAdd(&dweight[i], norm * d[i]);
    dinp[long(n) * C + i] += (weight[i] * d[i] - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
  }
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
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* l = logits + long(n) * V;
  float* p = probs + long(n) * V;
  float max = -INFINITY, sum = 0;
  for (int v = 0; v < V; ++v) max = fmaxf(max, l[v]);
  for (int v = 0; v < V; ++v) sum += p[v] = expf(l[v] - max);
  for (int v = 0; v < V; ++v) p[v] /= sum;
}

__global__ void softmax_backward_kernel(float* dlogits, const float* probs, const float* dprobs, int N, int V) {
  const int n = blockIdx.x * blockDim.x + threadIdx.x;
  if (n >= N) return;
  const float* p = probs + long(n) * V;
  const float* dp = dprobs + long(n) * V;
  float dot = 0;
  for (int v = 0; v < V; ++v) dot += p[v] * dp[v];
  for (int v = 0; v < V; ++v) dlogits[long(n) * V + v] += p[v] * (dp[v] - dot);
}

// One thread per (b, t, h): the CPU loop body of attention_forward.
__global__ void attention_forward_kernel(float* out, float* preatt, float* att, const float* inp, int B, int T, int C,
                                         int NH) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * T * NH) return;
  const int h = i % NH, t = (i / NH) % T, b = i / (NH * T);
  const int C3 = 3 * C, hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const float* query = inp + long(b) * T * C3 + t * C3 + h * hs;
  float* pre = preatt + (long(b * NH + h) * T + t) * T;
  float* a = att + (long(b * NH + h) * T + t) * T;
  float max = -INFINITY;
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* key = inp + long(b) * T * C3 + t2 * C3 + h * hs + C;
    float dot = 0;
    for (int k = 0; k < hs; ++k) dot += query[k] * key[k];
    pre[t2] = dot * scale;
    max = fmaxf(max, pre[t2]);
  }
  float sum = 0;
  for (int t2 = 0; t2 <= t; ++t2) sum += a[t2] = expf(pre[t2] - max);
  for (int t2 = 0; t2 < T; ++t2) a[t2] = t2 <= t ? a[t2] / sum : 0.0f;
  float* o = out + long(b) * T * C + t * C + h * hs;
  for (int k = 0; k < hs; ++k) o[k] = 0;
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* value = inp + long(b) * T * C3 + t2 * C3 + h * hs + 2 * C;
    for (int k = 0; k < hs; ++k) o[k] += a[t2] * value[k];
  }
}

// One thread per (b, t, h); keys and values of earlier positions are shared, so atomics.
__global__ void attention_backward_kernel(float* dinp, float* dpreatt, float* datt, const float* dout,
                                          const float* inp, const float* att, int B, int T, int C, int NH) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= B * T * NH) return;
  const int h = i % NH, t = (i / NH) % T, b = i / (NH * T);
  const int C3 = 3 * C, hs = C / NH;
  const float scale = rsqrtf(float(hs));
  const long row = (long(b * NH + h) * T + t) * T;
  const float* a = att + row;
  float* da = datt + row;
  float* dpre = dpreatt + row;
  const float* query = inp + long(b) * T * C3 + t * C3 + h * hs;
  float* dquery = dinp + long(b) * T * C3 + t * C3 + h * hs;
  const float* d = dout + long(b) * T * C + t * C + h * hs;
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* value = inp + long(b) * T * C3 + t2 * C3 + h * hs + 2 * C;
    float* dvalue = dinp + long(b) * T * C3 + t2 * C3 + h * hs + 2 * C;
    for (int k = 0; k < hs; ++k) {
      da[t2] += value[k] * d[k];
      atomicAdd(&dvalue[k], a[t2] * d[k]);
    }
  }
  for (int t2 = 0; t2 <= t; ++t2)
    for (int t3 = 0; t3 <= t; ++t3) dpre[t3] += a[t2] * ((t2 == t3 ? 1.0f : 0.0f) - a[t3]) * da[t2];
  for (int t2 = 0; t2 <= t; ++t2) {
    const float* key = inp + long(b) * T * C3 + t2 * C3 + h * hs + C;
    float* dkey = dinp + long(b) * T * C3 + t2 * C3 + h * hs + C;
    for (int k = 0; k < hs; ++k) {
      atomicAdd(&dquery[k], key[k] * dpre[t2] * scale);
      atomicAdd(&dkey[k], query[k] * dpre[t2] * scale);
    }
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
  encoder_forward_kernel<<<blocks(long(B) * T * C), kThreads>>>(out, tokens, wte, wpe, B, T, C);
  launched("encoder_forward");
}

void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C) {
  encoder_backward_kernel<<<blocks(long(B) * T * C), kThreads>>>(dwte, dwpe, dout, tokens, B, T, C);
  launched("encoder_backward");
}

// Row-major out (N,OC) = inp (N,C) . W^T is column-major out^T = W^T' . inp^T: cuBLAS sees the
// transposes of our matrices, so the operands swap (as llm.c's matmul_forward_cublas).
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC) {
  const float one = 1, zero = 0;
  if (cublasSgemm(handle(), CUBLAS_OP_T, CUBLAS_OP_N, OC, N, C, &one, weight, C, inp, C, &zero, out, OC) !=
      CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("cublas: matmul_forward");
  if (bias) {
    add_bias_kernel<<<blocks(long(N) * OC), kThreads>>>(out, bias, N, OC);
    launched("matmul_forward bias");
  }
}

void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC) {
  const float one = 1;
  // dinp (N,C) += dout (N,OC) . W (OC,C);  dW (OC,C) += dout^T (OC,N) . inp (N,C).
  // Either may be null: a zero-bubble pipeline computes them apart.
  if ((dinp && cublasSgemm(handle(), CUBLAS_OP_N, CUBLAS_OP_N, C, N, OC, &one, weight, C, dout, OC, &one, dinp, C) !=
                   CUBLAS_STATUS_SUCCESS) ||
      (dweight && cublasSgemm(handle(), CUBLAS_OP_N, CUBLAS_OP_T, C, OC, N, &one, inp, C, dout, OC, &one, dweight,
                              C) != CUBLAS_STATUS_SUCCESS))
    throw std::runtime_error("cublas: matmul_backward");
  if (dbias) {
    bias_backward_kernel<<<blocks(OC), kThreads>>>(dbias, dout, N, OC);
    launched("matmul_backward bias");
  }
}

void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C) {
  layernorm_forward_kernel<<<blocks(N), kThreads>>>(out, mean, rstd, inp, weight, bias, N, C);
  launched("layernorm_forward");
}

void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C) {
  layernorm_backward_kernel<<<blocks(N), kThreads>>>(dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
  launched("layernorm_backward");
}

void gelu_forward(float* out, const float* inp, int n) {
  gelu_forward_kernel<<<blocks(n), kThreads>>>(out, inp, n);
  launched("gelu_forward");
}

void gelu_backward(float* dinp, const float* inp, const float* dout, int n) {
  gelu_backward_kernel<<<blocks(n), kThreads>>>(dinp, inp, dout, n);
  launched("gelu_backward");
}

void relu_forward(float* out, const float* inp, int n) {
  relu_forward_kernel<<<blocks(n), kThreads>>>(out, inp, n);
  launched("relu_forward");
}

void relu_backward(float* dinp, const float* inp, const float* dout, int n) {
  relu_backward_kernel<<<blocks(n), kThreads>>>(dinp, inp, dout, n);
  launched("relu_backward");
}

void residual_forward(float* out, const float* a, const float* b, int n) {
  residual_forward_kernel<<<blocks(n), kThreads>>>(out, a, b, n);
  launched("residual_forward");
}

void residual_backward(float* da, float* db, const float* dout, int n) {
  residual_backward_kernel<<<blocks(n), kThreads>>>(da, db, dout, n);
  launched("residual_backward");
}

void softmax_forward(float* probs, const float* logits, int N, int V) {
  softmax_forward_kernel<<<blocks(N), kThreads>>>(probs, logits, N, V);
  launched("softmax_forward");
}

void softmax_backward(float* dlogits, const float* probs, const float* dprobs, int N, int V) {
  softmax_backward_kernel<<<blocks(N), kThreads>>>(dlogits, probs, dprobs, N, V);
  launched("softmax_backward");
}

void attention_forward(float* out, float* preatt, float* att, const float* inp, int B, int T, int C, int NH) {
  attention_forward_kernel<<<blocks(B * T * NH), kThreads>>>(out, preatt, att, inp, B, T, C, NH);
  launched("attention_forward");
}

void attention_backward(float* dinp, float* dpreatt, float* datt, const float* dout, const float* inp,
                        const float* att, int B, int T, int C, int NH) {
  attention_backward_kernel<<<blocks(B * T * NH), kThreads>>>(dinp, dpreatt, datt, dout, inp, att, B, T, C, NH);
  launched("attention_backward");
}

void crossentropy_forward(float* losses, const float* probs, const int* targets, int N, int V) {
  crossentropy_forward_kernel<<<blocks(N), kThreads>>>(losses, probs, targets, N, V);
  launched("crossentropy_forward");
}

void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets, int N,
                                   int V) {
  crossentropy_softmax_backward_kernel<<<blocks(long(N) * V), kThreads>>>(dlogits, dlosses, probs, targets, N, V);
  launched("crossentropy_softmax_backward");
}

void adamw_update(float* params, float* master, const float* grads, float* m, float* v, long n, const AdamWStep& step) {
  adamw_kernel<<<blocks(n), kThreads>>>(params, master, grads, m, v, n, step);
  launched("adamw_update");
}

void sgd_momentum_update(float* params, float* velocity, const float* grads, long n, float lr, float momentum) {
  sgd_momentum_kernel<<<blocks(n), kThreads>>>(params, velocity, grads, n, lr, momentum);
  launched("sgd_momentum_update");
}

void fill(float* out, float value, long n) {
  if (n == 0) return;
  fill_kernel<<<blocks(n), kThreads>>>(out, value, n);
  launched("fill");
}

void scale(float* inout, float factor, long n) {
  if (n == 0) return;
  scale_kernel<<<blocks(n), kThreads>>>(inout, factor, n);
  launched("scale");
}

// The one number that comes back: copied to the host, which waits for it.
double sum_of_squares(const float* in, long n) {
  if (n == 0) return 0;
  double* sum = nullptr;
  check(cudaMalloc(&sum, sizeof(double)), "cudaMalloc");
  check(cudaMemset(sum, 0, sizeof(double)), "cudaMemset");
  sum_of_squares_kernel<<<blocks(n), kThreads>>>(sum, in, n);
  launched("sum_of_squares");
  double host = 0;
  check(cudaMemcpy(&host, sum, sizeof(double), cudaMemcpyDeviceToHost), "sum_of_squares to the host");
  cudaFree(sum);
  return host;
}

}  // namespace labkit::ops::cuda

namespace labkit {

namespace {
using ops::cuda::check;

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

// Launched on the default stream and waited for: as synchronous as the host's.
void gpu_reduce(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count) {
  const long n = long(count);
  const int grid = int((n + 255) / 256);
  switch (dtype) {
    case DType::f32: reduce_kernel<<<grid, 256>>>(op, static_cast<const float*>(in), static_cast<float*>(inout), n); break;
    case DType::f64: reduce_kernel<<<grid, 256>>>(op, static_cast<const double*>(in), static_cast<double*>(inout), n); break;
    case DType::i32: reduce_kernel<<<grid, 256>>>(op, static_cast<const int*>(in), static_cast<int*>(inout), n); break;
    case DType::i64:
      reduce_kernel<<<grid, 256>>>(op, static_cast<const long long*>(in), static_cast<long long*>(inout), n);
      break;
    case DType::u8: reduce_kernel<<<grid, 256>>>(op, static_cast<const unsigned char*>(in), static_cast<unsigned char*>(inout), n); break;
    case DType::bf16:
      reduce_kernel<__nv_bfloat16, float><<<grid, 256>>>(op, static_cast<const __nv_bfloat16*>(in),
                                                          static_cast<__nv_bfloat16*>(inout), n);
      break;
  }
  check(cudaStreamSynchronize(0), "reduce_local on the GPU");
}

void gpu_divide(DType dtype, void* inout, std::size_t count, int divisor) {
  const long n = long(count);
  const int grid = int((n + 255) / 256);
  switch (dtype) {
    case DType::f32: divide_kernel<<<grid, 256>>>(static_cast<float*>(inout), n, divisor); break;
    case DType::f64: divide_kernel<<<grid, 256>>>(static_cast<double*>(inout), n, divisor); break;
    case DType::i32: divide_kernel<<<grid, 256>>>(static_cast<int*>(inout), n, divisor); break;
    case DType::i64: divide_kernel<<<grid, 256>>>(static_cast<long long*>(inout), n, divisor); break;
    case DType::bf16: divide_kernel<__nv_bfloat16, float><<<grid, 256>>>(static_cast<__nv_bfloat16*>(inout), n, divisor); break;
    case DType::u8: divide_kernel<<<grid, 256>>>(static_cast<unsigned char*>(inout), n, divisor); break;
  }
  check(cudaStreamSynchronize(0), "divide_local on the GPU");
}

void* gpu_allocate(std::size_t bytes) {
  note_gpu_memory();
  void* p = nullptr;
  check(cudaMalloc(&p, bytes ? bytes : 1), "cudaMalloc");
  check(cudaMemset(p, 0, bytes), "cudaMemset");
  return p;
}

// Filled field by field: designated initializers are C++20, and nvcc builds this file as C++17.
const Device kCuda = [] {
  Device d{};
  d.kind = DeviceKind::cuda;
  d.name = "cuda";
  d.allocate = gpu_allocate;
  d.release = [](void* p) { cudaFree(p); };
  d.copy_from_host = [](void* dst, const void* src, std::size_t bytes) {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy to the GPU");
  };
  d.copy_to_host = [](void* dst, const void* src, std::size_t bytes) {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy from the GPU");
  };
  d.zero = [](void* p, std::size_t bytes) { check(cudaMemset(p, 0, bytes), "cudaMemset"); };
  d.synchronize = [] { check(cudaDeviceSynchronize(), "synchronize"); };
  d.holds = [](const void* p) {
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      cudaGetLastError();  // a host pointer CUDA never saw: clear the error
      return false;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
  };
  d.copy = [](void* dst, const void* src, std::size_t bytes) {
    check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "copy on the GPU");
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
  d.sum_of_squares = ops::cuda::sum_of_squares;
  return d;
}();
}  // namespace

bool cuda_available() {
  int devices = 0;
  return cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0;
}

const Device& cuda_device() {
  if (!cuda_available()) throw std::runtime_error("device cuda: no CUDA GPU on this machine");
  return kCuda;
}

}  // namespace labkit
