// labkit::MoeGpt — the tiny GPT with a mixture of experts (moe.h) where each
// block had its MLP: r = x + attn(ln1(x)); out = r + moe(ln2(r)), experts
// spread over an expert-parallel group.
//
// Each rank of the ep group trains on its own consecutive share of the batch
// (expert parallelism rides on data parallelism, as in GShard and Megatron):
// it keeps the whole of everything but the experts (the embeddings, attention,
// norms, routers, shared experts: "dense" below), and E / ep experts of every
// layer. After backward the dense gradients are averaged over the group, as
// data parallelism does; an expert's gradient already holds every rank's
// tokens that reached it, each rank's taken over its own share, so it is
// divided by ep. Then every rank's step equals one rank's on the whole batch.
//
// On any device: built on the host from the seed, then moved there whole.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/optim.h"
#include "labkit/parallel/equivalence.h"
#include "labkit/parallel/moe.h"
#include "labkit/parallel/sampler.h"
#include "labkit/parallel/sequences.h"
#include "labkit/tensor.h"

namespace labkit {

class MoeGpt {
 public:
  // Every rank draws the same dense part from `seed` (GPT-2's initialisation)
  // and experts [rank E / ep, (rank + 1) E / ep) of each layer, each expert the
  // same whatever ep is.
  MoeGpt(const GptConfig& config, const MoeConfig& moe, int ep_size, int ep_rank, std::uint64_t seed,
         DeviceKind where = DeviceKind::cpu);

  // Mean cross-entropy over this rank's B x T tokens; every MoE layer's routing
  // is collective over ep.
  float forward(Comm& ep, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);
  // The balance losses of the last forward, summed over the layers (aux; else 0).
  // They are part of what backward differentiates.
  double balance_loss() const;
  void zero_grad();
  void backward(Comm& ep);
  // The dense gradients averaged over ep, the experts' divided by ep.
  void average_gradients(Comm& ep);
  void update_bias();  // DeepSeek-V3's, every layer's, after the step
  // One training step: forward, backward, the gradients averaged, each part
  // updated by its optimizer, the bias moved. Returns forward's loss.
  // An optimizer's step on a part's parameters, given its gradients (on the model's device).
  using TensorUpdate = std::function<void(Tensor& params, Tensor& grads)>;
  float train_step(Comm& ep, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                   const TensorUpdate& update_dense, const TensorUpdate& update_experts);

  Tensor& dense() { return dense_; }
  Tensor& dense_gradients() { return dense_grads_; }
  Tensor& experts() { return experts_; }
  Tensor& expert_gradients() { return expert_grads_; }
  // What rank `ep_rank` of an ep group of `ep_size` keeps of a one-rank
  // model's expert buffer of `layers` layers (its experts of each layer).
  static std::vector<float> experts_of(std::span<const float> whole, int layers, int ep_rank, int ep_size);
  // This rank's.
  std::vector<float> experts_of(std::span<const float> whole) const {
    return experts_of(whole, config_.layers, ep_rank_, ep_size_);
  }
  MoeLayer& layer(int l) { return m_->blocks[l].moe; }
  const GptConfig& config() const { return config_; }
  const MoeConfig& moe_config() const { return moe_; }

 private:
  struct BlockModules {
    LayerNorm ln1;
    CausalSelfAttention attn;
    LayerNorm ln2;
    MoeLayer moe;
    BlockModules(Arena& dense, Arena& experts, const GptConfig& c, const MoeConfig& moe, int ep_size, int ep_rank);
  };
  struct Modules {
    Slice wte, wpe;
    std::vector<BlockModules> blocks;
    LayerNorm lnf;
    Modules(Arena& dense, Arena& experts, const GptConfig& c, const MoeConfig& moe, int ep_size, int ep_rank);
  };
  struct BlockActs {
    LayerNorm::Acts ln1;
    CausalSelfAttention::Acts attn;
    Slice residual;
    LayerNorm::Acts ln2;
    Slice moe_out, out;
    BlockActs(Arena& acts, int B, int T, int C, int NH);
  };
  struct Acts {
    Slice encoded;
    std::vector<BlockActs> blocks;
    LayerNorm::Acts lnf;
    Slice logits, probs, losses;
    Acts(Arena& acts, const GptConfig& c, int B, int T);
  };
  void prepare(int B, int T);
  const float* stream(int layer) const {
    return layer < 0 ? a_->encoded.value : a_->blocks[layer].out.value;
  }
  float* stream_grad(int layer) const { return layer < 0 ? a_->encoded.grad : a_->blocks[layer].out.grad; }
  std::size_t experts_per_layer() const;  // floats of one layer's experts on this rank

  GptConfig config_;
  MoeConfig moe_;
  int ep_size_, ep_rank_;
  Tensor dense_, dense_grads_, experts_, expert_grads_, acts_, grad_acts_;
  std::optional<Modules> m_;
  std::optional<Acts> a_;
  IndexTensor tokens_, targets_;  // the last forward's, on the device
  int B_ = 0, T_ = 0;
};

// The moe lab's training on one rank of an ep group (the visualizer's MoE
// scenario runs the same): every rank draws the same global batch of `batch`
// sequences (one sampler over all of `data`, seeded) and trains on its
// consecutive share, batch / ep, with SGD with momentum on the dense part and
// on the experts apart. On a group of one, it is the one-rank reference.
class MoeTrainer {
 public:
  MoeTrainer(Comm& ep, const GptConfig& config, const MoeConfig& moe, const Sequences& data, int batch,
             std::uint64_t seed, float lr, DeviceKind where = DeviceKind::cpu);
  // Global batch `step`: this rank's share forward and backward, the step
  // taken (MoeGpt::train_step); returns the share's loss.
  float step(int step);
  MoeGpt& model() { return model_; }

 private:
  Comm& ep_;
  const Sequences& data_;
  int batch_;
  DistributedSampler sampler_;
  MoeGpt model_;
  SgdMomentum dense_sgd_, experts_sgd_;
  std::vector<int> x_, y_;
};

}  // namespace labkit
