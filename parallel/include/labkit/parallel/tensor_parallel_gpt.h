// labkit::TensorParallelGpt — the tiny GPT with Megatron-LM's tensor
// parallelism (Shoeybi et al. 2019, section 3): each rank of the tensor-
// parallel group keeps a slice of every large matrix and the whole of every
// small tensor, and the ranks compute each layer together.
//
//   attention  QKV column-parallel by heads (rank r: heads [r NH/t, (r+1) NH/t)
//              of q, k and v), attention over its own heads, the output
//              projection row-parallel (its heads' columns)
//   MLP        fc column-parallel (4C/t of the hidden features), GELU on them,
//              proj row-parallel
//   embedding  vocabulary-parallel: rank r keeps rows [r V'/t, (r+1) V'/t) of
//              the token table, V' = V padded with zero rows to a multiple of t;
//              the tied output head gives each rank those V'/t logits, and the
//              cross-entropy takes the softmax's max and sum by allreduce
//              (padded logits masked to -inf, so they never enter it)
//   whole      the norms, the positions, the row-parallel layers' biases
//
// Megatron's f and g: f is the identity forward and an allreduce backward
// (where a replicated activation enters a column-parallel layer), g the
// reverse (where a row-parallel layer's partial sums leave it). Per layer that
// is two allreduces of B x T x C forward, after attention's and the MLP's
// projections, and two backward, before ln1 and ln2 get their gradients: the
// reading's 4 b s h per layer. The whole tensors get the same gradient on
// every rank, since what flows into them is replicated.
//
// Host memory only, for now: the vocabulary-parallel pieces are host loops.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/modules.h"
#include "labkit/tensor.h"

namespace labkit {

class TensorParallelGpt {
 public:
  // Every rank of `tp` built `dense` from the same seed; this rank keeps its
  // slice of it. Heads, and so channels and the MLP's width, must divide by
  // the group's size.
  TensorParallelGpt(Comm& tp, const Gpt& dense);

  // Mean cross-entropy over this group's B x T tokens (the same on every rank
  // of the group, as are tokens and targets).
  float forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);
  void zero_grad() { grads_.zero(); }
  void backward();  // of the last forward; accumulates into gradients()

  // This rank's slice of a buffer in the dense model's layout (its weights or
  // their gradients): what this rank keeps of them, padding rows as zeros.
  std::vector<float> slice_of_dense(std::span<const float> dense) const;

  Tensor& parameters() { return params_; }
  Tensor& gradients() { return grads_; }
  std::size_t parameter_count() const { return params_.size(); }
  int padded_vocab() const { return vocab_local_ * tp_.size(); }
  const GptConfig& config() const { return config_; }

 private:
  struct BlockModules {
    LayerNorm ln1;
    Linear qkv, proj;  // column- and row-parallel
    LayerNorm ln2;
    Linear fc, fc_proj;  // column- and row-parallel
    BlockModules(Carver& params, int C, int t);
  };
  struct Modules {
    Slice wte, wpe;  // wte: this rank's V'/t rows
    std::vector<BlockModules> blocks;
    LayerNorm lnf;
    Modules(Carver& params, const GptConfig& c, int vocab_local, int t);
  };
  struct BlockActs {
    LayerNorm::Acts ln1;
    Slice qkv, heads_out, preatt, att, attn_out, residual;  // qkv, heads_out, preatt, att: this rank's heads
    LayerNorm::Acts ln2;
    Slice hidden, gelu, mlp_out, out;  // hidden, gelu: this rank's 4C/t features
    BlockActs(Carver& acts, int B, int T, int C, int NH, int t);
  };
  struct Acts {
    Slice encoded;
    std::vector<BlockActs> blocks;
    LayerNorm::Acts lnf;
    Slice logits, probs, losses;  // logits, probs: this rank's V'/t columns
    Acts(Carver& acts, const GptConfig& c, int B, int T, int vocab_local, int t);
  };
  void prepare(int B, int T);
  void all_reduce(float* x, std::size_t n, ReduceOp op = ReduceOp::sum);
  float* stream(int layer) const;  // layer l's output; -1: the embeddings
  float* stream_grad(int layer) const;
  void forward_block(int l);
  void backward_block(int l);
  float vocab_parallel_cross_entropy(const std::vector<int>& targets);

  Comm& tp_;
  GptConfig config_;
  int vocab_local_;
  Tensor params_, grads_, acts_, grad_acts_;
  std::optional<Modules> m_;
  std::optional<Acts> a_;
  std::vector<int> tokens_, targets_;
  int B_ = 0, T_ = 0;
};

}  // namespace labkit
