// The operations of a GPT-style model, each a forward and a backward function
// over plain row-major arrays, in the manner of llm.c (Karpathy, train_gpt2.c):
// shapes in comments as (B,T,C), backward functions accumulate (+=) into the
// gradients they are given, so one buffer can sum gradients from several uses.
//
// Templated on the element type: the models run in float; the gradient checks
// run the same code in double against finite differences.
// B = batch, T = sequence length, C = channels, OC = output channels,
// V = vocabulary, NH = heads, N = B*T rows.
#pragma once

namespace labkit::ops {

// FLOPs of the two big ones, so a run can charge modeled compute time
// (everything else is O(N C) and ignored, as in the 6ND rule of thumb).
inline double matmul_flops(int N, int C, int OC) { return 2.0 * N * C * OC; }  // backward: twice this
inline double attention_flops(int B, int T, int C) { return 2.0 * B * T * T * C; }  // QK^T and att.V, causal half x2

// out (B,T,C) = wte[token] + wpe[t]: token and position embeddings.
template <class T> void encoder_forward(T* out, const int* tokens, const T* wte, const T* wpe, int B, int Tn, int C);
template <class T> void encoder_backward(T* dwte, T* dwpe, const T* dout, const int* tokens, int B, int Tn, int C);

// out (N,OC) = inp (N,C) . weight (OC,C)^T + bias (OC); bias may be null. OpenBLAS sgemm/dgemm.
template <class T> void matmul_forward(T* out, const T* inp, const T* weight, const T* bias, int N, int C, int OC);
// Accumulates (+=) dinp, dweight and dbias; null ones are skipped (a zero-bubble
// pipeline computes the input's gradient first and the weights' later).
template <class T>
void matmul_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, int N, int C, int OC);

// Layer norm over the last dimension (Ba, Kiros & Hinton 2016); keeps mean and
// 1/std per row (N) for the backward pass.
template <class T>
void layernorm_forward(T* out, T* mean, T* rstd, const T* inp, const T* weight, const T* bias, int N, int C);
template <class T>
void layernorm_backward(T* dinp, T* dweight, T* dbias, const T* dout, const T* inp, const T* weight, const T* mean,
                        const T* rstd, int N, int C);

// GELU, tanh approximation (Hendrycks & Gimpel 2016), as GPT-2; and ReLU.
template <class T> void gelu_forward(T* out, const T* inp, int n);
template <class T> void gelu_backward(T* dinp, const T* inp, const T* dout, int n);
template <class T> void relu_forward(T* out, const T* inp, int n);
template <class T> void relu_backward(T* dinp, const T* inp, const T* dout, int n);

// Row-wise softmax: probs (N,V) from logits (N,V), max-subtracted for stability.
template <class T> void softmax_forward(T* probs, const T* logits, int N, int V);
template <class T> void softmax_backward(T* dlogits, const T* probs, const T* dprobs, int N, int V);

// Causal multi-head self-attention. inp (B,T,3C) holds q, k, v; preatt and att
// (B,NH,T,T) keep the scores before and after softmax; out (B,T,C).
template <class T> void attention_forward(T* out, T* preatt, T* att, const T* inp, int B, int Tn, int C, int NH);
template <class T>
void attention_backward(T* dinp, T* dpreatt, T* datt, const T* dout, const T* inp, const T* att, int B, int Tn, int C,
                        int NH);

// The residual connection: out = a + b; its backward passes dout to both.
template <class T> void residual_forward(T* out, const T* a, const T* b, int n);
template <class T> void residual_backward(T* da, T* db, const T* dout, int n);

// Cross-entropy: losses (N) = -log probs[target]; the backward of softmax and
// cross-entropy fused: dlogits += dloss (probs - onehot(target)).
template <class T> void crossentropy_forward(T* losses, const T* probs, const int* targets, int N, int V);
template <class T>
void crossentropy_softmax_backward(T* dlogits, const T* dlosses, const T* probs, const int* targets, int N, int V);

// One AdamW step (Loshchilov & Hutter 2019) over n weights, as llm.c's
// adamw_kernel: m and v are the fp32 moments; weight decay acts on the weights
// directly. bf16 weights (values rounded to bfloat16) lose any update smaller
// than half their last bit, so mixed precision keeps an fp32 master copy,
// updates that, and rounds it into the weights (Micikevicius et al. 2018).
struct AdamWStep {
  float lr, beta1, beta2, eps, weight_decay;
  float correct1, correct2;  // 1 - beta1^t and 1 - beta2^t, the bias corrections at step t
  bool bf16_weights;         // the weights hold bf16 values: round every update to bf16
};
void adamw_update(float* params, float* master, const float* grads, float* m, float* v, long n, const AdamWStep& step);

// SGD with momentum as PyTorch writes it: v = momentum v + g; w -= lr v.
void sgd_momentum_update(float* params, float* velocity, const float* grads, long n, float lr, float momentum);

// LAMB's direction (You et al. 2019) over n weights: Adam's moments, then
// r = m^ / (sqrt(v^) + eps) + wd w, bias-corrected in double as the update's
// host formula always was; the layer's trust ratio scales r afterwards.
struct LambStep {
  float beta1, beta2, eps, weight_decay;
  double correct1, correct2;  // 1 - beta1^t and 1 - beta2^t
};
void lamb_direction(float* direction, float* m, float* v, const float* grads, const float* params, long n,
                    const LambStep& step);

// What the parallel labs' data paths do to a buffer besides the model's ops:
// fill it (a freed shard marked NaN, a reduce-scatter's zero padding), scale it
// (clipping), and its sum of squares (a norm's square), summed in double and
// returned to the host: the one number clipping needs there.
void fill(float* out, float value, long n);
void scale(float* inout, float factor, long n);
void axpy(float* y, float a, const float* x, long n);  // y += a x (LARS's weight decay, LAMB's step)
double sum_of_squares(const float* in, long n);

// Round to the nearest bfloat16 (ties to even), kept in a float: the top 16 bits
// (dtype.h's to_bf16 and back; a NaN stays NaN).
float round_to_bf16(float x);

}  // namespace labkit::ops
