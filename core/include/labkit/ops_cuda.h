// The ops of labkit/ops.h on an NVIDIA GPU: the same contracts (row-major,
// backward functions accumulate), float only, device pointers. Matmuls are
// cuBLAS; the rest are llm.c's plain kernels (dev/cuda's first versions): a
// thread per output mirroring the CPU loop, or a warp per row where a row is
// summed (layer norm, softmax, attention and ring attention's blocks, the
// vocabulary slice's cross-entropy), compared with the CPU's to 1e-5. Built
// when CMake finds CUDA (LABKIT_CUDA); labkit/device.h gathers them, with the
// GPU's memory, into the "cuda" Device.
#pragma once

#include "labkit/ops.h"

namespace labkit::ops::cuda {

// The matmuls' cuBLAS is opened at the first, not linked (a linked one slows
// every process's start, GPU or none); this opens it now, and throws, naming
// the library, where it cannot be opened.
void open_cublas();

void encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C);
void encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C);
void matmul_forward(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
void matmul_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                     const float* weight, int N, int C, int OC);
void layernorm_forward(float* out, float* mean, float* rstd, const float* inp, const float* weight, const float* bias,
                       int N, int C);
void layernorm_backward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                        const float* weight, const float* mean, const float* rstd, int N, int C);
void gelu_forward(float* out, const float* inp, int n);
void gelu_backward(float* dinp, const float* inp, const float* dout, int n);
void relu_forward(float* out, const float* inp, int n);
void relu_backward(float* dinp, const float* inp, const float* dout, int n);
void residual_forward(float* out, const float* a, const float* b, int n);
void residual_backward(float* da, float* db, const float* dout, int n);
void softmax_forward(float* probs, const float* logits, int N, int V);
void softmax_backward(float* dlogits, const float* probs, const float* dprobs, int N, int V);
void attention_forward(float* out, float* preatt, float* att, const float* inp, int B, int T, int C, int NH);
void attention_backward(float* dinp, float* dpreatt, float* datt, const float* dout, const float* inp,
                        const float* att, int B, int T, int C, int NH);
void crossentropy_forward(float* losses, const float* probs, const int* targets, int N, int V);
void crossentropy_softmax_backward(float* dlogits, const float* dlosses, const float* probs, const int* targets, int N,
                                   int V);

void adamw_update(float* params, float* master, const float* grads, float* m, float* v, long n, const AdamWStep& step);
void sgd_momentum_update(float* params, float* velocity, const float* grads, long n, float lr, float momentum);
void fill(float* out, float value, long n);
void lamb_direction(float* direction, float* m, float* v, const float* grads, const float* params, long n,
                    const LambStep& step);
void scale(float* inout, float factor, long n);
void axpy(float* y, float a, const float* x, long n);
double sum_of_squares(const float* in, long n);

// ops_vocab_slice.cu
void vocab_slice_encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int first, int V,
                                 int B, int T, int C);
void vocab_slice_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int first, int V,
                                  int B, int T, int C);
void vocab_slice_max(float* largest, float* logits, int first, int vocab, int N, int V);
void vocab_slice_exp_sums(float* sums, const float* logits, const float* largest, const int* targets, int first, int N,
                          int V);
void vocab_slice_softmax(float* probs, float* losses, const float* logits, const float* largest, const float* sums,
                         int N, int V);
void vocab_slice_crossentropy_backward(float* dlogits, const float* probs, const int* targets, int first, int N, int V);

// ops_attention_block.cu: the merge is the kernel's own (the argument is for the CPU's)
void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, const int* query_positions,
                             const int* key_positions, int B, int L, int C, int NH, MergeRow merge);
void attention_block_delta(float* delta, const float* dout, const float* out, int B, int L, int C, int NH);
void attention_block_backward(float* dqkv, float* dkv, const float* qkv, const float* kv, const float* dout,
                              const float* lse, const float* delta, const int* query_positions,
                              const int* key_positions, int B, int L, int C, int NH);
void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, long rows, int width);

// ops_rows.cu
void gather_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C);
void scatter_add_rows(float* dst, const float* src, const int* index, const float* weights, long n, int C);
void row_dots(float* out, const float* a, const int* index, const float* b, long n, int C);

// ops_quantize.cu
void quantize(unsigned char* out, const float* x, long count, int bits);
void dequantize(float* x, const unsigned char* in, long count, int bits);

}  // namespace labkit::ops::cuda
