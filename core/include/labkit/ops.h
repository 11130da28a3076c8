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

// Tensor parallelism's vocabulary slice (Megatron-LM's VocabParallelEmbedding
// and vocab_parallel_cross_entropy; Shoeybi et al. 2019, section 3): a rank
// keeps rows [first, first + V) of the token table, so its lookups and its
// logits cover those tokens only. The group sums the lookups, and takes the
// softmax's max and sums by allreduce between the cross-entropy's three steps.
//
// out (B,T,C) = wte[token - first] for a token in the slice, else 0; plus
// wpe[t] where wpe is given (one rank of the group adds the positions).
void vocab_slice_encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int first, int V,
                                 int B, int Tn, int C);
// Accumulates the slice's tokens' rows of dwte, and dwpe where given.
void vocab_slice_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int first, int V,
                                  int B, int Tn, int C);
// logits (N,V) are columns [first, first + V) of a vocabulary of `vocab`: the
// ones past it (padding) become -inf, so they never enter the softmax; largest
// (N) gets each row's largest logit here.
void vocab_slice_max(float* largest, float* logits, int first, int vocab, int N, int V);
// With the group's largest: sums (2N) gets each row's sum of exp(z - largest)
// here, and at N + i its target's z - largest where this slice holds the target (else 0).
void vocab_slice_exp_sums(float* sums, const float* logits, const float* largest, const int* targets, int first, int N,
                          int V);
// With the group's sums: probs (N,V) = exp(z - largest) / sum, and losses (N) = log sum - (z_target - largest).
void vocab_slice_softmax(float* probs, float* losses, const float* logits, const float* largest, const float* sums,
                         int N, int V);
// The mean loss's gradient: dlogits (N,V) += (probs - 1[column is the target]) / N.
void vocab_slice_crossentropy_backward(float* dlogits, const float* probs, const int* targets, int first, int N, int V);

// Ring attention's blocks (Liu et al. 2023; FlashAttention-2's backward, Dao
// 2023): this rank's L queries against one block of L keys and values, the
// causal mask kept by each position's place in the sequence (query_positions,
// key_positions: L ints each). qkv (B,L,3C) holds this rank's queries (and its
// own keys and values), kv (B,L,2C) the block's keys and values; NH heads.
//
// The forward folds the block into each row's running attention: out (B,L,C)
// normalised over the keys seen so far, lse (B,NH,L) their log-sum-exp (-inf
// before any). `merge` folds a row's block (hs values and its log-sum-exp)
// into the row's (ring_attention.h's merge_attention, exercise 7.4): the CPU's
// kernel calls it, the GPU's folds with its own copy of that formula.
using MergeRow = void (*)(float* out, float& lse, const float* block_out, float block_lse, int hs);
void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, const int* query_positions,
                             const int* key_positions, int B, int L, int C, int NH, MergeRow merge);
// delta (B,NH,L): each row and head's dot(dout, out), the softmax backward's
// term over all keys (FlashAttention-2's D), computed once before the blocks.
void attention_block_delta(float* delta, const float* dout, const float* out, int B, int L, int C, int NH);
// One block's backward from the final lse: accumulates the queries' gradients
// into dqkv's q part (B,L,3C) and the block's keys' and values' into dkv (B,L,2C).
void attention_block_backward(float* dqkv, float* dkv, const float* qkv, const float* kv, const float* dout,
                              const float* lse, const float* delta, const int* query_positions,
                              const int* key_positions, int B, int L, int C, int NH);
// A column range of strided rows: dst[r dst_stride + c] = src[r src_stride + c]
// for c < width (ring attention's keys and values out of QKV's rows, and their gradients back).
void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, long rows, int width);

// The MoE layer's rows moved by index (its dispatch and combine): rows of C
// floats, the indices and weights decided on the host and copied over.
// dst row i = weights[i] x src row index[i] (weights null: a copy).
void gather_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C);
// dst row index[i] += weights[i] x src row i (weights null: + src row i), i in
// order; an index may repeat (a token's k outputs add into its row).
void scatter_add_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C);
// out[i] = a row index[i] . b row i, summed in float in column order (a gate's gradient).
void row_dots(float* out, const float* a, const int* index, const float* b, long n, int C);

// Block-wise quantization, ZeRO++'s wire format (Wang et al. 2023): int8 for
// its weight gathers (qwZ), int4 for its gradient reduce (qgZ). count floats go
// in blocks of kQuantBlock, each with one fp32 scale (its largest magnitude /
// qmax) and its values as round(x / scale) in [-qmax, qmax]: qmax 127 at 8
// bits (a byte each), 7 at 4 bits (two to a byte, the even index in the low
// nibble). out holds the scales, then the values (parallel/quantize.h sizes it).
inline constexpr long kQuantBlock = 64;
void quantize(unsigned char* out, const float* x, long count, int bits);
void dequantize(float* x, const unsigned char* in, long count, int bits);

// Round to the nearest bfloat16 (ties to even), kept in a float: the top 16 bits
// (dtype.h's to_bf16 and back; a NaN stays NaN).
float round_to_bf16(float x);

}  // namespace labkit::ops
