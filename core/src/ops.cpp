#include "labkit/ops.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <cblas.h>

#include "labkit/dtype.h"

namespace labkit::ops {

namespace {
// OpenBLAS on one thread: the labs' matrices are small, and their ranks share
// the cores already (fibers of one thread on sim, a process per rank under
// mpirun). OpenBLAS's own threads would only wait on each other, and on a busy
// machine each small GEMM then waits for them to be scheduled: the MoE test's
// training ran 51 s with them, 2.5 s without, while a build used the cores.
void one_thread() {
  static const bool once = (openblas_set_num_threads(1), true);
  (void)once;
}

// Row-major GEMM, C = alpha op(A) op(B) + beta C, by OpenBLAS in either precision.
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, float alpha, const float* a, int lda,
          const float* b, int ldb, float beta, float* c, int ldc) {
  one_thread();
  cblas_sgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
void gemm(CBLAS_TRANSPOSE ta, CBLAS_TRANSPOSE tb, int m, int n, int k, double alpha, const double* a, int lda,
          const double* b, int ldb, double beta, double* c, int ldc) {
  one_thread();
  cblas_dgemm(CblasRowMajor, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}
}  // namespace

template <class T> void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      T* o = out + (std::size_t(b) * Tn + t) * C;
      const T* token = wte + std::size_t(tokens[b * Tn + t]) * C;
      const T* position = wpe + std::size_t(t) * C;
      for (int i = 0; i < C; ++i) o[i] = token[i] + position[i];
    }
}

template <class T> void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C) {
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t) {
      const T* d = dout + (std::size_t(b) * Tn + t) * C;
      T* token = dwte + std::size_t(tokens[b * Tn + t]) * C;
      T* position = dwpe + std::size_t(t) * C;
      for (int i = 0; i < C; ++i) {
        token[i] += d[i];
        position[i] += d[i];
      }
    }
}

template <class T> void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC) {
  gemm(CblasNoTrans, CblasTrans, N, OC, C, T(1), inp, C, weight, C, T(0), out, OC);  // inp . weight^T
  if (bias)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) out[std::size_t(n) * OC + o] += bias[o];
}

template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC) {
  if (dinp) gemm(CblasNoTrans, CblasNoTrans, N, C, OC, T(1), dout, OC, weight, C, T(1), dinp, C);  // dinp += dout . W
  if (dweight) gemm(CblasTrans, CblasNoTrans, OC, C, N, T(1), dout, OC, inp, C, T(1), dweight, C);  // dW += dout^T . inp
  if (dbias)
    for (int n = 0; n < N; ++n)
      for (int o = 0; o < OC; ++o) dbias[o] += dout[std::size_t(n) * OC + o];
}

template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C) {
  constexpr T eps = T(1e-5);
  for (int n = 0; n < N; ++n) {
    const T* x = inp + std::size_t(n) * C;
    T m = 0, v = 0;
    for (int i = 0; i < C; ++i) m += x[i];
    m /= C;
    for (int i = 0; i < C; ++i) v += (x[i] - m) * (x[i] - m);
    const T s = T(1) / std::sqrt(v / C + eps);
    T* o = out + std::size_t(n) * C;
    for (int i = 0; i < C; ++i) o[i] = (x[i] - m) * s * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int N, int C) {
  for (int n = 0; n < N; ++n) {
    const T* x = inp + std::size_t(n) * C;
    const T* d = dout + std::size_t(n) * C;
    T* dx = dinp + std::size_t(n) * C;
    // Two reductions: the mean of w dout, and of w dout times the normalized input.
    T dnorm_mean = 0, dnorm_norm_mean = 0;
    for (int i = 0; i < C; ++i) {
      const T norm = (x[i] - mean[n]) * rstd[n];
      dnorm_mean += weight[i] * d[i];
      dnorm_norm_mean += weight[i] * d[i] * norm;
    }
    dnorm_mean /= C;
    dnorm_norm_mean /= C;
    for (int i = 0; i < C; ++i) {
      const T norm = (x[i] - mean[n]) * rstd[n];
      dbias[i] += d[i];
      dweight[i] += norm * d[i];
      dx[i] += (weight[i] * d[i] - dnorm_mean - norm * dnorm_norm_mean) * rstd[n];
    }
  }
}

namespace {
constexpr double kGeluScale = 0.7978845608028654;  // sqrt(2 / pi)
}

template <class T> void gelu_forward(T* out, const T* inp, int n) {
  for (int i = 0; i < n; ++i) {
    const T x = inp[i];
    out[i] = T(0.5) * x * (T(1) + std::tanh(T(kGeluScale) * (x + T(0.044715) * x * x * x)));
  }
}

template <class T> void gelu_backward(T* dinp, const T* inp, const T* dout, int n) {
  for (int i = 0; i < n; ++i) {
    const T x = inp[i], arg = T(kGeluScale) * (x + T(0.044715) * x * x * x);
    const T th = std::tanh(arg), sech2 = T(1) - th * th;
    const T local = T(0.5) * (T(1) + th) + x * T(0.5) * sech2 * T(kGeluScale) * (T(1) + T(3 * 0.044715) * x * x);
    dinp[i] += local * dout[i];
  }
}

template <class T> void relu_forward(T* out, const T* inp, int n) {
  for (int i = 0; i < n; ++i) out[i] = inp[i] > 0 ? inp[i] : T(0);
}

template <class T> void relu_backward(T* dinp, const T* inp, const T* dout, int n) {
  for (int i = 0; i < n; ++i) dinp[i] += inp[i] > 0 ? dout[i] : T(0);
}

template <class T> void softmax_forward(T* probs, const T* logits, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const T* l = logits + std::size_t(n) * V;
    T* p = probs + std::size_t(n) * V;
    T max = -std::numeric_limits<T>::infinity(), sum = 0;
    for (int v = 0; v < V; ++v) max = std::max(max, l[v]);
    for (int v = 0; v < V; ++v) sum += p[v] = std::exp(l[v] - max);
    for (int v = 0; v < V; ++v) p[v] /= sum;
  }
}

template <class T> void softmax_backward(T* dlogits, const T* probs, const T* dprobs, int N, int V) {
  for (int n = 0; n < N; ++n) {
    const T* p = probs + std::size_t(n) * V;
    const T* dp = dprobs + std::size_t(n) * V;
    T dot = 0;
    for (int v = 0; v < V; ++v) dot += p[v] * dp[v];
    for (int v = 0; v < V; ++v) dlogits[std::size_t(n) * V + v] += p[v] * (dp[v] - dot);
  }
}

template <class T> void attention_forward(T* out, T* preatt, T* att, const T* inp, int B, int Tn, int C, int NH) {
  const int C3 = 3 * C, hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t)
      for (int h = 0; h < NH; ++h) {
        const T* query = inp + std::size_t(b) * Tn * C3 + t * C3 + h * hs;
        T* pre = preatt + ((std::size_t(b) * NH + h) * Tn + t) * Tn;
        T* a = att + ((std::size_t(b) * NH + h) * Tn + t) * Tn;
        // Scores q.k / sqrt(hs) for the keys at or before t (causal), then their softmax.
        T max = -std::numeric_limits<T>::infinity();
        for (int t2 = 0; t2 <= t; ++t2) {
          const T* key = inp + std::size_t(b) * Tn * C3 + t2 * C3 + h * hs + C;
          T dot = 0;
          for (int i = 0; i < hs; ++i) dot += query[i] * key[i];
          pre[t2] = dot * scale;
          max = std::max(max, pre[t2]);
        }
        T sum = 0;
        for (int t2 = 0; t2 <= t; ++t2) sum += a[t2] = std::exp(pre[t2] - max);
        for (int t2 = 0; t2 < Tn; ++t2) a[t2] = t2 <= t ? a[t2] / sum : T(0);
        // The output: the values weighted by attention.
        T* o = out + std::size_t(b) * Tn * C + t * C + h * hs;
        for (int i = 0; i < hs; ++i) o[i] = 0;
        for (int t2 = 0; t2 <= t; ++t2) {
          const T* value = inp + std::size_t(b) * Tn * C3 + t2 * C3 + h * hs + 2 * C;
          for (int i = 0; i < hs; ++i) o[i] += a[t2] * value[i];
        }
      }
}

template <class T>
void attention_backward(T* dinp, T* dpreatt, T* datt, const T* dout, const T* inp, const T* att, int B, int Tn, int C,
                        int NH) {
  const int C3 = 3 * C, hs = C / NH;
  const T scale = T(1) / std::sqrt(T(hs));
  for (int b = 0; b < B; ++b)
    for (int t = 0; t < Tn; ++t)
      for (int h = 0; h < NH; ++h) {
        const std::size_t row = ((std::size_t(b) * NH + h) * Tn + t) * Tn;
        const T* a = att + row;
        T* da = datt + row;
        T* dpre = dpreatt + row;
        const T* query = inp + std::size_t(b) * Tn * C3 + t * C3 + h * hs;
        T* dquery = dinp + std::size_t(b) * Tn * C3 + t * C3 + h * hs;
        const T* d = dout + std::size_t(b) * Tn * C + t * C + h * hs;
        // Through the weighted sum of values.
        for (int t2 = 0; t2 <= t; ++t2) {
          const T* value = inp + std::size_t(b) * Tn * C3 + t2 * C3 + h * hs + 2 * C;
          T* dvalue = dinp + std::size_t(b) * Tn * C3 + t2 * C3 + h * hs + 2 * C;
          for (int i = 0; i < hs; ++i) {
            da[t2] += value[i] * d[i];
            dvalue[i] += a[t2] * d[i];
          }
        }
        // Through the softmax: dpre_j = sum_i a_i (delta_ij - a_j) da_i.
        for (int t2 = 0; t2 <= t; ++t2)
          for (int t3 = 0; t3 <= t; ++t3) dpre[t3] += a[t2] * ((t2 == t3 ? T(1) : T(0)) - a[t3]) * da[t2];
        // Through the scores q.k * scale.
        for (int t2 = 0; t2 <= t; ++t2) {
          const T* key = inp + std::size_t(b) * Tn * C3 + t2 * C3 + h * hs + C;
          T* dkey = dinp + std::size_t(b) * Tn * C3 + t2 * C3 + h * hs + C;
          for (int i = 0; i < hs; ++i) {
            dquery[i] += key[i] * dpre[t2] * scale;
            dkey[i] += query[i] * dpre[t2] * scale;
          }
        }
      }
}

template <class T> void residual_forward(T* out, const T* a, const T* b, int n) {
  for (int i = 0; i < n; ++i) out[i] = a[i] + b[i];
}

template <class T> void residual_backward(T* da, T* db, const T* dout, int n) {
  for (int i = 0; i < n; ++i) {
    da[i] += dout[i];
    db[i] += dout[i];
  }
}

template <class T> void crossentropy_forward(T* losses, const T* probs, const int* targets, int N, int V) {
  for (int n = 0; n < N; ++n) losses[n] = -std::log(probs[std::size_t(n) * V + targets[n]]);
}

template <class T>
void crossentropy_softmax_backward(T* dlogits, const T* dlosses, const T* probs, const int* targets, int N, int V) {
  for (int n = 0; n < N; ++n)
    for (int v = 0; v < V; ++v) {
      const T p = probs[std::size_t(n) * V + v];
      dlogits[std::size_t(n) * V + v] += (p - (v == targets[n] ? T(1) : T(0))) * dlosses[n];
    }
}

float round_to_bf16(float x) { return to_float(to_bf16(x)); }

void adamw_update(float* params, float* master, const float* grads, float* m, float* v, long n, const AdamWStep& s) {
  for (long i = 0; i < n; ++i) {
    m[i] = s.beta1 * m[i] + (1 - s.beta1) * grads[i];
    v[i] = s.beta2 * v[i] + (1 - s.beta2) * grads[i] * grads[i];
    float& weight = master ? master[i] : params[i];
    weight -= s.lr * ((m[i] / s.correct1) / (std::sqrt(v[i] / s.correct2) + s.eps) + s.weight_decay * weight);
    if (s.bf16_weights) params[i] = round_to_bf16(weight);
  }
}

void sgd_momentum_update(float* params, float* velocity, const float* grads, long n, float lr, float momentum) {
  for (long i = 0; i < n; ++i) {
    velocity[i] = momentum * velocity[i] + grads[i];
    params[i] -= lr * velocity[i];
  }
}

void lamb_direction(float* direction, float* m, float* v, const float* grads, const float* params, long n,
                    const LambStep& s) {
  for (long i = 0; i < n; ++i) {
    m[i] = s.beta1 * m[i] + (1 - s.beta1) * grads[i];
    v[i] = s.beta2 * v[i] + (1 - s.beta2) * grads[i] * grads[i];
    direction[i] = float((m[i] / s.correct1) / (std::sqrt(v[i] / s.correct2) + s.eps)) + s.weight_decay * params[i];
  }
}

void fill(float* out, float value, long n) { std::fill_n(out, n, value); }

void axpy(float* y, float a, const float* x, long n) {
  for (long i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale(float* inout, float factor, long n) {
  for (long i = 0; i < n; ++i) inout[i] *= factor;
}

double sum_of_squares(const float* in, long n) {
  double sum = 0;
  for (long i = 0; i < n; ++i) sum += double(in[i]) * in[i];
  return sum;
}

// The models run in float; the gradient checks in double.
#define LABKIT_OPS(T)                                                                                       \
  template void encoder_forward<T>(T*, const int*, const T*, const T*, int, int, int);                      \
  template void encoder_backward<T>(T*, T*, const T*, const int*, int, int, int);                           \
  template void matmul_forward<T>(T*, const T*, const T*, const T*, int, int, int);                         \
  template void matmul_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int);                \
  template void layernorm_forward<T>(T*, T*, T*, const T*, const T*, const T*, int, int);                   \
  template void layernorm_backward<T>(T*, T*, T*, const T*, const T*, const T*, const T*, const T*, int, int); \
  template void gelu_forward<T>(T*, const T*, int);                                                         \
  template void gelu_backward<T>(T*, const T*, const T*, int);                                              \
  template void relu_forward<T>(T*, const T*, int);                                                         \
  template void relu_backward<T>(T*, const T*, const T*, int);                                              \
  template void softmax_forward<T>(T*, const T*, int, int);                                                 \
  template void softmax_backward<T>(T*, const T*, const T*, int, int);                                      \
  template void attention_forward<T>(T*, T*, T*, const T*, int, int, int, int);                             \
  template void attention_backward<T>(T*, T*, T*, const T*, const T*, const T*, int, int, int, int);        \
  template void residual_forward<T>(T*, const T*, const T*, int);                                           \
  template void residual_backward<T>(T*, T*, const T*, int);                                                \
  template void crossentropy_forward<T>(T*, const T*, const int*, int, int);                                \
  template void crossentropy_softmax_backward<T>(T*, const T*, const T*, const int*, int, int);
LABKIT_OPS(float)
LABKIT_OPS(double)
#undef LABKIT_OPS

}  // namespace labkit::ops
