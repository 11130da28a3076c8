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
// projections, and two backward, before ln1 and ln2 get their gradients: four
// allreduces of b s h per layer (Shoeybi et al. 2019, Figure 4). The whole
// tensors get the same gradient on every rank, since what flows into them is
// replicated.
//
// Sequence parallelism (Korthikanti et al. 2022, section 4.2.2): what runs
// between the tensor-parallel regions (the norms, the residual adds) runs on
// a shard of the sequence, rank r positions [r T/t, (r+1) T/t) of every
// sequence, so those activations take 1/t of the memory. f becomes an
// all-gather of the shards forward (a reduce-scatter backward) and g a
// reduce-scatter of the partial sums (an all-gather backward): the same
// bytes as the allreduce they replace, which is a reduce-scatter and an
// all-gather. The norms' gradients, each rank's from its positions, are
// summed over the group after backward.
//
// What a rank allocates it tells its memory tracker (Comm::track_memory): its
// weights and gradients, and its activations as a forward sizes them.
//
// On the device the dense model was built on: the vocabulary slice's
// embedding and cross-entropy are device ops (labkit/ops.h), and what crosses
// to the host is the N losses, for their mean.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"
#include "labkit/memory.h"
#include "labkit/modules.h"
#include "labkit/tensor.h"

namespace labkit {

// The tensor-parallel group as its layers see it: B sequences of T
// positions, whole on every rank, or with sequence parallelism each rank's
// T/t positions of each ("rows") between the layers; scratch (B T C floats)
// for exercise 7.3's pair.
struct TensorParallelGroup {
  Comm& comm;
  const Device& device;
  int B = 0, T = 0;
  bool sequence_parallel = false;
  View scratch;
};

// Exercise 7.3's pair on a group's (B T, width) activations, as the layers
// call it with sequence parallelism: every rank's rows all-gathered into
// whole, and whole's partial sums reduce-scattered into this rank's rows.
void all_gather_rows(const TensorParallelGroup& g, int width, const float* rows, float* whole);
void reduce_scatter_rows(const TensorParallelGroup& g, int width, float* whole, float* rows);

// Exercise 7.1, Megatron's column-parallel Linear (this rank's layer.out of
// the output features, whole input). Forward: f, then out (B T, out) =
// input W_r^T + b_r; f is the identity (rows is whole), or with sequence
// parallelism the all-gather of every rank's rows into whole. Backward: with
// sequence parallelism whole was not kept, so the rows are gathered into it
// again; then the weight and bias gradients, dwhole = dout W_r (dwhole starts
// at zero), and f's backward into drows: an allreduce in place (drows is
// dwhole), or the reduce-scatter.
void column_parallel_forward(const TensorParallelGroup& g, const Linear& layer, float* out, const float* rows,
                             float* whole);
void column_parallel_backward(const TensorParallelGroup& g, const Linear& layer, float* dwhole, float* drows,
                              const float* dout, const float* rows, float* whole);
// Exercise 7.2, Megatron's row-parallel Linear forward (this rank's layer.in
// of the input features, bias whole): partial (B T, out) = input_r W_r^T, the
// bias added once; then g sums the ranks' partials into rows: an allreduce in
// place (rows is partial), or with sequence parallelism the reduce-scatter.
void row_parallel_forward(const TensorParallelGroup& g, const Linear& layer, float* partial, float* rows,
                          const float* input);

// Exercise 7.3, sequence parallelism's f and g: rows (B, T/t, C), this
// rank's positions [r T/t, (r+1) T/t) of each sequence, gathered from every
// rank of `comm` into whole (B, T, C); and whole's partial sums summed over
// the ranks into each rank's rows. scratch: B T C floats, the collectives'
// rank-major order.
void all_gather_sequence(Comm& comm, View rows, View whole, View scratch, int B, int T, int C);
void reduce_scatter_sequence(Comm& comm, View whole, View rows, View scratch, int B, int T, int C);

// Why t tensor-parallel ranks cannot split a model's layer ("" if they can):
// heads, kv heads or the MLP's width that t does not divide, since each rank
// takes whole heads, whole key-value groups and a column-parallel slice of the
// MLP (Megatron-LM, Shoeybi et al. 2019). TensorParallelGpt's constructor
// refuses with it; the tp lab, before any rank starts, after the option that
// set t ("--ranks 3: ...", "--tp 3: ...").
std::string tensor_parallel_refusal(const memory::Architecture& a, int t);
// Why sequence parallelism cannot shard a sequence of T tokens over t ranks ("" if it can).
std::string sequence_parallel_refusal(int T, int t);

class TensorParallelGpt {
 public:
  // Every rank of `tp` built `dense` from the same seed; this rank keeps its
  // slice of it. Heads, and so channels and the MLP's width, must divide by
  // the group's size; with sequence_parallel, the sequence too.
  TensorParallelGpt(Comm& tp, const Gpt& dense, bool sequence_parallel = false);

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
  // Bytes of the activations and their gradients the last forward allocated
  // (memory::llmc_activation_bytes with this split counts them).
  std::size_t activation_bytes() const { return acts_.bytes() + grad_acts_.bytes(); }
  int padded_vocab() const { return vocab_local_ * tp_.size(); }
  const GptConfig& config() const { return config_; }

 private:
  struct BlockModules {
    LayerNorm ln1;
    Linear qkv, proj;  // column- and row-parallel
    LayerNorm ln2;
    Linear fc, fc_proj;  // column- and row-parallel
    BlockModules(Arena& params, int C, int t);
  };
  struct Modules {
    Slice wte, wpe;  // wte: this rank's V'/t rows
    std::vector<BlockModules> blocks;
    LayerNorm lnf;
    Modules(Arena& params, const GptConfig& c, int vocab_local, int t);
  };
  // Rows: the B x T tokens, or with sequence parallelism this rank's shard of
  // them ("rows" below). Without it, a gathered input is the norm's output
  // itself and the partial sums are summed in place (the same slices). With
  // it, every "all B x T" slice is one scratch buffer, Acts::whole, as in
  // Megatron: a partial sum lives only until its reduce-scatter, and a
  // gathered input until its column-parallel layer has used it (backward
  // gathers it again), so a rank keeps no whole B x T x C activation.
  struct BlockActs {
    LayerNorm::Acts ln1;                // rows
    Slice ln1_gathered;                 // all B x T: the column-parallel QKV's input
    Slice qkv, heads_out, preatt, att;  // this rank's heads
    Slice attn_out;                     // rows
    Slice attn_partial;                 // all B x T: the row-parallel projection's partial sums
    Slice residual;                     // rows
    LayerNorm::Acts ln2;                // rows
    Slice ln2_gathered;                 // all B x T
    Slice hidden, gelu;                 // this rank's 4C/t features
    Slice mlp_out;                      // rows
    Slice mlp_partial;                  // all B x T
    Slice out;                          // rows
    BlockActs(Arena& acts, int B, int T, int C, int NH, int t, const Slice* whole);
  };
  struct Acts {
    Slice whole;                  // sequence parallelism: the all B x T scratch (none without it)
    Slice encoded;                // rows
    Slice embed_partial;          // all B x T: each rank's vocabulary rows' lookups
    std::vector<BlockActs> blocks;
    LayerNorm::Acts lnf;          // rows
    Slice lnf_gathered;           // all B x T: the head's input
    Slice logits, probs, losses;  // logits, probs: this rank's V'/t columns
    Acts(Arena& acts, const GptConfig& c, int B, int T, int vocab_local, int t, bool sp);
  };
  void prepare(int B, int T);
  TensorParallelGroup group() { return {tp_, params_.device(), B_, T_, sequence_parallel_, view_of(shuffled_)}; }
  void all_reduce(float* x, std::size_t n, ReduceOp op = ReduceOp::sum);
  // f forward, g backward: rows of every rank, whole (with sequence parallelism; else nothing to do).
  void gather_rows(const float* rows, float* whole);
  // g forward, f backward: the ranks' partial sums over all B x T, summed into
  // this rank's rows (allreduce in place, or with sequence parallelism reduce-scatter).
  void sum_partials(float* whole, float* rows);
  void clear_whole_gradient();
  void sum_norm_gradients();  // sequence parallelism: each rank's positions' share, summed
  int rows() const { return sequence_parallel_ ? B_ * T_ / tp_.size() : B_ * T_; }
  float* stream(int layer) const;  // layer l's output; -1: the embeddings
  float* stream_grad(int layer) const;
  void forward_block(int l);
  void backward_block(int l);
  float vocab_parallel_cross_entropy(const std::vector<int>& targets);

  Comm& tp_;
  bool sequence_parallel_;
  GptConfig config_;
  int vocab_local_;
  std::vector<ParameterTensor> dense_tensors_;  // the dense model's layout, which slice_of_dense cuts
  Tensor params_, grads_, acts_, grad_acts_;
  std::optional<Modules> m_;
  std::optional<Acts> a_;
  IndexTensor tokens_, targets_;  // the last forward's, on the device
  Tensor largest_, sums_;         // the cross-entropy's per-row max, and its sums (B x T, 2 B x T)
  Tensor shuffled_;               // sequence parallelism: the pair's scratch, B x T x C
  int B_ = 0, T_ = 0;
};

}  // namespace labkit
