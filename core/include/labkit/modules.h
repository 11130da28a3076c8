// The building blocks of a GPT-2 layer, as classes: Linear, LayerNorm, the MLP,
// causal self-attention and the transformer block. A module owns no memory:
// it is a view onto its slice of the model's flat parameter buffer (and the
// same slice of the gradient buffer), as llm.c lays a model out, so the whole
// model stays one buffer that data parallelism reduces and FSDP shards. Its
// activations are views too, carved from the model's activation buffer (and the
// same place in the activation-gradient buffer) by its Acts.
//
// forward(device, ...) and backward(device, ...) run the ops of labkit/ops.h on
// the given Device; backward accumulates (+=) into every gradient it touches.
// x is the module's input, N = B*T rows of C channels.
//
// A backward computes the gradients of the input and of the weights at once,
// or (zero-bubble pipeline schedules, Qi et al. 2024) one part: the input's,
// which the layer before waits for, then later the weights', from the output
// gradients the first part left in the activation gradients. A norm's gain and
// bias take theirs with the input's: they cost nothing beside it.
#pragma once

#include <cstddef>

#include "labkit/device.h"

namespace labkit {

// A tensor's values and, at the same offset in the twin buffer, its gradient.
struct Slice {
  float* value = nullptr;
  float* grad = nullptr;
};

enum class BackwardPart { all, input, weights };

// A bump allocator (an arena): hands out consecutive slices of a buffer and its
// gradient twin, in order, and frees nothing; the buffer is freed whole. With
// null bases it only counts: that is how a model sizes its buffers.
class Arena {
 public:
  Arena(float* values, float* grads) : values_(values), grads_(grads) {}
  Slice allocate(std::size_t n) {
    const Slice s{values_ ? values_ + allocated_ : nullptr, grads_ ? grads_ + allocated_ : nullptr};
    allocated_ += n;
    return s;
  }
  std::size_t allocated() const { return allocated_; }

 private:
  float *values_, *grads_;
  std::size_t allocated_ = 0;
};

// y (N,out) = x (N,in) W^T + b, W (out,in).
class Linear {
 public:
  Linear(Arena& params, int in, int out, bool bias = true);
  void forward(const Device& d, float* y, const float* x, int N) const;
  void backward(const Device& d, float* dx, const float* dy, const float* x, int N,
                BackwardPart part = BackwardPart::all) const;  // dx unused for the weights' part
  int in, out;
  Slice weight, bias;  // bias.value is null without a bias
};

// Layer norm over C channels (Ba, Kiros & Hinton 2016), with a gain and a bias.
class LayerNorm {
 public:
  LayerNorm(Arena& params, int C);
  struct Acts {
    Slice out, mean, rstd;  // mean and 1/std per row, kept for backward
    Acts(Arena& acts, int N, int C);
  };
  void forward(const Device& d, const Acts& a, const float* x, int N) const;
  void backward(const Device& d, float* dx, const Acts& a, const float* x, int N) const;
  int C;
  Slice weight, bias;
};

// GPT-2's feed-forward network: C -> 4C, GELU, 4C -> C.
class Mlp {
 public:
  Mlp(Arena& params, int C);
  struct Acts {
    Slice hidden, gelu, out;
    Acts(Arena& acts, int N, int C);
  };
  void forward(const Device& d, const Acts& a, const float* x, int N) const;
  void backward(const Device& d, float* dx, const Acts& a, const float* x, int N,
                BackwardPart part = BackwardPart::all) const;
  Linear fc, proj;
};

// Multi-head causal self-attention (Vaswani et al. 2017): one Linear makes q, k
// and v, each head attends to earlier positions only, another Linear projects.
class CausalSelfAttention {
 public:
  CausalSelfAttention(Arena& params, int C, int heads);
  struct Acts {
    Slice qkv, heads_out, preatt, att, out;  // preatt and att (B,NH,T,T): scores before and after softmax
    Acts(Arena& acts, int B, int T, int C, int NH);
  };
  void forward(const Device& d, const Acts& a, const float* x, int B, int T) const;
  void backward(const Device& d, float* dx, const Acts& a, const float* x, int B, int T,
                BackwardPart part = BackwardPart::all) const;
  Linear qkv, proj;
  int heads;
};

// A pre-norm transformer block, as GPT-2: r = x + attn(ln1(x)); out = r + mlp(ln2(r)).
class Block {
 public:
  Block(Arena& params, int C, int heads);
  struct Acts {
    LayerNorm::Acts ln1;
    CausalSelfAttention::Acts attn;
    Slice residual;
    LayerNorm::Acts ln2;
    Mlp::Acts mlp;
    Slice out;  // the residual stream after this block
    Acts(Arena& acts, int B, int T, int C, int NH);
  };
  void forward(const Device& d, const Acts& a, const float* x, int B, int T) const;
  // From a.out.grad, the gradient of the block's output, to dx (+=).
  void backward(const Device& d, float* dx, const Acts& a, const float* x, int B, int T,
                BackwardPart part = BackwardPart::all) const;
  LayerNorm ln1;
  CausalSelfAttention attn;
  LayerNorm ln2;
  Mlp mlp;
};

}  // namespace labkit
