// A tiny GPT-2 that trains on a CPU, written the way llm.c's train_gpt2.c is:
// every parameter tensor lives in one flat buffer, every activation in another,
// and forward and backward are a walk down and back up the layers calling the
// ops of labkit/ops.h. The training labs (DDP, FSDP, tensor and pipeline
// parallelism) check their parallel runs against this one, to the bit.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

namespace labkit {

struct GptConfig {
  int max_seq = 32;   // T: the context the model sees
  int vocab = 64;     // V
  int layers = 2;     // L
  int heads = 4;      // NH
  int channels = 64;  // C
};
GptConfig gpt_preset(const std::string& name, int vocab);  // "tiny-gpt"

// A run of the flat parameter (and gradient) buffer: one layer, or the embeddings.
struct ParameterRange {
  std::size_t offset, count;
};

class Gpt {
 public:
  Gpt(const GptConfig& config, std::uint64_t seed);  // GPT-2's initialisation, seeded

  // Mean cross-entropy of predicting targets (B,T) from tokens (B,T).
  float forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T);
  void zero_grad();
  // Backward of the last forward. on_ready, if given, is called as soon as a
  // range of gradients is final, in the order backward finishes them: the final
  // norm, the layers from last to first, the embeddings (tied to the output
  // head, so they finish last). DDP starts reducing a bucket there.
  void backward(const std::function<void(ParameterRange)>& on_ready = {});
  ParameterRange layer_range(int layer) const;

  // The pieces of forward and backward, for pipeline stages that each run
  // layers [first, last): forward = prepare, embed (first stage), forward_layers,
  // head (last stage); backward the reverse. What passes between stages is the
  // residual stream, (B,T,C) floats: stream(l) is layer l's output (stream(-1)
  // the embeddings), stream_grad(l) its gradient. A later stage writes its input
  // into stream(first - 1) after prepare; an earlier one its incoming gradient
  // into stream_grad(last - 1) before backward_layers.
  void prepare(int B, int T);  // size the activations for B x T, clear their gradients
  void embed(const std::vector<int>& tokens);
  void forward_layers(int first, int last);
  float head(const std::vector<int>& targets);  // final norm, tied output head, mean loss
  void backward_head();                         // sets stream_grad(L-1); one backward per forward
  void backward_layers(int first, int last, const std::function<void(ParameterRange)>& on_ready = {});
  void backward_embed();
  std::span<float> stream(int layer);
  std::span<float> stream_grad(int layer);

  // Every parameter in one flat buffer (GPT-2's order), and the gradients in
  // another of the same layout: what data parallelism averages and FSDP shards.
  std::size_t parameter_count() const { return params_.size(); }
  std::vector<float>& parameters() { return params_; }
  std::vector<float>& gradients() { return grads_; }
  // Bytes of the activations and their gradients the last forward allocated.
  std::size_t activation_bytes() const { return (acts_.size() + grad_acts_.size()) * sizeof(float); }
  // FLOPs of one forward and backward pass on B x T tokens (matmuls and attention).
  double flops_per_step(int B, int T) const;

 private:
  struct Tensors;  // pointers into a flat buffer, in GPT-2's order
  GptConfig config_;
  std::vector<float> params_, grads_, acts_, grad_acts_;
  std::vector<int> tokens_, targets_;
  int B_ = 0, T_ = 0;
};

// A character-level corpus made here from a small grammar, seeded, so nothing is
// downloaded and every run sees the same text.
std::string synthetic_corpus(std::size_t chars, std::uint64_t seed);

}  // namespace labkit
