#include "labkit/gpt.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "labkit/ops.h"

namespace labkit {

using namespace ops;

GptConfig gpt_preset(const std::string& name, int vocab) {
  if (name == "tiny-gpt") return {.max_seq = 32, .vocab = vocab, .layers = 2, .heads = 4, .channels = 64};
  throw std::invalid_argument("unknown model '" + name + "' (tiny-gpt)");
}

// Carves consecutive tensors out of one flat buffer, in order.
namespace {
class Carver {
 public:
  explicit Carver(float* base) : at_(base) {}
  float* take(std::size_t n) {
    float* p = at_;
    at_ += n;
    return p;
  }

 private:
  float* at_;
};

// The parameters, layer by layer, so one layer's are contiguous: the unit that
// data parallelism reduces as soon as backward is done with it, and that FSDP
// shards and gathers. wte (V,C), wpe (maxT,C); then each layer: ln1 (C, C),
// qkv (3C,C) and (3C), attention projection (C,C) and (C), ln2 (C, C),
// fc (4C,C) and (4C), fc projection (C,4C) and (C); then the final ln (C, C).
struct Layer {
  float *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw, *fcprojb;
};

std::size_t layer_size(std::size_t C) { return 2 * C + 3 * C * C + 3 * C + C * C + C + 2 * C + 4 * C * C + 4 * C + 4 * C * C + C; }
std::size_t embeddings_size(const GptConfig& c) { return std::size_t(c.vocab + c.max_seq) * c.channels; }

std::size_t param_count(const GptConfig& c) {
  return embeddings_size(c) + c.layers * layer_size(c.channels) + 2 * std::size_t(c.channels);
}

struct Params {
  float *wte, *wpe, *lnfw, *lnfb;
  std::vector<Layer> layers;
};

Params params_at(float* base, const GptConfig& c) {
  const std::size_t C = c.channels;
  Carver k(base);
  Params p;
  p.wte = k.take(c.vocab * C);
  p.wpe = k.take(c.max_seq * C);
  for (int l = 0; l < c.layers; ++l)
    p.layers.push_back({k.take(C), k.take(C), k.take(3 * C * C), k.take(3 * C), k.take(C * C), k.take(C), k.take(C),
                        k.take(C), k.take(4 * C * C), k.take(4 * C), k.take(4 * C * C), k.take(C)});
  p.lnfw = k.take(C);
  p.lnfb = k.take(C);
  return p;
}

struct Acts {
  float *encoded, *ln1, *ln1_mean, *ln1_rstd, *qkv, *atty, *preatt, *att, *attproj, *residual2, *ln2, *ln2_mean,
      *ln2_rstd, *fch, *fch_gelu, *fcproj, *residual3, *lnf, *lnf_mean, *lnf_rstd, *logits, *probs, *losses;
};

std::size_t act_count(const GptConfig& c, int B, int T) {
  const std::size_t BT = std::size_t(B) * T, C = c.channels, L = c.layers, NH = c.heads, V = c.vocab;
  return BT * C + L * (BT * C + 2 * BT + BT * 3 * C + BT * C + 2 * B * NH * T * T + 2 * BT * C + BT * C + 2 * BT +
                       2 * BT * 4 * C + 2 * BT * C) + BT * C + 2 * BT + 2 * BT * V + BT;
}

Acts acts_at(float* base, const GptConfig& c, int B, int T) {
  const std::size_t BT = std::size_t(B) * T, C = c.channels, L = c.layers, NH = c.heads, V = c.vocab;
  Carver k(base);
  Acts a;
  a.encoded = k.take(BT * C);
  a.ln1 = k.take(L * BT * C);
  a.ln1_mean = k.take(L * BT);
  a.ln1_rstd = k.take(L * BT);
  a.qkv = k.take(L * BT * 3 * C);
  a.atty = k.take(L * BT * C);
  a.preatt = k.take(L * B * NH * T * T);
  a.att = k.take(L * B * NH * T * T);
  a.attproj = k.take(L * BT * C);
  a.residual2 = k.take(L * BT * C);
  a.ln2 = k.take(L * BT * C);
  a.ln2_mean = k.take(L * BT);
  a.ln2_rstd = k.take(L * BT);
  a.fch = k.take(L * BT * 4 * C);
  a.fch_gelu = k.take(L * BT * 4 * C);
  a.fcproj = k.take(L * BT * C);
  a.residual3 = k.take(L * BT * C);
  a.lnf = k.take(BT * C);
  a.lnf_mean = k.take(BT);
  a.lnf_rstd = k.take(BT);
  a.logits = k.take(BT * V);
  a.probs = k.take(BT * V);
  a.losses = k.take(BT);
  return a;
}
}  // namespace

Gpt::Gpt(const GptConfig& config, std::uint64_t seed)
    : config_(config), params_(param_count(config)), grads_(params_.size()) {
  if (config.channels % config.heads) throw std::invalid_argument("gpt: channels must divide by heads");
  // GPT-2's initialisation: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2L) (Radford et al. 2019), zero biases, unit layer-norm gains.
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const Params p = params_at(params_.data(), config);
  const std::size_t C = config.channels;
  auto fill = [&](float* t, std::size_t n, float scale) {
    for (std::size_t i = 0; i < n; ++i) t[i] = normal(gen) * scale;
  };
  const float residual_scale = 1.0f / std::sqrt(2.0f * config.layers);
  fill(p.wte, config.vocab * C, 1);
  fill(p.wpe, config.max_seq * C, 1);
  for (const Layer& l : p.layers) {
    std::fill_n(l.ln1w, C, 1.0f);
    fill(l.qkvw, 3 * C * C, 1);
    fill(l.attprojw, C * C, residual_scale);
    std::fill_n(l.ln2w, C, 1.0f);
    fill(l.fcw, 4 * C * C, 1);
    fill(l.fcprojw, C * 4 * C, residual_scale);
  }
  std::fill_n(p.lnfw, C, 1.0f);
}

void Gpt::prepare(int B, int T) {
  if (T > config_.max_seq) throw std::invalid_argument("gpt: sequence longer than the model's context");
  if (B != B_ || T != T_) {
    B_ = B;
    T_ = T;
    acts_.assign(act_count(config_, B, T), 0.0f);
    grad_acts_.assign(acts_.size(), 0.0f);
  } else {
    std::fill(grad_acts_.begin(), grad_acts_.end(), 0.0f);
  }
}

std::span<float> Gpt::stream(int layer) {
  const Acts a = acts_at(acts_.data(), config_, B_, T_);
  const std::size_t btc = std::size_t(B_) * T_ * config_.channels;
  return {layer < 0 ? a.encoded : a.residual3 + layer * btc, btc};
}

std::span<float> Gpt::stream_grad(int layer) {
  const Acts d = acts_at(grad_acts_.data(), config_, B_, T_);
  const std::size_t btc = std::size_t(B_) * T_ * config_.channels;
  return {layer < 0 ? d.encoded : d.residual3 + layer * btc, btc};
}

float Gpt::forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  prepare(B, T);
  embed(tokens);
  forward_layers(0, config_.layers);
  return head(targets);
}

void Gpt::embed(const std::vector<int>& tokens) {
  tokens_ = tokens;
  const Params p = params_at(params_.data(), config_);
  encoder_forward(stream(-1).data(), tokens.data(), p.wte, p.wpe, B_, T_, config_.channels);
}

// One transformer block (pre-norm, as GPT-2): x + attn(ln1(x)), then + mlp(ln2(.)).
void Gpt::forward_layers(int first, int last) {
  const int B = B_, T = T_, C = config_.channels, NH = config_.heads, BT = B * T;
  const Params p = params_at(params_.data(), config_);
  const Acts a = acts_at(acts_.data(), config_, B, T);
  for (int l = first; l < last; ++l) {
    const float* residual = stream(l - 1).data();
    const std::size_t btc = std::size_t(l) * BT * C, bt = std::size_t(l) * BT, att = std::size_t(l) * B * NH * T * T;
    float *ln1 = a.ln1 + btc, *qkv = a.qkv + 3 * btc, *atty = a.atty + btc, *attproj = a.attproj + btc;
    float *residual2 = a.residual2 + btc, *ln2 = a.ln2 + btc, *fch = a.fch + 4 * btc, *fch_gelu = a.fch_gelu + 4 * btc;
    float *fcproj = a.fcproj + btc, *residual3 = a.residual3 + btc;
    const Layer& w = p.layers[l];
    layernorm_forward(ln1, a.ln1_mean + bt, a.ln1_rstd + bt, residual, w.ln1w, w.ln1b, BT, C);
    matmul_forward(qkv, ln1, w.qkvw, w.qkvb, BT, C, 3 * C);
    attention_forward(atty, a.preatt + att, a.att + att, qkv, B, T, C, NH);
    matmul_forward(attproj, atty, w.attprojw, w.attprojb, BT, C, C);
    residual_forward(residual2, residual, attproj, BT * C);
    layernorm_forward(ln2, a.ln2_mean + bt, a.ln2_rstd + bt, residual2, w.ln2w, w.ln2b, BT, C);
    matmul_forward(fch, ln2, w.fcw, w.fcb, BT, C, 4 * C);
    gelu_forward(fch_gelu, fch, BT * 4 * C);
    matmul_forward(fcproj, fch_gelu, w.fcprojw, w.fcprojb, BT, 4 * C, C);
    residual_forward(residual3, residual2, fcproj, BT * C);
  }
}

float Gpt::head(const std::vector<int>& targets) {
  targets_ = targets;
  const int C = config_.channels, V = config_.vocab, BT = B_ * T_;
  const Params p = params_at(params_.data(), config_);
  const Acts a = acts_at(acts_.data(), config_, B_, T_);
  layernorm_forward(a.lnf, a.lnf_mean, a.lnf_rstd, stream(config_.layers - 1).data(), p.lnfw, p.lnfb, BT, C);
  matmul_forward(a.logits, a.lnf, p.wte, static_cast<const float*>(nullptr), BT, C, V);  // the head shares wte
  softmax_forward(a.probs, a.logits, BT, V);
  crossentropy_forward(a.losses, a.probs, targets.data(), BT, V);
  double mean = 0;
  for (int i = 0; i < BT; ++i) mean += a.losses[i];
  return float(mean / BT);
}

void Gpt::zero_grad() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void Gpt::backward(const std::function<void(ParameterRange)>& on_ready) {
  backward_head();
  if (on_ready) on_ready({parameter_count() - 2 * std::size_t(config_.channels), 2 * std::size_t(config_.channels)});
  backward_layers(0, config_.layers, on_ready);
  backward_embed();
  if (on_ready) on_ready({0, embeddings_size(config_)});
}

void Gpt::backward_head() {
  const int C = config_.channels, V = config_.vocab, BT = B_ * T_;
  const Params p = params_at(params_.data(), config_), g = params_at(grads_.data(), config_);
  const Acts a = acts_at(acts_.data(), config_, B_, T_), d = acts_at(grad_acts_.data(), config_, B_, T_);
  std::fill_n(d.losses, BT, 1.0f / BT);  // the loss is the mean over B x T
  crossentropy_softmax_backward(d.logits, d.losses, a.probs, targets_.data(), BT, V);
  matmul_backward(d.lnf, g.wte, static_cast<float*>(nullptr), d.logits, a.lnf, p.wte, BT, C, V);
  const int last = config_.layers - 1;
  layernorm_backward(stream_grad(last).data(), g.lnfw, g.lnfb, d.lnf, stream(last).data(), p.lnfw, a.lnf_mean,
                     a.lnf_rstd, BT, C);
}

void Gpt::backward_layers(int first, int last, const std::function<void(ParameterRange)>& on_ready) {
  const int B = B_, T = T_, C = config_.channels, NH = config_.heads, BT = B * T;
  const Params p = params_at(params_.data(), config_), g = params_at(grads_.data(), config_);
  const Acts a = acts_at(acts_.data(), config_, B, T), d = acts_at(grad_acts_.data(), config_, B, T);
  for (int l = last - 1; l >= first; --l) {
    const std::size_t btc = std::size_t(l) * BT * C, bt = std::size_t(l) * BT, att = std::size_t(l) * B * NH * T * T;
    const float* residual = stream(l - 1).data();
    float* dresidual = stream_grad(l - 1).data();
    const Layer &w = p.layers[l], &dw = g.layers[l];
    residual_backward(d.residual2 + btc, d.fcproj + btc, d.residual3 + btc, BT * C);
    matmul_backward(d.fch_gelu + 4 * btc, dw.fcprojw, dw.fcprojb, d.fcproj + btc, a.fch_gelu + 4 * btc, w.fcprojw, BT,
                    4 * C, C);
    gelu_backward(d.fch + 4 * btc, a.fch + 4 * btc, d.fch_gelu + 4 * btc, BT * 4 * C);
    matmul_backward(d.ln2 + btc, dw.fcw, dw.fcb, d.fch + 4 * btc, a.ln2 + btc, w.fcw, BT, C, 4 * C);
    layernorm_backward(d.residual2 + btc, dw.ln2w, dw.ln2b, d.ln2 + btc, a.residual2 + btc, w.ln2w, a.ln2_mean + bt,
                       a.ln2_rstd + bt, BT, C);
    residual_backward(dresidual, d.attproj + btc, d.residual2 + btc, BT * C);
    matmul_backward(d.atty + btc, dw.attprojw, dw.attprojb, d.attproj + btc, a.atty + btc, w.attprojw, BT, C, C);
    attention_backward(d.qkv + 3 * btc, d.preatt + att, d.att + att, d.atty + btc, a.qkv + 3 * btc, a.att + att, B, T,
                       C, NH);
    matmul_backward(d.ln1 + btc, dw.qkvw, dw.qkvb, d.qkv + 3 * btc, a.ln1 + btc, w.qkvw, BT, C, 3 * C);
    layernorm_backward(dresidual, dw.ln1w, dw.ln1b, d.ln1 + btc, residual, w.ln1w, a.ln1_mean + bt, a.ln1_rstd + bt,
                       BT, C);
    // This layer's gradients are final: data parallelism can start reducing them.
    if (on_ready) on_ready(layer_range(l));
  }
}

void Gpt::backward_embed() {
  const Params g = params_at(grads_.data(), config_);
  encoder_backward(g.wte, g.wpe, stream_grad(-1).data(), tokens_.data(), B_, T_, config_.channels);
}

ParameterRange Gpt::layer_range(int layer) const {
  const std::size_t size = layer_size(config_.channels);
  return {embeddings_size(config_) + layer * size, size};
}

double Gpt::flops_per_step(int B, int T) const {
  const int C = config_.channels, V = config_.vocab, N = B * T;
  const double per_layer = matmul_flops(N, C, 3 * C) + matmul_flops(N, C, C) + matmul_flops(N, C, 4 * C) +
                           matmul_flops(N, 4 * C, C) + attention_flops(B, T, C);
  const double forward = config_.layers * per_layer + matmul_flops(N, C, V);
  return 3 * forward;  // backward costs twice the forward
}

std::string synthetic_corpus(std::size_t chars, std::uint64_t seed) {
  static const char* subjects[] = {"the cat", "a dog", "my friend", "the old man", "a small bird", "the teacher",
                                   "her brother", "the farmer"};
  static const char* verbs[] = {"sat on", "looked at", "ran to", "found", "painted", "walked past", "liked", "saw"};
  static const char* objects[] = {"the mat", "a tall tree", "the river", "an open door", "the red house",
                                  "a quiet field", "the market", "the blue boat"};
  std::mt19937_64 gen(seed);
  std::string text;
  while (text.size() < chars) {
    std::string sentence = std::string(subjects[gen() % 8]) + " " + verbs[gen() % 8] + " " + objects[gen() % 8];
    sentence[0] = char(std::toupper(sentence[0]));
    text += sentence + (gen() % 4 == 0 ? ".\n" : ". ");
  }
  text.resize(chars);
  return text;
}

}  // namespace labkit
