#include "labkit/gpt.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>

#include "labkit/ops.h"

namespace labkit {

GptConfig gpt_preset(const std::string& name, int vocab) {
  if (name == "tiny-gpt") return {.max_seq = 32, .vocab = vocab, .layers = 2, .heads = 4, .channels = 64};
  throw std::invalid_argument("unknown model '" + name + "' (tiny-gpt)");
}

// The parameters, layer by layer, so one layer's are contiguous: the unit that
// data parallelism reduces as soon as backward is done with it, and that FSDP
// shards and gathers. wte (V,C), wpe (maxT,C); then each block: ln1, qkv,
// attention projection, ln2, fc, fc projection (weight then bias each); then
// the final norm.
Gpt::Modules::Modules(Carver& params, const GptConfig& c)
    : wte(params.take(std::size_t(c.vocab) * c.channels)), wpe(params.take(std::size_t(c.max_seq) * c.channels)),
      blocks([&] {
        std::vector<Block> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(params, c.channels, c.heads);
        return b;
      }()),
      lnf(params, c.channels) {}

Gpt::Acts::Acts(Carver& acts, const GptConfig& c, int B, int T)
    : encoded(acts.take(std::size_t(B) * T * c.channels)),
      blocks([&] {
        std::vector<Block::Acts> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(acts, B, T, c.channels, c.heads);
        return b;
      }()),
      lnf(acts, B * T, c.channels), logits(acts.take(std::size_t(B) * T * c.vocab)),
      probs(acts.take(std::size_t(B) * T * c.vocab)), losses(acts.take(std::size_t(B) * T)) {}

Gpt::Gpt(const GptConfig& config, std::uint64_t seed, DeviceKind where) : config_(config) {
  if (config.channels % config.heads) throw std::invalid_argument("gpt: channels must divide by heads");
  Carver counter(nullptr, nullptr);
  const Modules sizes(counter, config);
  // GPT-2's initialisation: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2L) (Radford et al. 2019), zero biases, unit layer-norm gains.
  Tensor init({counter.taken()});
  Carver carver(init.data(), nullptr);
  const Modules p(carver, config);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  auto fill = [&](Slice t, std::size_t n, float scale) {
    for (std::size_t i = 0; i < n; ++i) t.value[i] = normal(gen) * scale;
  };
  auto fill_linear = [&](const Linear& l, float scale) { fill(l.weight, std::size_t(l.in) * l.out, scale); };
  const float residual_scale = 1.0f / std::sqrt(2.0f * config.layers);
  fill(p.wte, std::size_t(config.vocab) * config.channels, 1);
  fill(p.wpe, std::size_t(config.max_seq) * config.channels, 1);
  for (const Block& b : p.blocks) {
    std::fill_n(b.ln1.weight.value, config.channels, 1.0f);
    fill_linear(b.attn.qkv, 1);
    fill_linear(b.attn.proj, residual_scale);
    std::fill_n(b.ln2.weight.value, config.channels, 1.0f);
    fill_linear(b.mlp.fc, 1);
    fill_linear(b.mlp.proj, residual_scale);
  }
  std::fill_n(p.lnf.weight.value, config.channels, 1.0f);
  params_ = where == DeviceKind::cpu ? init : init.to(where);
  grads_ = Tensor(params_.shape(), where);
  carve();
}

Gpt::Gpt(const Gpt& other)
    : config_(other.config_), params_(other.params_.clone()), grads_(other.grads_.clone()),
      acts_(other.acts_.size() ? other.acts_.clone() : Tensor()),
      grad_acts_(other.grad_acts_.size() ? other.grad_acts_.clone() : Tensor()),
      tokens_(other.tokens_.size() ? other.tokens_.clone() : IndexTensor()),
      targets_(other.targets_.size() ? other.targets_.clone() : IndexTensor()), B_(other.B_), T_(other.T_) {
  carve();
}

void Gpt::carve() {
  Carver params(params_.data(), grads_.data());
  m_.emplace(params, config_);
  if (B_ == 0) return;
  Carver acts(acts_.data(), grad_acts_.data());
  a_.emplace(acts, config_, B_, T_);
}

void Gpt::prepare(int B, int T) {
  if (T > config_.max_seq) throw std::invalid_argument("gpt: sequence longer than the model's context");
  if (B != B_ || T != T_) {
    Carver counter(nullptr, nullptr);
    const Acts sizes(counter, config_, B, T);
    acts_ = Tensor({counter.taken()}, device().kind);
    grad_acts_ = Tensor({counter.taken()}, device().kind);
    B_ = B;
    T_ = T;
    carve();
  } else {
    grad_acts_.zero();
  }
}

std::span<float> Gpt::stream(int layer) {
  const std::size_t btc = std::size_t(B_) * T_ * config_.channels;
  return {layer < 0 ? a_->encoded.value : a_->blocks[layer].out.value, btc};
}

std::span<float> Gpt::stream_grad(int layer) {
  const std::size_t btc = std::size_t(B_) * T_ * config_.channels;
  return {layer < 0 ? a_->encoded.grad : a_->blocks[layer].out.grad, btc};
}

float Gpt::forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  prepare(B, T);
  embed(tokens);
  forward_layers(0, config_.layers);
  return head(targets);
}

void Gpt::embed(const std::vector<int>& tokens) {
  tokens_ = IndexTensor::from_host(tokens, {std::size_t(B_), std::size_t(T_)}, device().kind);
  device().encoder_forward(a_->encoded.value, tokens_.data(), m_->wte.value, m_->wpe.value, B_, T_, config_.channels);
}

void Gpt::forward_layers(int first, int last) {
  for (int l = first; l < last; ++l) m_->blocks[l].forward(device(), a_->blocks[l], stream(l - 1).data(), B_, T_);
}

float Gpt::head(const std::vector<int>& targets) {
  const Device& d = device();
  const int C = config_.channels, V = config_.vocab, BT = B_ * T_;
  targets_ = IndexTensor::from_host(targets, {std::size_t(B_), std::size_t(T_)}, d.kind);
  m_->lnf.forward(d, a_->lnf, stream(config_.layers - 1).data(), BT);
  d.matmul_forward(a_->logits.value, a_->lnf.out.value, m_->wte.value, nullptr, BT, C, V);  // the head shares wte
  d.softmax_forward(a_->probs.value, a_->logits.value, BT, V);
  d.crossentropy_forward(a_->losses.value, a_->probs.value, targets_.data(), BT, V);
  std::vector<float> losses(BT);
  d.copy_to_host(losses.data(), a_->losses.value, losses.size() * sizeof(float));
  double mean = 0;
  for (float l : losses) mean += l;
  return float(mean / BT);
}

void Gpt::zero_grad() { grads_.zero(); }

void Gpt::backward(const std::function<void(ParameterRange)>& on_ready) {
  backward_head();
  if (on_ready) on_ready(range_of(m_->lnf.weight, 2 * std::size_t(config_.channels)));
  backward_layers(0, config_.layers, on_ready);
  backward_embed();
  if (on_ready) on_ready(range_of(m_->wte, layer_range(0).offset));
}

void Gpt::backward_head() {
  const Device& d = device();
  const int C = config_.channels, V = config_.vocab, BT = B_ * T_;
  const std::vector<float> dlosses(BT, 1.0f / BT);  // the loss is the mean over B x T
  d.copy_from_host(a_->losses.grad, dlosses.data(), dlosses.size() * sizeof(float));
  d.crossentropy_softmax_backward(a_->logits.grad, a_->losses.grad, a_->probs.value, targets_.data(), BT, V);
  d.matmul_backward(a_->lnf.out.grad, m_->wte.grad, nullptr, a_->logits.grad, a_->lnf.out.value, m_->wte.value, BT,
                    C, V);
  const int last = config_.layers - 1;
  m_->lnf.backward(d, stream_grad(last).data(), a_->lnf, stream(last).data(), BT);
}

void Gpt::backward_layers(int first, int last, const std::function<void(ParameterRange)>& on_ready) {
  for (int l = last - 1; l >= first; --l) {
    m_->blocks[l].backward(device(), stream_grad(l - 1).data(), a_->blocks[l], stream(l - 1).data(), B_, T_);
    // This layer's gradients are final: data parallelism can start reducing them.
    if (on_ready) on_ready(layer_range(l));
  }
}

void Gpt::backward_embed() {
  device().encoder_backward(m_->wte.grad, m_->wpe.grad, stream_grad(-1).data(), tokens_.data(), B_, T_,
                            config_.channels);
}

ParameterRange Gpt::range_of(Slice start, std::size_t count) const {
  return {std::size_t(start.value - params_.data()), count};
}

ParameterRange Gpt::layer_range(int layer) const {
  const Block& b = m_->blocks[layer];
  const float* end = layer + 1 < config_.layers ? m_->blocks[layer + 1].ln1.weight.value : m_->lnf.weight.value;
  return range_of(b.ln1.weight, std::size_t(end - b.ln1.weight.value));
}

double Gpt::flops_per_step(int B, int T) const {
  const int C = config_.channels, V = config_.vocab, N = B * T;
  using ops::attention_flops, ops::matmul_flops;
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
