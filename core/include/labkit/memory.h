// The memory estimator: what training and inference need per GPU.
//
// Sources: the course readings "Chapter 1: Introduction to Modern Distributed AI"
// (its "Estimating Model Resource Requirements": bytes per precision, optimizer
// states, overheads, the KV cache) and the long guide (its "Memory Wall" and
// ZeRO sections), both in book/99-references.md; Rajbhandari et al. 2020 (ZeRO: model
// state (2 + 2 + K) Psi for mixed-precision Adam, K = 12), and Korthikanti et al.
// 2022 (activations per transformer layer, sbh(34 + 5as/h) and its TP,
// sequence-parallel and recomputation forms).
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace labkit::memory {

// ---- storage formats ----------------------------------------------------------
enum class Precision { fp32, bf16, fp16, fp8_e4m3, fp8_e5m2, int8, int4 };
double bytes_per_element(Precision p);  // int4 is half a byte
std::string_view name_of(Precision p);
Precision parse_precision(std::string_view name);  // "bf16", "fp8-e4m3", ...

// ---- architectures and parameter counts ---------------------------------------
// Multi-head latent attention (DeepSeek-V2/V3): queries and keys/values pass
// through low-rank latents; the KV cache holds the latent, not per-head K and V.
struct LatentAttention {
  int q_rank, kv_rank, qk_nope_dim, qk_rope_dim, v_dim;
};

struct Architecture {
  std::string name;
  int layers = 0, hidden = 0, heads = 0, kv_heads = 0;  // kv_heads < heads: GQA
  int ffn = 0;             // FFN width (of one expert, in an MoE layer)
  bool gated_ffn = false;  // SwiGLU: three matrices, not two
  int vocab = 0;
  int positions = 0;       // learned position embeddings (GPT-2/3); 0 = rotary
  bool tied_embeddings = false;
  bool biases = false;     // GPT-style linear biases and LayerNorm; else RMSNorm
  bool dropout = false;    // trained with dropout after attention and the MLP (GPT-2, GPT-3; not LLaMA)
  // Mixture of experts: every layer from `dense_layers` on routes each token to
  // `active_experts` of `experts`, plus `shared_experts` that see every token.
  int experts = 0, active_experts = 0, shared_experts = 0, dense_layers = 0, dense_ffn = 0;
  // Node-limited routing: a token's experts on at most this many nodes (DeepSeek-V3: M = 4); 0: anywhere.
  int node_limit = 0;
  std::optional<LatentAttention> latent = std::nullopt;

  int head_dim() const { return hidden / heads; }
};

struct ParameterCount {
  double total;
  double active;  // per token: differs from total for MoE
};
ParameterCount count_parameters(const Architecture& a);

// One transformer layer's weight tensors in forward order (a norm, the
// attention projections, a norm, the FFN's matrices or the router and each
// expert's), each with its parameters, biases included: what count_parameters
// adds up, and the unit a data-parallel step's gradients become final in (a
// gradient bucket holds whole tensors).
struct WeightTensor {
  std::string_view name;  // "q", "ffn.up", "expert.down", ...
  double count;
  bool routed = false;    // a routed expert's: each token uses active_experts of the experts
};
std::vector<WeightTensor> layer_tensors(const Architecture& a, int layer);

// FLOPs of a layer's last-layer shape on `tokens` tokens of `seq`-long
// sequences: forward, 2 per weight a token meets (layer_tensors: GQA's smaller
// k and v, a gated FFN's third matrix, a routed expert's share) and attention's
// two products, 2 x 2 s h per token; the weights' gradients 2 per weight
// again; the inputs' the rest of a backward that costs twice the forward. For
// GPT-3's layer the three make Narayanan et al.'s (2021) 72 b s h^2 + 12 b s^2 h.
// Attention counts the whole s x s, as that formula and the MFU figures quoted
// with it do; the tiny GPT's Gpt::block_flops counts the causal half its
// kernels compute.
struct LayerFlops {
  double forward, backward_input, backward_weight;
  double total() const { return forward + backward_input + backward_weight; }
};
LayerFlops layer_flops(const Architecture& a, double tokens, double seq);

std::vector<std::string_view> model_presets();
Architecture model_preset(std::string_view name);  // throws with the list of names

// ---- optimizers ---------------------------------------------------------------
struct Optimizer {
  std::string_view name;
  double states;  // optimizer-state tensors per parameter (Adam: m and v = 2)
  std::string_view what;
};
std::span<const Optimizer> optimizers();  // "Chapter 1"'s optimizer table
const Optimizer& find_optimizer(std::string_view name);

// ---- the three formulas of the exercises (solutions/memory/, exercises/memory/) ----
struct ModelStatePrecision {
  Precision weights = Precision::bf16, grads = Precision::bf16, states = Precision::fp32;
  bool master_weights = true;  // an fp32 copy of the weights for the update
};
struct ModelStateBytes {
  double weights, grads, master, optimizer;  // per GPU
  double total() const { return weights + grads + master + optimizer; }
};
// Bytes per GPU for `params` parameters under ZeRO stage 0..3 across `dp` ranks:
// stage 1 shards the optimizer state (with the master weights), 2 also the
// gradients, 3 also the weights (Rajbhandari et al. 2020, Figure 1).
ModelStateBytes model_state_bytes(double params, const ModelStatePrecision& precision, const Optimizer& optimizer,
                                  int zero_stage, int dp);

enum class Recompute { none, selective, full };
Recompute parse_recompute(std::string_view name);  // "none", "selective", "full"

// The formats a layer keeps its saved tensors in.
enum class ActivationPrecision {
  bits16,    // every one 16-bit: Korthikanti et al.'s count, Megatron's mixed precision
  fp32,      // no autocast: what autograd saves, in the model's fp32
  autocast,  // PyTorch's autocast to bf16: the residual stream and the norms' inputs fp32, the
             // matmuls' inputs and outputs bf16, softmax's output fp32 (and the bf16 copy its matmul saves)
};
ActivationPrecision parse_activation_precision(std::string_view name);  // "16", "fp32", "autocast"
std::string_view name_of(ActivationPrecision p);

struct ActivationShape {
  double seq, micro_batch, hidden, heads;  // s, b, h, a
  int tp = 1;                              // tensor-parallel degree t
  bool sequence_parallel = false;
  Recompute recompute = Recompute::none;
  ActivationPrecision precision = ActivationPrecision::bits16;  // layer_activations'; exercise 3.2 counts 16-bit
};
// Bytes one transformer layer keeps for the backward pass, 16-bit activations
// (Korthikanti et al. 2022, Table 2): sbh(34 + 5as/h), and its t, SP and recompute forms.
double activation_bytes_per_layer(const ActivationShape& shape);

// How attention keeps what its backward needs: eager keeps the s x s scores
// (softmax output, and dropout's mask and output where the model has
// dropout); FlashAttention (Dao et al. 2022) keeps only the output and a
// logsumexp per row, and recomputes the scores in backward.
enum class AttentionKernel { eager, flash };
AttentionKernel parse_attention(std::string_view name);  // "eager", "flash"
std::string_view name_of(AttentionKernel k);

// What one layer keeps for backward, counted tensor by tensor as Korthikanti
// et al. (2022, section 4.1) count GPT's, for the model's own architecture:
// GQA's narrower K and V, a gated MLP's four f-wide tensors (gate, up,
// SiLU(gate), their product) against GPT's two, dropout's masks only where the
// model has dropout, the scores only with eager attention; each tensor in the
// shape's precision. An MoE layer keeps its MLP's once per expert a token
// visits. For GPT with eager attention, 16-bit, it is sbh(34 + 5as/h), Table
// 2's row; in fp32 without dropout, 64sbh + 4as^2b (what PyTorch keeps for a
// GPT-2 block); under autocast with FlashAttention, 36sbh.
struct LayerActivations {
  double attention = 0;  // the projections' inputs and outputs, Q, K, V (and FlashAttention's logsumexp)
  double scores = 0;     // eager: softmax's s x s output (and dropout's mask and output)
  double mlp = 0;
  double norms = 0;      // the two norms' inputs
  double total() const { return attention + scores + mlp + norms; }
};
LayerActivations layer_activations(const Architecture& model, const ActivationShape& shape, AttentionKernel kernel,
                                   bool moe_layer);
// Every layer's, dense and MoE.
double activation_bytes(const Architecture& model, const ActivationShape& shape, AttentionKernel kernel);
// What recomputation rebuilds of the largest layer in backward, beyond what it keeps (0 without recomputation).
double recomputed_layer_bytes(const Architecture& model, const ActivationShape& shape, AttentionKernel kernel);

// What a step keeps outside its layers, as PyTorch keeps it for a GPT: the
// final norm's input and output; the loss's log-softmax over the vocabulary
// in fp32 (the logits cast up for F.cross_entropy), with two more such
// buffers, its gradients in and out, at the start of backward; and under
// autocast the bf16 copies of every matmul's weight (the tied embedding's for
// the logits among them), cached at their first use and saved for backward.
struct StepExtras {
  double head = 0;        // the final norm's input and output
  double loss = 0;        // the log-softmax, E x V/t x 4 bytes
  double loss_grads = 0;  // backward's first buffers, 2 x loss
  double weight_copies = 0;
};
StepExtras step_extras(const Architecture& model, const ActivationShape& shape, bool count_loss);

// Which tensors an implementation keeps for backward, and in what format.
enum class ActivationLayout {
  megatron,  // Korthikanti et al.'s count: 16-bit, autograd's saved tensors, dropout masks
  llmc,      // llm.c's (the tiny GPT's): every forward buffer in fp32, each with a gradient buffer beside it
};
ActivationLayout parse_activation_layout(std::string_view name);  // "megatron", "llmc"
// llm.c's buffers for micro-batch b of s tokens, in bytes: per layer 18sbh + 4sb
// + 2as^2b floats (each layer norm's output, mean and 1/std; q, k, v; the scores
// before and after softmax; the attention, MLP and residual outputs; the MLP's
// 4h input and GELU), then the embeddings' output, the final norm, the logits
// and probabilities (sbV each) and the losses; all twice (their gradients), 4 bytes each.
//
// Split t ways as labkit's tensor-parallel GPT splits it (Megatron's layout,
// parallel/tensor_parallel_gpt.h): q, k, v, the scores, the MLP's 4h input and
// GELU (12sbh + 2as^2b) and the logits and probabilities (the vocabulary padded
// to a multiple of t) are 1/t on each rank; the rest (6sbh + 4sb: the norms,
// the projections' outputs, the residual stream) whole. With sequence
// parallelism that rest is 1/t too, and one B x T x h scratch buffer serves
// every gathered input and partial sum (Megatron's: backward gathers the
// norms' outputs again).
double llmc_activation_bytes(const Architecture& a, double seq, double micro_batch, int tp = 1,
                             bool sequence_parallel = false);

struct KvShape {
  double batch, seq, layers, kv_heads, head_dim;
  Precision dtype = Precision::bf16;
};
// K and V for every layer, head and token: 2 x b x s x L x kv_heads x head_dim x bytes.
double kv_cache_bytes(const KvShape& shape);

// ---- the breakdown per GPU ----------------------------------------------------
struct Gpu {
  std::string name;
  double bytes;
};
std::vector<std::string_view> gpu_presets();
Gpu gpu_preset(std::string_view name);  // "h100-80g", "a100-40g", ...

// cuBLAS's and cuBLASLt's workspaces as PyTorch sizes them on Hopper, 32 MiB each.
inline constexpr double kCublasWorkspaceBytes = 64.0 * 1024 * 1024;

struct Plan {
  bool training = true;
  Precision precision = Precision::bf16;     // weights (and activations)
  ModelStatePrecision state;
  std::string optimizer = "adamw";
  int zero = 0;          // 0 = plain DDP
  int dp = 1, tp = 1, pp = 1;
  int shard_group = 0;   // HSDP: ZeRO-3 inside groups of this many ranks, replicas across them
  bool sequence_parallel = false;
  int virtual_stages = 1;  // interleaved 1F1B: each stage's chunks (stage 0 then holds 1 + (pp-1)/(pp v) times more)
  Recompute recompute = Recompute::none;
  AttentionKernel attention = AttentionKernel::eager;
  ActivationLayout activation_layout = ActivationLayout::megatron;
  ActivationPrecision activation_precision = ActivationPrecision::bits16;
  std::optional<bool> dropout;  // the model's own where not given
  bool loss_buffers = false;    // the loss's fp32 log-softmax, and its two gradients at backward's start
  double workspace = 0;         // bytes: cuBLAS's and cuBLASLt's workspaces, allocated at the first matmul
  bool reshard_after_forward = true;  // ZeRO-3: free each layer after its forward (else it stays whole until backward)
  bool prefetch = false;              // ZeRO-3: the next layer gathering while the current one computes
  int hpz = 0;  // ZeRO-3, ZeRO++'s hpZ: every layer's secondary shard over this many GPUs, forward to backward
  double micro_batch = 1, seq = 2048;
  double batch = 1;      // inference: concurrent sequences
  Precision kv_dtype = Precision::bf16;
  std::optional<double> activations;  // bytes per GPU, overriding the formula
  std::optional<double> params;       // overriding the architecture's count (a round "7B")
};
// What the model's shape allows of a plan, refused naming the memory lab's
// option and its value: tensor parallelism gives each rank whole attention
// heads (and splits the KV heads, or copies each to the same number of ranks:
// Megatron-LM, Shoeybi et al. 2019), a pipeline stage holds at least one layer,
// HSDP's shard groups split the data-parallel ranks evenly, and sequence
// parallelism (Korthikanti et al. 2022) has tensor-parallel ranks to shard over.
void check_plan(const Architecture& model, const Plan& plan);
// A what-if run's sequence: `seq` tokens where given (not 0), else the
// model's learned context, else (rotary positions have no fixed context)
// `rotary_default`; where that is 0 too, refused naming --what-if and --seq.
// A model with learned positions has an embedding row for each place in its
// context and none past it, so a longer seq is refused.
double what_if_seq(const Architecture& model, int seq, int rotary_default = 0);

struct Line {
  std::string component;
  double bytes;
  std::string note;
  bool overhead = false;
};

// Memory over one step in the order a step allocates and frees it: the start
// (what lives between steps), the end of forward, the start of backward (the
// loss's gradients), the end of backward (activations freed, every gradient
// made), the optimizer step. Gradients live between steps where a buffer
// keeps them (DDP's buckets, Megatron's contiguous buffer with its master
// weights, a ZeRO shard); otherwise PyTorch frees them (zero_grad's
// set_to_none) and backward makes them again, so that a single GPU's peak
// comes at backward's start, without them (measured: torch.cuda's
// max_memory_allocated for GPT-2 steps, book/03-memory.md).
struct Phase {
  std::string name;
  double bytes;
  std::string holds;
  std::vector<std::string> lines;  // the breakdown's lines it holds (bytes adds the loss's gradients to them)
};
struct Breakdown {
  std::vector<Line> lines;  // components, then overheads
  double peak = 0;          // what the step holds at once of the components (training: its timeline's peak)
  std::vector<Phase> timeline;  // training: the step's phases, in the order it allocates
  std::string peak_at;      // training: the timeline's phase where it falls
  double total = 0;         // the peak and the overheads
  double gpu_bytes = 0;
  double model_state = 0;  // training: weights, gradients, master weights and optimizer states as ZeRO shards them
                           // (its Figure 1), less what FSDP holds whole for a while
  bool fits() const { return total <= gpu_bytes; }
  double bytes_of(std::string_view component) const;  // a component's line, 0 if the plan has none
};
// Training at ZeRO-2 and 3 also holds what FSDP holds whole for a while (Zhao
// et al. 2023, one unit per layer and a root of the embeddings, final norm and
// head): the root's gradients through backward and one layer's until its
// reduce-scatter; at ZeRO-3 the root's weights through the step and one layer's
// while it computes (and the next one's, prefetched; every layer's, forward to
// backward, when not resharded).
Breakdown estimate(const Architecture& model, const Plan& plan, const Gpu& gpu);

std::vector<Phase> step_timeline(const Architecture& model, const Plan& plan);  // estimate(...).timeline
double peak_of(const std::vector<Phase>& timeline);

// The fewest GPUs on which the plan fits, its tensor and pipeline parallelism
// kept: its TP x PP times the data-parallel ranks ZeRO-3 shards over, for
// training; for inference, tensor parallelism in powers of two times its PP.
// 0 if none up to 100,000 ranks or ways.
int gpus_needed(const Architecture& model, Plan plan, const Gpu& gpu);

// "Chapter 1"'s decision framework (its "Decision Framework: When Do You Need
// Distributed Systems?"): which parallelism, and why.
struct Recommendation {
  std::string strategy;
  std::vector<std::string> reasons;
  int tp = 1, pp = 1, dp = 1;  // the layout it recommends (0 when nothing fits); a replica per GPU group for inference
  int gpus() const { return tp * pp * dp; }
};
Recommendation recommend(const Architecture& model, const Plan& plan, const Gpu& gpu, int gpus, int gpus_per_node);

}  // namespace labkit::memory
