// A tiny GPT-2 that trains on a CPU or a GPU, laid out the way llm.c's
// train_gpt2.c is: every parameter lives in one flat buffer, every activation
// in another, and forward and backward are a walk down and back up the blocks
// of labkit/modules.h. The training labs (DDP, FSDP, tensor and pipeline
// parallelism) check their parallel runs against this one: to a tolerance, since
// a sum over ranks adds in another order than one rank's sum over the batch.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "labkit/memory.h"
#include "labkit/modules.h"
#include "labkit/optim.h"
#include "labkit/tensor.h"

namespace labkit {

struct GptConfig {
  int max_seq = 32;   // T: the context the model sees
  int vocab = 64;     // V
  int layers = 2;     // L
  int heads = 4;      // NH
  int channels = 64;  // C
  bool operator==(const GptConfig&) const = default;
};
GptConfig gpt_preset(const std::string& name, int vocab);  // "tiny-gpt"
// The model as the memory estimator describes one: GPT-2's shape (LayerNorm,
// biases, a 4C MLP, learned positions, the head tied to the embeddings).
memory::Architecture architecture_of(const GptConfig& config);

// One parameter tensor inside the flat buffer: elements [offset, offset + rows x
// cols), row-major. A Linear's weight is (out, in), as llm.c stores it (GPT-2's
// checkpoints hold the transpose); a bias or a norm's gain is one row. Gradient
// compression (PowerSGD) views each gradient as this matrix.
struct ParameterTensor {
  std::string name;  // GPT-2's: "wte", "h.0.attn.c_attn.weight", "ln_f.bias"
  std::size_t offset = 0;
  int rows = 1, cols = 1;
  std::size_t count() const { return std::size_t(rows) * cols; }
};

class Gpt {
 public:
  // GPT-2's initialisation, seeded and drawn on the host, so a model on the GPU
  // starts from the same weights as one on the CPU.
  Gpt(const GptConfig& config, std::uint64_t seed, DeviceKind where = DeviceKind::cpu);
  Gpt(const Gpt& other);  // a copy with its own buffers
  Gpt& operator=(const Gpt&) = delete;

  // Mean cross-entropy of predicting targets (B,T) from tokens (B,T):
  // queue_forward, then loss().
  float forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);
  // The same forward with the per-token losses left on the device. Reading
  // them (loss()) waits for the device to finish the forward, so a training
  // step on a GPU reads its loss after it has queued its backward: the GPU is
  // not left idle while the host waits, and ranks sharing one GPU queue their
  // steps side by side.
  void queue_forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);
  float loss() const;  // the mean of the last head's per-token losses: the step's one copy to the host
  void zero_grad();
  // Backward of the last forward. on_ready, if given, is called as soon as a
  // range of gradients is final, in the order backward finishes them: the final
  // norm, the layers from last to first, the embeddings (tied to the output
  // head, so they finish last). DDP starts reducing a bucket there.
  void backward(const std::function<void(ParameterRange)>& on_ready = {});
  std::vector<ParameterRange> backward_order() const;  // the ranges on_ready reports, in its order
  ParameterRange layer_range(int layer) const;

  // The pieces of forward and backward, for pipeline stages that each run
  // layers [first, last): forward = prepare, embed (first stage), forward_layers,
  // head (last stage); backward the reverse. What passes between stages is the
  // residual stream, (B,T,C) floats: stream(l) is layer l's output (stream(-1)
  // the embeddings), stream_grad(l) its gradient. A later stage writes its input
  // into stream(first - 1) after prepare; an earlier one its incoming gradient
  // into stream_grad(last - 1) before backward_layers. Both are the model's
  // device memory.
  //
  // A pipeline stage keeps several micro-batches in flight, each with its own
  // activations: prepare sizes `sets` sets of B x T (when the shape or the count
  // changes) and works in `set`, its gradients cleared, for a forward;
  // use_activations goes back to a set, for its backward.
  void prepare(int B, int T, int set = 0, int sets = 1);
  void use_activations(int set);
  // The layers whose activations each set holds (all by default): a stage
  // holds its own, and of the others only their output, the residual stream
  // it receives its input in. Takes effect at the next prepare.
  void hold_layers(std::vector<bool> held);
  void embed(const std::vector<int>& tokens);
  void forward_layers(int first, int last);
  void head(const std::vector<int>& targets);  // final norm, tied output head, per-token losses
  void backward_head();                         // sets stream_grad(L-1); one backward per forward
  // part: both gradients, or the input's then later the weights' (modules.h); on_ready
  // reports a layer once its weights' gradients are final.
  void backward_layers(int first, int last, const std::function<void(ParameterRange)>& on_ready = {},
                       BackwardPart part = BackwardPart::all);
  void backward_embed();  // the embeddings' gradients: weights only
  std::span<float> stream(int layer);
  std::span<float> stream_grad(int layer);

  // Every parameter in one flat buffer (GPT-2's order), and the gradients in
  // another of the same layout: what data parallelism averages and FSDP shards.
  std::size_t parameter_count() const { return params_.size(); }
  // The tensors in that buffer, in its order; together they tile it.
  std::vector<ParameterTensor> tensors() const;
  Tensor& parameters() { return params_; }
  const Tensor& parameters() const { return params_; }
  Tensor& gradients() { return grads_; }
  const Device& device() const { return params_.device(); }
  const GptConfig& config() const { return config_; }
  // Bytes of the activations and their gradients the last forward allocated (every set).
  std::size_t activation_bytes() const { return acts_.bytes() + grad_acts_.bytes(); }
  // FLOPs of one forward and backward pass on B x T tokens (matmuls and attention),
  // and of the forward of one block and of the output head (a backward costs twice).
  double flops_per_step(int B, int T) const;
  double block_flops(int B, int T) const;
  double head_flops(int B, int T) const;

 private:
  // The modules, in GPT-2's parameter order: token and position embeddings
  // (the token table is also the output head), the blocks, the final norm.
  struct Modules {
    Slice wte, wpe;
    std::vector<Block> blocks;
    LayerNorm lnf;
    Modules(Arena& params, const GptConfig& c);
  };
  // The activations of B x T tokens, in forward order.
  struct Acts {
    Slice encoded;
    std::vector<Block::Acts> blocks;
    LayerNorm::Acts lnf;
    Slice logits, probs, losses;
    Acts(Arena& acts, const GptConfig& c, int B, int T, const std::vector<bool>& held);
  };
  void carve();  // point the modules, and the activations at the current set, at this model's buffers
  ParameterRange range_of(Slice start, std::size_t count) const;

  GptConfig config_;
  Tensor params_, grads_, acts_, grad_acts_;     // acts_ and grad_acts_: every set, one after another
  std::vector<IndexTensor> tokens_, targets_;  // by set
  std::optional<Modules> m_;  // views into params_ and grads_
  std::optional<Acts> a_;     // views into the current set of acts_ and grad_acts_, once prepare() has sized them
  std::vector<bool> held_;  // by layer; empty: all
  int B_ = 0, T_ = 0, sets_ = 0, set_ = 0;
  std::size_t set_floats_ = 0;  // one set's activations
};

// The mean of n per-token losses that live on d: the step's one copy to the
// host, the losses summed there in double.
float mean_loss(const Device& d, const float* losses, int n);

// Refuses, before anything is allocated, a batch whose activations and their
// gradients outgrow this machine's memory (its RAM: a lower bound on what the
// run needs), naming the option, what it needs and what there is.
void check_batch_fits(const GptConfig& config, int batch, int T, const std::string& option = "--batch");

// A character-level corpus made here from a small grammar, seeded, so nothing is
// downloaded and every run sees the same text.
std::string synthetic_corpus(std::size_t chars, std::uint64_t seed);

// A text as token ids: each distinct character a token, numbered in byte order.
struct Tokens {
  std::vector<int> ids;
  int vocab = 0;
};
Tokens character_tokens(const std::string& text);

// ---- checkpoints: a training run's state on disk, to go on from it after a crash
// and end exactly where an unbroken run ends.

// What decides the batches besides the step count: a resumed run must keep it.
struct DataOrder {
  std::uint64_t seed = 0;  // the corpus (and the first weights)
  int batch = 0;           // sequences per step
};

// Writes the weights, AdamW's moments, master copy and step count, and `data`
// (with a checksum over them all) to a temporary file beside `path`, then renames
// it over `path`: a run killed while writing leaves the last checkpoint whole.
void save_checkpoint(const std::string& path, const Gpt& model, const AdamW& adamw, const DataOrder& data);

// Loads a checkpoint into model and adamw; training goes on from adamw.step.
// Throws labkit::Error naming the file and the fault: missing, not a checkpoint,
// cut short or corrupt, a model of another shape, or another data order.
void load_checkpoint(const std::string& path, Gpt& model, AdamW& adamw, const DataOrder& data);

}  // namespace labkit
