#include "labkit/memory.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <stdexcept>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "labkit/error.h"

namespace labkit::memory {

namespace {
constexpr double GB = 1e9;
std::string gb(double bytes) { return fmt::format("{:.1f} GB", bytes / GB); }

struct PrecisionInfo {
  Precision precision;
  std::string_view name;
  double bytes;
};
constexpr std::array kPrecisions = {
    PrecisionInfo{Precision::fp32, "fp32", 4},         PrecisionInfo{Precision::bf16, "bf16", 2},
    PrecisionInfo{Precision::fp16, "fp16", 2},         PrecisionInfo{Precision::fp8_e4m3, "fp8-e4m3", 1},
    PrecisionInfo{Precision::fp8_e5m2, "fp8-e5m2", 1}, PrecisionInfo{Precision::int8, "int8", 1},
    PrecisionInfo{Precision::int4, "int4", 0.5}};

// The optimizer table of "Chapter 1: Introduction to Modern Distributed AI"
// (book/99-references.md), states per parameter.
constexpr std::array kOptimizers = {
    Optimizer{"sgd", 0, "none (the learning rate is a scalar)"},
    Optimizer{"momentum", 1, "velocity v"},
    Optimizer{"nesterov", 1, "velocity v"},
    Optimizer{"adagrad", 1, "sum of squared gradients"},
    Optimizer{"rmsprop", 1, "second moment v"},
    Optimizer{"adam", 2, "first and second moments m, v"},
    Optimizer{"adamw", 2, "first and second moments m, v"},
    Optimizer{"adafactor", 0.5, "factored row and column statistics (~0.5x)"},
    Optimizer{"lamb", 2, "first and second moments m, v"},
    Optimizer{"lion", 1, "first moment m only"},
    Optimizer{"nadam", 2, "first and second moments m, v"},
    Optimizer{"amsgrad", 3, "m, v and the running max of v"},
    Optimizer{"adabelief", 2, "m and the belief term s"},
};
}  // namespace

double bytes_per_element(Precision p) { return kPrecisions[int(p)].bytes; }
std::string_view name_of(Precision p) { return kPrecisions[int(p)].name; }

Precision parse_precision(std::string_view name) {
  for (const PrecisionInfo& p : kPrecisions)
    if (p.name == name) return p.precision;
  throw std::invalid_argument(
      fmt::format("unknown precision '{}' (fp32, bf16, fp16, fp8-e4m3, fp8-e5m2, int8, int4)", name));
}

ActivationLayout parse_activation_layout(std::string_view name) {
  if (name == "megatron") return ActivationLayout::megatron;
  if (name == "llmc") return ActivationLayout::llmc;
  throw std::invalid_argument(fmt::format("unknown activation layout '{}' (megatron, llmc)", name));
}

Recompute parse_recompute(std::string_view name) {
  if (name == "none") return Recompute::none;
  if (name == "selective") return Recompute::selective;
  if (name == "full") return Recompute::full;
  throw std::invalid_argument(fmt::format("unknown recomputation '{}' (none, selective, full)", name));
}

AttentionKernel parse_attention(std::string_view name) {
  if (name == "eager") return AttentionKernel::eager;
  if (name == "flash") return AttentionKernel::flash;
  throw std::invalid_argument(fmt::format("unknown attention '{}' (eager, flash)", name));
}

std::string_view name_of(AttentionKernel k) { return k == AttentionKernel::eager ? "eager" : "flash"; }

ActivationPrecision parse_activation_precision(std::string_view name) {
  if (name == "16") return ActivationPrecision::bits16;
  if (name == "fp32") return ActivationPrecision::fp32;
  if (name == "autocast") return ActivationPrecision::autocast;
  throw std::invalid_argument(fmt::format("unknown activation precision '{}' (16, fp32, autocast)", name));
}

std::string_view name_of(ActivationPrecision p) {
  return p == ActivationPrecision::bits16 ? "16-bit" : p == ActivationPrecision::fp32 ? "fp32" : "autocast";
}

std::span<const Optimizer> optimizers() { return kOptimizers; }

const Optimizer& find_optimizer(std::string_view name) {
  for (const Optimizer& o : kOptimizers)
    if (o.name == name) return o;
  std::string names;
  for (const Optimizer& o : kOptimizers) names += fmt::format("{}{}", names.empty() ? "" : ", ", o.name);
  throw std::invalid_argument(fmt::format("unknown optimizer '{}' ({})", name, names));
}

// ---- parameter counts ---------------------------------------------------------

LayerFlops layer_flops(const Architecture& a, double tokens, double seq) {
  double weights = 0;  // per token
  for (const WeightTensor& w : layer_tensors(a, a.layers - 1))
    weights += w.routed ? w.count * a.active_experts / a.experts : w.count;
  const double forward = 2 * weights * tokens + 4 * seq * a.hidden * tokens, weight_gradients = 2 * weights * tokens;
  return {forward, 2 * forward - weight_gradients, weight_gradients};
}

std::vector<WeightTensor> layer_tensors(const Architecture& a, int layer) {
  const double h = a.hidden, norm = a.biases ? 2 * h : h;  // LayerNorm: weight and bias; RMSNorm: weight
  const double bias = a.biases ? 1 : 0;
  std::vector<WeightTensor> t = {{"norm.attention", norm}};
  if (a.latent) {
    const LatentAttention& m = *a.latent;
    const double qk = m.qk_nope_dim + m.qk_rope_dim;
    t.push_back({"q (latent)", h * m.q_rank + m.q_rank + m.q_rank * a.heads * qk});     // queries through their latent
    t.push_back({"kv (latent)", h * (m.kv_rank + m.qk_rope_dim) + m.kv_rank             // the shared KV latent, rope key
                                    + m.kv_rank * a.heads * (m.qk_nope_dim + m.v_dim)});  // keys and values from it
    t.push_back({"o", a.heads * m.v_dim * h});
  } else {
    const double kv = double(a.kv_heads) * a.head_dim();  // GQA: fewer key and value heads
    t.insert(t.end(), {{"q", h * h + bias * h}, {"k", h * kv + bias * kv}, {"v", h * kv + bias * kv},
                       {"o", h * h + bias * h}});
  }
  t.push_back({"norm.ffn", norm});
  // An FFN of `width`: up and down (and SwiGLU's gate); `routed` for an expert's.
  auto ffn = [&](double width, std::string_view up, std::string_view down, std::string_view gate, bool routed) {
    if (a.gated_ffn) t.push_back({gate, h * width, routed});
    t.push_back({up, h * width + bias * width, routed});
    t.push_back({down, width * h + bias * h, routed});
  };
  if (a.experts == 0 || layer < a.dense_layers) {
    ffn(a.experts ? a.dense_ffn : a.ffn, "ffn.up", "ffn.down", "ffn.gate", false);
  } else {
    t.push_back({"router", h * a.experts});
    for (int e = 0; e < a.experts; ++e) ffn(a.ffn, "expert.up", "expert.down", "expert.gate", true);
    for (int e = 0; e < a.shared_experts; ++e) ffn(a.ffn, "shared.up", "shared.down", "shared.gate", false);
  }
  return t;
}

ParameterCount count_parameters(const Architecture& a) {
  double total = 0, active = 0;
  for (int layer = 0; layer < a.layers; ++layer)
    for (const WeightTensor& t : layer_tensors(a, layer)) {
      total += t.count;
      active += t.routed ? t.count * a.active_experts / a.experts : t.count;
    }
  const double h = a.hidden, norm = a.biases ? 2 * h : h;
  const double embeddings = double(a.vocab) * h + double(a.positions) * h + norm  // + the final norm
                            + (a.tied_embeddings ? 0 : double(a.vocab) * h);     // the output head
  return {total + embeddings, active + embeddings};
}

namespace {
// Published configurations: GPT-2 (Radford et al. 2019, HF configs), GPT-3
// (Brown et al. 2020, Table 2.1), LLaMA-2 (Touvron et al. 2023), Mixtral
// (Jiang et al. 2024), DeepSeek-V3 (DeepSeek-AI 2024, HF config).
Architecture gpt2(std::string name, int layers, int hidden, int heads) {
  return {.name = std::move(name), .layers = layers, .hidden = hidden, .heads = heads, .kv_heads = heads,
          .ffn = 4 * hidden, .vocab = 50257, .positions = 1024, .tied_embeddings = true, .biases = true,
          .dropout = true};
}
Architecture llama2(std::string name, int layers, int hidden, int heads, int kv_heads, int ffn) {
  return {.name = std::move(name), .layers = layers, .hidden = hidden, .heads = heads, .kv_heads = kv_heads,
          .ffn = ffn, .gated_ffn = true, .vocab = 32000};
}
std::vector<Architecture> presets() {
  std::vector<Architecture> p = {
      gpt2("gpt2", 12, 768, 12), gpt2("gpt2-medium", 24, 1024, 16), gpt2("gpt2-large", 36, 1280, 20),
      gpt2("gpt2-xl", 48, 1600, 25),
      llama2("llama2-7b", 32, 4096, 32, 32, 11008), llama2("llama2-13b", 40, 5120, 40, 40, 13824),
      llama2("llama2-70b", 80, 8192, 64, 8, 28672)};
  // GPT-3 and the other shapes of Korthikanti et al. (2022, Table 3): 22B, MT-NLG's 530B (Smith et
  // al. 2022), 1T; Megatron pads GPT-2's vocabulary to 51,200.
  for (auto [name, layers, hidden, heads] : {std::tuple{"gpt3-175b", 96, 12288, 96}, {"gpt-22b", 48, 6144, 64},
                                             {"mt-nlg-530b", 105, 20480, 128}, {"gpt-1t", 128, 25600, 160}}) {
    Architecture a = gpt2(name, layers, hidden, heads);
    a.positions = 2048;
    if (a.name != "gpt3-175b") a.vocab = 51200;
    p.push_back(a);
  }
  Architecture mixtral = llama2("mixtral-8x7b", 32, 4096, 32, 8, 14336);
  mixtral.experts = 8;
  mixtral.active_experts = 2;
  p.push_back(mixtral);
  p.push_back({.name = "deepseek-v3", .layers = 61, .hidden = 7168, .heads = 128, .kv_heads = 128, .ffn = 2048,
               .gated_ffn = true, .vocab = 129280, .experts = 256, .active_experts = 8, .shared_experts = 1,
               .dense_layers = 3, .dense_ffn = 18432, .node_limit = 4,
               .latent = LatentAttention{1536, 512, 128, 64, 128}});
  return p;
}
}  // namespace

std::vector<std::string_view> model_presets() {
  static const std::vector<Architecture> all = presets();
  std::vector<std::string_view> names;
  for (const Architecture& a : all) names.push_back(a.name);
  return names;
}

Architecture model_preset(std::string_view name) {
  for (Architecture& a : presets())
    if (a.name == name) return a;
  std::string names;
  for (std::string_view n : model_presets()) names += fmt::format("{}{}", names.empty() ? "" : ", ", n);
  throw std::invalid_argument(fmt::format("unknown model '{}' ({})", name, names));
}

// ---- GPUs ---------------------------------------------------------------------

namespace {
constexpr double MiB = 1024.0 * 1024.0;
// Usable memory as nvidia-smi reports it: a little under the marketing figure.
const std::vector<Gpu>& gpus() {
  static const std::vector<Gpu> all = {{"h100-80g", 81559 * MiB}, {"h200-141g", 143771 * MiB},
                                       {"a100-80g", 81920 * MiB}, {"a100-40g", 40960 * MiB},
                                       {"l40s-48g", 46068 * MiB}, {"rtx4090-24g", 24564 * MiB}};
  return all;
}
}  // namespace

std::vector<std::string_view> gpu_presets() {
  std::vector<std::string_view> names;
  for (const Gpu& g : gpus()) names.push_back(g.name);
  return names;
}

Gpu gpu_preset(std::string_view name) {
  for (const Gpu& g : gpus())
    if (g.name == name) return g;
  throw std::invalid_argument(fmt::format("unknown gpu '{}' (h100-80g, h200-141g, a100-80g, a100-40g, l40s-48g, "
                                          "rtx4090-24g)", name));
}

double llmc_activation_bytes(const Architecture& a, double seq, double micro_batch, int tp, bool sequence_parallel) {
  const double t = tp, sb = seq * micro_batch, sbh = sb * a.hidden;
  const double kept = sequence_parallel ? sb / t : sb;  // rows of the norms and the residual stream
  const double scratch = sequence_parallel ? sbh : 0;   // SP: one whole B x T x h buffer, every layer's f and g
  const double layer = 6 * kept * a.hidden + 4 * kept + (12 * sbh + 2 * a.heads * seq * sb) / t;
  const double vocab = std::ceil(a.vocab / t);  // each rank's rows of the padded vocabulary
  const double outside = scratch + kept * a.hidden + (kept * a.hidden + 2 * kept) + 2 * sb * vocab + sb;
  return 2 * (a.layers * layer + outside) * sizeof(float);
}

// ---- the breakdown ------------------------------------------------------------

namespace {
// The overheads of "Chapter 1" (its "Real-World Considerations").
constexpr double kFramework = 2 * GB;      // CUDA context and PyTorch allocator: 1-2 GB
constexpr double kCommBuffers = 4 * GB;    // NCCL buffers when distributed: 2-5 GB
constexpr double kSafetyMargin = 0.20;     // fragmentation and spikes: 10-20% for training, 20-30% to be safe

double kv_cache(const Architecture& a, const Plan& p) {
  if (a.latent)  // MLA caches the compressed latent and the rope key, shared by all heads
    return p.batch * p.seq * a.layers * (a.latent->kv_rank + a.latent->qk_rope_dim) * bytes_per_element(p.kv_dtype);
  return kv_cache_bytes({p.batch, p.seq, double(a.layers), double(a.kv_heads), double(a.head_dim()), p.kv_dtype});
}

// FSDP's units, in parameters per GPU: the root (all but the layers) and the largest layer.
struct Units {
  double root = 0, layer = 0;
};
Units fsdp_units(const Architecture& a, double local_parameters) {
  double layers = 0, largest = 0;
  for (int l = 0; l < a.layers; ++l) {
    double count = 0;
    for (const WeightTensor& t : layer_tensors(a, l)) count += t.count;
    layers += count;
    largest = std::max(largest, count);
  }
  const double scale = local_parameters / count_parameters(a).total;  // a round "7B", or split by tp x pp
  return {(count_parameters(a).total - layers) * scale, largest * scale};
}

// The overheads' lines, and the total: the components' `peak` (their sum
// where everything is held at once, as serving holds it) and the overheads.
void add_overheads(Breakdown& b, bool distributed, double peak) {
  double base = 0;
  for (const Line& l : b.lines) base += l.bytes;
  b.lines.push_back({"framework (CUDA context, allocator)", kFramework, "reading: 1-2 GB", true});
  if (distributed) b.lines.push_back({"communication buffers", kCommBuffers, "reading: 2-5 GB per GPU", true});
  b.lines.push_back({"safety margin", kSafetyMargin * base, "20% of model state and activations: fragmentation, spikes",
                     true});
  b.peak = b.total = peak;
  for (const Line& l : b.lines)
    if (l.overhead) b.total += l.bytes;
}

double sum_of_lines(const Breakdown& b) {
  double sum = 0;
  for (const Line& l : b.lines) sum += l.bytes;
  return sum;
}
}  // namespace

void check_plan(const Architecture& m, const Plan& p) {
  if (m.heads % p.tp != 0) {
    std::vector<int> divisors;
    for (int d = 1; d <= m.heads; ++d)
      if (m.heads % d == 0) divisors.push_back(d);
    throw Error(fmt::format("--tp {}: each rank takes whole attention heads, and {} has {}: --tp must divide {} ({})",
                            p.tp, m.name, m.heads, m.heads, fmt::join(divisors, ", ")));
  }
  if (!m.latent && m.kv_heads % p.tp != 0 && p.tp % m.kv_heads != 0)
    throw Error(fmt::format("--tp {}: {}'s {} KV heads neither split evenly over {} ranks nor copy evenly to them",
                            p.tp, m.name, m.kv_heads, p.tp));
  if (p.pp > m.layers)
    throw Error(fmt::format("--pp {}: {} has {} layers, and each pipeline stage needs at least one", p.pp, m.name,
                            m.layers));
  // Megatron-LM's rule (num_layers divisible by the pipeline size): the stages hold equal layers.
  if (m.layers % p.pp != 0)
    throw Error(fmt::format("--pp {}: {}'s {} layers do not cut into {} equal stages", p.pp, m.name, m.layers, p.pp));
  if (p.shard_group == 1 && p.training)  // as the FSDP lab refuses it
    throw Error("--hsdp 1: groups of one rank shard nothing, and every rank holds all of ZeRO's state, as --zero 0 "
                "does (drop --hsdp)");
  if (p.shard_group > 0 && p.dp % p.shard_group != 0)
    throw Error(fmt::format("--hsdp {}: shard groups must split --dp {} evenly", p.shard_group, p.dp));
  if (p.shard_group > 0 && p.training && p.zero == 0)
    throw Error(fmt::format("--hsdp {}: hybrid sharding shards ZeRO's model state within groups of {} and "
                            "replicates it across them, and --zero 0 shards nothing (add --zero 1, 2 or 3)",
                            p.shard_group, p.shard_group));
  if (p.sequence_parallel && p.tp == 1)
    throw Error("--sp: sequence parallelism splits the norms' and dropouts' activations over the tensor-parallel "
                "ranks; with --tp 1 there are none to split over (add --tp)");
  if (p.virtual_stages > 1 && (p.pp == 1 || m.layers % (p.pp * p.virtual_stages) != 0))
    throw Error(fmt::format("--virtual {}: an interleaved schedule gives each of --pp {} stages {} chunks of equal "
                            "layers, and {} has {}", p.virtual_stages, p.pp, p.virtual_stages, m.name, m.layers));
}

double what_if_seq(const Architecture& model, int seq, int rotary_default) {
  if (model.positions > 0 && seq > model.positions)
    throw Error(fmt::format("--seq {}: {} learns {} positions, an embedding row for each place in a sequence, and "
                            "has none past them (give --seq {} or less)",
                            seq, model.name, model.positions, model.positions));
  if (seq) return seq;
  if (model.positions > 0) return model.positions;
  if (!rotary_default)
    throw Error(fmt::format("--what-if {}: the model has rotary positions and no fixed context: give --seq",
                            model.name));
  return rotary_default;
}

namespace {

// The model as the plan trains it (dropout on or off), and the shape of what its layers keep.
Architecture as_trained(const Architecture& model, const Plan& p) {
  Architecture m = model;
  if (p.dropout) m.dropout = *p.dropout;
  return m;
}

// Interleaved 1F1B's first stage holds 1 + (p - 1)/(p v) times 1F1B's
// activations (Narayanan et al. 2021; Korthikanti et al. 2022, section 4.2.3).
double interleaving_factor(const Plan& p) {
  return p.virtual_stages > 1 ? 1 + double(p.pp - 1) / (double(p.pp) * p.virtual_stages) : 1;
}

ActivationShape activation_shape(const Architecture& m, const Plan& p) {
  return {p.seq, p.micro_batch, double(m.hidden), double(m.heads), p.tp, p.sequence_parallel, p.recompute,
          p.activation_precision};
}

// The step in the order it allocates, from the breakdown's lines (step_timeline):
// each phase holds some of them, and backward's start the loss's gradients too.
std::vector<Phase> timeline_of(const Breakdown& b, const Plan& plan, double loss_grads) {
  const auto phase = [&](std::string name, std::string holds, std::vector<std::string> lines, double more = 0) {
    double bytes = more;
    for (const std::string& line : lines) bytes += b.bytes_of(line);
    return Phase{std::move(name), bytes, std::move(holds), std::move(lines)};
  };
  // A buffer keeps the gradients between steps (DDP's buckets, Megatron's with its master weights, ZeRO's
  // shards); else zero_grad(set_to_none) frees them and backward makes them again.
  const bool grads_kept = plan.state.master_weights || plan.dp > 1;
  const std::vector<std::string> lasting = {"weights", "master weights", "optimizer states", "workspaces"};
  std::vector<std::string> between = lasting, with_grads = lasting;
  if (grads_kept) between.push_back("gradients");
  with_grads.push_back("gradients");
  std::vector<std::string> in_forward = between;
  in_forward.insert(in_forward.end(), {"gathered weights", "prefetched weights", "activations", "final norm and loss",
                                       "autocast weight copies"});
  const std::string state = grads_kept ? "weights, optimizer states and gradients" : "weights and optimizer states";
  std::vector<Phase> phases = {phase("start of step", state + (b.bytes_of("workspaces") ? ", workspaces" : ""), between),
                               phase("forward", "+ activations", in_forward)};
  if (loss_grads > 0)
    phases.push_back(phase("backward starts", "+ the loss's gradients (s x b x V, twice)", in_forward, loss_grads));
  if (b.bytes_of("recomputed layer") > 0) {
    std::vector<std::string> recomputing = in_forward;
    recomputing.push_back("recomputed layer");
    phases.push_back(phase("recomputing", "+ a layer's activations, rebuilt in backward", recomputing));
  }
  if (!grads_kept) phases.push_back(phase("backward ends", "activations freed, every gradient made", with_grads));
  phases.push_back(phase("optimizer step", "activations freed; gradients and states update the weights", with_grads));
  return phases;
}

}  // namespace

Breakdown estimate(const Architecture& trained, const Plan& p, const Gpu& gpu) {
  const Architecture model = as_trained(trained, p);
  Breakdown b;
  b.gpu_bytes = gpu.bytes;
  const ParameterCount params = p.params ? ParameterCount{*p.params, *p.params} : count_parameters(model);
  const double model_parallel = double(p.tp) * p.pp;
  const double local = params.total / model_parallel;
  const std::string split = model_parallel > 1 ? fmt::format(", / (tp {} x pp {})", p.tp, p.pp) : "";
  if (!p.training) {
    b.lines.push_back({"weights", local * bytes_per_element(p.precision),
                       fmt::format("{:.2f}B params x {} B ({}){}", params.total / 1e9, bytes_per_element(p.precision),
                                   name_of(p.precision), split)});
    // Tensor parallelism splits KV heads (replicated once tp exceeds them); pipeline splits layers.
    const double heads_split = model.latent ? 1 : std::min<double>(p.tp, model.kv_heads);
    b.lines.push_back({"KV cache", kv_cache(model, p) / heads_split / p.pp,
                       fmt::format("batch {:g} x seq {:g} x {} layers{}", p.batch, p.seq, model.layers,
                                   model.latent ? ", latent" : fmt::format(" x {} kv heads", model.kv_heads))});
    add_overheads(b, model_parallel > 1, sum_of_lines(b));
    return b;
  }
  const int shard = p.shard_group > 0 ? p.shard_group : p.dp;
  ModelStatePrecision precision = p.state;
  precision.weights = p.precision;
  const ModelStateBytes state = model_state_bytes(local, precision, find_optimizer(p.optimizer), p.zero, shard);
  b.model_state = state.total();
  const std::string sharded = p.zero ? fmt::format(" (ZeRO-{} over {})", p.zero, shard) : "";
  const Units units = fsdp_units(model, local);
  const double secondary = p.zero >= 3 && p.hpz > 0 ? (local - units.root) / p.hpz * bytes_per_element(p.precision) : 0;
  b.lines.push_back({"weights", state.weights + secondary,
                     fmt::format("{}{}{}{}", name_of(p.precision), split, p.zero >= 3 ? sharded : "",
                                 secondary ? fmt::format(", + hpZ's secondary shard of the layers over {}", p.hpz)
                                           : "")});
  const double grad_bytes = bytes_per_element(precision.grads), weight_bytes = bytes_per_element(p.precision);
  const bool whole_grads = p.zero >= 2, whole_weights = p.zero >= 3;
  b.lines.push_back({"gradients", state.grads + (whole_grads ? (units.root + units.layer) * grad_bytes : 0),
                     fmt::format("{}{}{}", name_of(precision.grads), p.zero >= 2 ? sharded : "",
                                 whole_grads ? ", + whole: the root's and a layer's until reduce-scattered" : "")});
  if (whole_weights) {
    b.lines.push_back({"gathered weights", (p.reshard_after_forward ? units.root + units.layer : local) * weight_bytes,
                       p.reshard_after_forward ? "whole while computing: the root (embeddings, final norm) and a layer"
                                               : "every layer whole from its forward to its backward"});
    if (p.prefetch)
      b.lines.push_back({"prefetched weights", units.layer * weight_bytes, "the next layer, gathering under this one"});
  }
  if (precision.master_weights) b.lines.push_back({"master weights", state.master, "fp32 copy" + sharded});
  b.lines.push_back({"optimizer states", state.optimizer,
                     fmt::format("{}: {:g} x {}{}", p.optimizer, find_optimizer(p.optimizer).states,
                                 name_of(precision.states), sharded)});
  double activations;
  std::string note;
  if (p.activations) {
    activations = *p.activations;
    note = "given";
  } else if (p.activation_layout == ActivationLayout::llmc) {
    if (p.pp > 1 || p.recompute != Recompute::none)
      throw std::invalid_argument("llm.c's activation layout has no pipeline split and no recomputation");
    activations = llmc_activation_bytes(model, p.seq, p.micro_batch, p.tp, p.sequence_parallel);
    note = fmt::format("llm.c's fp32 buffers and their gradients, s {:g} x b {:g}", p.seq, p.micro_batch);
  } else {
    // With pipeline parallelism (1F1B) stage 0 holds pp micro-batches of its
    // layers/pp layers: as much as one micro-batch through every layer.
    const ActivationShape shape = activation_shape(model, p);
    activations = activation_bytes(model, shape, p.attention) * interleaving_factor(p);
    const AttentionKernel other =
        p.attention == AttentionKernel::eager ? AttentionKernel::flash : AttentionKernel::eager;
    // Beside it, the other kernel's count and Korthikanti's GPT formula (exercise 3.2), which the long guide
    // (section 1.2, book/99-references.md) uses for every model.
    note = fmt::format("s {:g} x b {:g} x {} layers{}, {}{} attention{}{}; {} {:.2f}, Korthikanti's GPT formula {:.2f}",
                       p.seq, p.micro_batch, model.layers,
                       p.virtual_stages > 1 ? fmt::format(" x {:.3f} (interleaved, v {})", interleaving_factor(p),
                                                          p.virtual_stages)
                                            : "",
                       p.activation_precision == ActivationPrecision::bits16
                           ? ""
                           : fmt::format("{}, ", name_of(p.activation_precision)),
                       name_of(p.attention),
                       p.recompute == Recompute::full ? ", full recompute"
                       : p.recompute == Recompute::selective ? ", selective recompute" : "",
                       p.sequence_parallel ? ", SP" : "", name_of(other),
                       activation_bytes(model, shape, other) * interleaving_factor(p) / GB,
                       model.layers * activation_bytes_per_layer(shape) * interleaving_factor(p) / GB);
  }
  b.lines.push_back({"activations", activations, note});
  if (!p.activations && p.recompute != Recompute::none)
    b.lines.push_back({"recomputed layer", recomputed_layer_bytes(model, activation_shape(model, p), p.attention),
                       "in backward, a layer's activations rebuilt for its gradients, the largest layer's"});
  // Activations given (--activations-gb) are all of them: nothing more past the last layer.
  const StepExtras extras = step_extras(model, activation_shape(model, p), p.loss_buffers && !p.activations);
  if (extras.loss > 0)
    b.lines.push_back({"final norm and loss", extras.head + extras.loss,
                       fmt::format("the final norm's input and output; the loss's fp32 log-softmax, s x b x V{}; "
                                   "backward starts with two more ({:.2f} GB)",
                                   p.tp > 1 ? " / tp" : "", extras.loss_grads / GB)});
  if (extras.weight_copies > 0)
    b.lines.push_back({"autocast weight copies", extras.weight_copies,
                       "bf16 copies of the matmuls' weights, from their forward to their backward"});
  if (p.workspace > 0) b.lines.push_back({"workspaces", p.workspace, "cuBLAS's and cuBLASLt's, from the first matmul"});
  b.timeline = timeline_of(b, p, extras.loss_grads);
  const double peak = peak_of(b.timeline);
  b.peak_at = std::find_if(b.timeline.begin(), b.timeline.end(), [&](const Phase& f) { return f.bytes == peak; })->name;
  add_overheads(b, double(p.dp) * model_parallel > 1, peak);
  return b;
}

// Bytes of an element kept for backward: a matmul's input or output (fp32
// without autocast, else 16-bit), and the residual stream, a norm's input
// (autocast keeps it fp32).
namespace {
struct ElementBytes {
  double matmul, residual;
};
ElementBytes element_bytes(ActivationPrecision p) {
  return {p == ActivationPrecision::fp32 ? 4.0 : 2.0, p == ActivationPrecision::bits16 ? 2.0 : 4.0};
}
}  // namespace

// Bytes of the layer's tensors: E = s b tokens, each tensor E x width x its
// element's bytes. Tensor parallelism splits what lives inside its blocks (per
// head, per MLP column) by t; sequence parallelism splits the rest (the
// blocks' inputs, the norms, dropout's masks after them) by t as well.
LayerActivations layer_activations(const Architecture& m, const ActivationShape& x, AttentionKernel kernel,
                                   bool moe_layer) {
  const double E = x.seq * x.micro_batch, h = x.hidden, t = x.tp, outside = x.sequence_parallel ? t : 1;
  const double kv = double(m.kv_heads) / m.heads;  // K and V as wide as their heads (GQA)
  const double mask = m.dropout ? 1 : 0;           // a dropout mask: one byte an element
  const auto [mm, residual] = element_bytes(x.precision);
  // A score kept for softmax's backward.
  const double score = x.precision == ActivationPrecision::bits16 ? 2
                       : x.precision == ActivationPrecision::fp32 ? 4
                                                                  : 4 + 2;  // fp32 softmax, its bf16 copy for att @ v
  LayerActivations a;
  if (x.recompute == Recompute::full) {  // each layer's input only; the rest is recomputed
    a.norms = residual * E * h / outside;
    return a;
  }
  // The QKV projection's input, Q, K, V, the output projection's input, and dropout's mask after it.
  a.attention = (mm * E * h + mask * E * h) / outside + mm * (2 + 2 * kv) * E * h / t;
  const double scores = x.heads * x.seq * x.seq * x.micro_batch / t;  // a x s x s x b elements
  if (kernel == AttentionKernel::flash)
    a.attention += 4 * x.heads * E / t;  // the fp32 logsumexp of each head's rows
  else if (x.recompute != Recompute::selective)
    a.scores = (score + mask * (1 + mm)) * scores;  // softmax's output; dropout's mask (1 byte) and output
  const double f = moe_layer || !m.dense_ffn ? m.ffn : m.dense_ffn;
  const double copies = moe_layer ? m.active_experts + m.shared_experts : 1;
  // fc1's input and dropout's mask after fc2; inside, GPT keeps GeLU's input and output, a gated MLP its
  // gate, up, SiLU(gate) and their product.
  a.mlp = (mm * E * h + mask * E * h) / outside + copies * (m.gated_ffn ? 4 : 2) * mm * E * f / t;
  a.norms = 2 * residual * E * h / outside;
  return a;
}

// Recomputation (Chen et al. 2016; Korthikanti et al. 2022) rebuilds one layer
// at a time in backward, and frees it after that layer's backward: the peak
// holds one layer's rebuilt activations beside the ones kept.
double recomputed_layer_bytes(const Architecture& m, const ActivationShape& x, AttentionKernel kernel) {
  ActivationShape whole = x;
  whole.recompute = Recompute::none;
  double most = 0;
  for (const bool moe_layer : {false, true})
    if (moe_layer ? m.experts > 0 && m.dense_layers < m.layers : !m.experts || m.dense_layers > 0)
      most = std::max(most, layer_activations(m, whole, kernel, moe_layer).total() -
                                layer_activations(m, x, kernel, moe_layer).total());
  return most;
}

double activation_bytes(const Architecture& m, const ActivationShape& x, AttentionKernel kernel) {
  const int dense = m.experts ? m.dense_layers : m.layers;
  return dense * layer_activations(m, x, kernel, false).total() +
         (m.layers - dense) * layer_activations(m, x, kernel, true).total();
}

StepExtras step_extras(const Architecture& m, const ActivationShape& x, bool count_loss) {
  StepExtras e;
  const double E = x.seq * x.micro_batch, h = x.hidden, t = x.tp, outside = x.sequence_parallel ? t : 1;
  if (x.precision == ActivationPrecision::autocast) {
    double matmul_weights = double(m.vocab) * h;  // the logits' (the tied embedding, or the head)
    for (int layer = 0; layer < m.layers; ++layer)
      for (const WeightTensor& w : layer_tensors(m, layer))
        if (!w.name.starts_with("norm")) matmul_weights += w.count;  // norms run in fp32
    e.weight_copies = 2 * matmul_weights / t;
  }
  if (!count_loss) return e;
  const auto [mm, residual] = element_bytes(x.precision);
  e.head = (residual + mm) * E * h / outside;
  e.loss = 4 * E * m.vocab / t;
  e.loss_grads = 2 * e.loss;
  return e;
}

double Breakdown::bytes_of(std::string_view component) const {
  for (const Line& l : lines)
    if (l.component == component) return l.bytes;
  return 0;
}

std::vector<Phase> step_timeline(const Architecture& model, const Plan& plan) {
  return estimate(model, plan, {"any", 0}).timeline;
}

double peak_of(const std::vector<Phase>& timeline) {
  double peak = 0;
  for (const Phase& p : timeline) peak = std::max(peak, p.bytes);
  return peak;
}

int gpus_needed(const Architecture& model, Plan plan, const Gpu& gpu) {
  // Data parallelism takes any count; tensor parallelism must divide the heads: powers of two.
  for (int n = 1; n <= 100000; n = plan.training && n < 8 ? n + 1 : n * 2) {
    if (plan.training) {
      plan.dp = n;
      plan.zero = 3;
      plan.shard_group = 0;  // sharded over all n
    } else {
      plan.tp = n;
    }
    if (estimate(model, plan, gpu).fits()) return (plan.training ? plan.dp : 1) * plan.tp * plan.pp;
  }
  return 0;
}

namespace {
// The widest tensor parallelism of at most `limit` ranks that check_plan takes:
// whole attention heads on each, and the KV heads split or copied evenly.
int widest_tp(const Architecture& m, int limit) {
  for (int t = std::min(limit, m.heads); t > 1; --t)
    if (m.heads % t == 0 && (m.latent || m.kv_heads % t == 0 || t % m.kv_heads == 0)) return t;
  return 1;
}
}  // namespace

Recommendation recommend(const Architecture& model, const Plan& base, const Gpu& gpu, int gpus, int per_node) {
  Recommendation r;
  const double weights = base.params.value_or(count_parameters(model).total) * bytes_per_element(base.precision);
  auto fits = [&](Plan p) { return estimate(model, p, gpu); };
  if (!base.training) {
    Plan p = base;
    p.tp = p.pp = 1;
    const Breakdown one = fits(p);
    r.reasons.push_back(fmt::format("weights {} + KV cache need {} with overheads; one GPU has {}", gb(weights),
                                    gb(one.total), gb(gpu.bytes)));
    if (one.fits()) {
      r.strategy = "one GPU per replica (vLLM or SGLang); more GPUs only add throughput as replicas";
    } else {
      const int widest = widest_tp(model, std::min(per_node, gpus));
      for (p.tp = 2; p.tp <= widest && (widest_tp(model, p.tp) != p.tp || !fits(p).fits()); p.tp *= 2) {}
      if (p.tp <= widest) {
        r.tp = p.tp;
        r.strategy = fmt::format("tensor parallelism over {} GPUs of one node", p.tp);
        r.reasons.push_back("TP splits every layer's weights and KV heads; it needs NVLink, so it stays in a node");
      } else {
        p.tp = widest;
        const auto can_stage = [&](int pp) { return pp * p.tp <= gpus && model.layers % pp == 0; };
        for (p.pp = 2; can_stage(p.pp) && !fits(p).fits(); p.pp *= 2) {}
        if (can_stage(p.pp)) {
          r.tp = p.tp, r.pp = p.pp;
          r.strategy = fmt::format("TP {} inside each node x PP {} across nodes", p.tp, p.pp);
          r.reasons.push_back("one node is not enough: pipeline stages across nodes only pass activations");
        } else {
          r.tp = r.pp = r.dp = 0;
          r.strategy = fmt::format("does not fit on {} GPUs", gpus);
        }
      }
    }
    if (model.experts) r.reasons.push_back("MoE: expert parallelism (EP) spreads the experts; tokens move by all-to-all");
    return r;
  }
  Plan p = base;
  p.dp = gpus;
  p.tp = p.pp = 1;
  p.zero = 0;
  const Breakdown ddp = fits(p);
  r.reasons.push_back(fmt::format("a full replica needs {} per GPU; one GPU has {}", gb(ddp.total), gb(gpu.bytes)));
  r.dp = gpus;
  if (ddp.fits()) {
    r.strategy = "DDP (data parallelism)";
    r.reasons.push_back("the model fits: replicate it, split the batch, allreduce the gradients (chapter 5)");
  } else {
    for (p.zero = 1; p.zero <= 3 && !fits(p).fits(); ++p.zero) {}
    if (p.zero <= 3) {
      r.strategy = p.zero == 3 ? fmt::format("FSDP / ZeRO-3 over {} GPUs", gpus)
                               : fmt::format("DDP with ZeRO-{} over {} GPUs", p.zero, gpus);
      r.reasons.push_back(fmt::format("ZeRO-{} shards {} across the {} ranks: {} per GPU", p.zero,
                                      p.zero == 1 ? "the optimizer states" : p.zero == 2 ? "optimizer states and gradients"
                                                                                         : "everything",
                                      gpus, gb(fits(p).total)));
      if (p.zero == 3)
        r.reasons.push_back("FSDP gathers each layer's weights when it runs, in forward and again in backward: it "
                            "moves 3 times the parameters per step (two all-gathers, a reduce-scatter), DDP 2 times "
                            "(its allreduce)");
    } else {
      p.zero = 3;
      p.tp = widest_tp(model, std::min(per_node, gpus));
      p.sequence_parallel = p.tp > 1;
      // Each doubling of the stages halves the replicas that shard the model
      // state; the stages hold equal layers.
      const auto can_stage = [&](int pp) { return p.tp * pp <= gpus && model.layers % pp == 0; };
      for (p.pp = 1; can_stage(p.pp); p.pp *= 2) {
        p.dp = gpus / (p.tp * p.pp);
        if (fits(p).fits()) break;
      }
      if (can_stage(p.pp)) {
        r.tp = p.tp, r.pp = p.pp, r.dp = p.dp;
        r.strategy = fmt::format("TP {}", p.tp);
        if (p.pp > 1) r.strategy += fmt::format(" x PP {}", p.pp);
        if (p.dp > 1) r.strategy += fmt::format(" x FSDP {}", p.dp);
        if (r.gpus() < gpus) r.strategy += fmt::format(" ({} of the {} GPUs)", r.gpus(), gpus);
        r.reasons.push_back("ZeRO-3 alone is not enough: it shards model state, not activations "
                            "(recomputing activations is the other way out)");
        r.reasons.push_back("TP (with sequence parallelism) inside a node, on NVLink");
        if (p.pp > 1) r.reasons.push_back("PP across nodes: stages exchange activations point-to-point");
      } else {
        r.tp = r.pp = r.dp = 0;
        r.strategy = fmt::format("does not fit on {} GPUs", gpus);
        p.pp /= 2;  // the most split layout tried
        p.dp = gpus / (p.tp * p.pp);
        const Breakdown most_split = fits(p);
        // Recomputing shrinks activations only: where the model state alone
        // is past the GPU, only more GPUs help.
        const std::string remedy = most_split.model_state > gpu.bytes
                                       ? fmt::format("its model state alone is {}: add GPUs", gb(most_split.model_state))
                                   : p.recompute == Recompute::full ? "add GPUs"
                                       : "recompute activations (--recompute selective or full), or add GPUs";
        r.reasons.push_back(fmt::format("even TP {} x PP {}{} with ZeRO-3 and sequence parallelism needs {} per GPU: {}",
                                        p.tp, p.pp, p.dp > 1 ? fmt::format(" x FSDP {}", p.dp) : "",
                                        gb(most_split.total), remedy));
      }
    }
  }
  if (model.experts) r.reasons.push_back("MoE: add expert parallelism (EP); tokens reach their experts by all-to-all");
  return r;
}

}  // namespace labkit::memory
