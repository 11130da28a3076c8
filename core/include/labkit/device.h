// Where memory lives and where the ops run: the CPU, an NVIDIA GPU, or the
// fenced device that stands in for one where there is none. A Device is a
// table of functions, filled once per device (core/src/device.cpp for the CPU,
// core/src/ops_cuda.cu for CUDA, core/src/fenced_device.cpp), so the modules
// and the GPT are written once and run on any: the same code path as llm.c's
// train_gpt2.c and train_gpt2.cu, without keeping two copies of the model.
#pragma once

#include <cstddef>
#include <string>

#include "labkit/dtype.h"
#include "labkit/ops.h"

namespace labkit {

// fenced: host memory the host cannot touch, opened only inside the device's
// own ops (the CPU's kernels), so host code that reads device memory stops with
// the allocation named, as on a GPU it would crash or read garbage: how a
// machine without a GPU tests the path a GPU takes (fenced_device.cpp).
enum class DeviceKind { cpu, cuda, fenced };
DeviceKind parse_device(const std::string& name);  // "cpu", "cuda" or "fenced"

struct Device {
  DeviceKind kind;
  const char* name;

  // Memory: allocate is zero-filled; copies take bytes, the other side host memory.
  void* (*allocate)(std::size_t bytes);
  void (*release)(void* p);
  void (*copy_from_host)(void* dst, const void* src, std::size_t bytes);
  void (*copy_to_host)(void* dst, const void* src, std::size_t bytes);
  void (*zero)(void* p, std::size_t bytes);
  void (*synchronize)();  // wait until every op this thread's rank issued so far has finished (a GPU: its stream)
  // What the collective algorithms need when their buffers live here: is p
  // this device's memory, a copy within it or between it and the host (either
  // way), and reduce_local (dtype.h) on it.
  bool (*holds)(const void* p);
  void (*copy)(void* dst, const void* src, std::size_t bytes);
  void (*reduce)(ReduceOp op, DType dtype, const void* in, void* inout, std::size_t count);
  void (*divide)(DType dtype, void* inout, std::size_t count, int divisor);

  // The ops of labkit/ops.h in float; the backward functions accumulate.
  void (*encoder_forward)(float* out, const int* tokens, const float* wte, const float* wpe, int B, int T, int C);
  void (*encoder_backward)(float* dwte, float* dwpe, const float* dout, const int* tokens, int B, int T, int C);
  void (*matmul_forward)(float* out, const float* inp, const float* weight, const float* bias, int N, int C, int OC);
  void (*matmul_backward)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                          const float* weight, int N, int C, int OC);
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp, const float* weight,
                            const float* bias, int N, int C);
  void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                             const float* weight, const float* mean, const float* rstd, int N, int C);
  void (*gelu_forward)(float* out, const float* inp, int n);
  void (*gelu_backward)(float* dinp, const float* inp, const float* dout, int n);
  void (*residual_forward)(float* out, const float* a, const float* b, int n);
  void (*residual_backward)(float* da, float* db, const float* dout, int n);
  void (*softmax_forward)(float* probs, const float* logits, int N, int V);
  // The MoE layer's: its experts' ReLU, and its router's softmax backward.
  void (*relu_forward)(float* out, const float* inp, int n);
  void (*relu_backward)(float* dinp, const float* inp, const float* dout, int n);
  void (*softmax_backward)(float* dlogits, const float* probs, const float* dprobs, int N, int V);
  void (*attention_forward)(float* out, float* preatt, float* att, const float* inp, int B, int T, int C, int NH);
  void (*attention_backward)(float* dinp, float* dpreatt, float* datt, const float* dout, const float* inp,
                             const float* att, int B, int T, int C, int NH);
  void (*crossentropy_forward)(float* losses, const float* probs, const int* targets, int N, int V);
  void (*crossentropy_softmax_backward)(float* dlogits, const float* dlosses, const float* probs, const int* targets,
                                        int N, int V);
  void (*adamw_update)(float* params, float* master, const float* grads, float* m, float* v, long n,
                       const ops::AdamWStep& step);
  void (*sgd_momentum_update)(float* params, float* velocity, const float* grads, long n, float lr, float momentum);
  void (*lamb_direction)(float* direction, float* m, float* v, const float* grads, const float* params, long n,
                         const ops::LambStep& step);
  // The parallel labs' data paths: fill, scale, y += a x, and a sum of squares that comes back to the host.
  void (*fill)(float* out, float value, long n);
  void (*scale)(float* inout, float factor, long n);
  void (*axpy)(float* y, float a, const float* x, long n);
  double (*sum_of_squares)(const float* in, long n);
  // Tensor parallelism's vocabulary slice: its embedding and its cross-entropy's steps.
  void (*vocab_slice_encoder_forward)(float* out, const int* tokens, const float* wte, const float* wpe, int first,
                                      int V, int B, int T, int C);
  void (*vocab_slice_encoder_backward)(float* dwte, float* dwpe, const float* dout, const int* tokens, int first, int V,
                                       int B, int T, int C);
  void (*vocab_slice_max)(float* largest, float* logits, int first, int vocab, int N, int V);
  void (*vocab_slice_exp_sums)(float* sums, const float* logits, const float* largest, const int* targets, int first,
                               int N, int V);
  void (*vocab_slice_softmax)(float* probs, float* losses, const float* logits, const float* largest,
                              const float* sums, int N, int V);
  void (*vocab_slice_crossentropy_backward)(float* dlogits, const float* probs, const int* targets, int first, int N,
                                            int V);
  // Ring attention's blocks, and a column range of strided rows.
  void (*attention_block_forward)(float* out, float* lse, const float* qkv, const float* kv,
                                  const int* query_positions, const int* key_positions, int B, int L, int C, int NH,
                                  ops::MergeRow merge);
  void (*attention_block_delta)(float* delta, const float* dout, const float* out, int B, int L, int C, int NH);
  void (*attention_block_backward)(float* dqkv, float* dkv, const float* qkv, const float* kv, const float* dout,
                                   const float* lse, const float* delta, const int* query_positions,
                                   const int* key_positions, int B, int L, int C, int NH);
  void (*copy_columns)(float* dst, int dst_stride, const float* src, int src_stride, long rows, int width);
  // The MoE layer's rows moved by index, and a gate gradient's dot per row.
  void (*gather_rows)(float* dst, const float* src, const int* index, const float* weights, long n, int C);
  void (*scatter_add_rows)(float* dst, const float* src, const int* index, const float* weights, long n, int C);
  void (*row_dots)(float* out, const float* a, const int* index, const float* b, long n, int C);
  // ZeRO++'s block-wise int8 and int4 quantization.
  void (*quantize)(unsigned char* out, const float* x, long count, int bits);
  void (*dequantize)(float* x, const unsigned char* in, long count, int bits);
};

const Device& device(DeviceKind kind);  // the CUDA one throws if this build or machine has no GPU
// The device whose memory p points into: the CPU unless GPU memory was ever
// allocated in this process and p is in it (so host-only runs never ask CUDA).
const Device& device_of(const void* p);
// The device that holds either buffer (`a`'s where both are off the host): where
// a copy or a reduction between them runs.
const Device& device_of(const void* a, const void* b);
void note_gpu_memory();  // called by the CUDA device's allocate
// Waits for the ops this thread's rank issued on the GPU, if the process ever
// allocated GPU memory: a GPU runs them after the host has queued them, so a
// real clock reads when compute ended only after this (Comm::record_compute).
void finish_issued_ops();
const Device& cuda_device();            // in ops_cuda.cu, or no_cuda.cpp in a build without CUDA
const Device& fenced_device();          // in fenced_device.cpp
bool cuda_available();                  // built with CUDA, and a GPU is present

// The simulated rank whose code issues the ops that follow, or -1 where a
// process is one rank. The simulator sets it as it switches between ranks; on a
// GPU each rank's ops then go to a CUDA stream of its own, so ranks sharing the
// GPU overlap as processes would (cuda_streams.cu). Per thread.
void set_issuing_rank(int rank);
int issuing_rank();
// The rank this process runs where a process is one rank (under mpirun), set
// by the MPI launcher; -1 otherwise. An error raised outside any Comm (the host
// memory check) names it.
void set_process_rank(int rank);

// What stays on the host (a router's choices, a loss, a norm for clipping)
// crosses by an explicit copy between the host and a device's memory (a GPU's,
// the fenced device's; the CPU's is the host's). Each such copy is told to the
// observer this thread set, if any: the simulator marks it on the issuing
// rank's trace, with its bytes. nullptr: none.
using HostCopyObserver = void (*)(std::size_t bytes, bool to_host, void* context);
void observe_host_copies(HostCopyObserver observer, void* context);
void note_host_copy(std::size_t bytes, bool to_host);  // by the devices' copy_to_host and copy_from_host

}  // namespace labkit
