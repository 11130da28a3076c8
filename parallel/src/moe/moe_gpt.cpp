#include "labkit/parallel/moe_gpt.h"

#include <cmath>
#include <random>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

namespace {

// The floats of a rows x width buffer, counted in std::size_t so that no
// product overflows an int.
std::size_t floats(std::size_t rows, std::size_t width) { return rows * width; }

}  // namespace

// The dense part in GPT-2's order, each block's router and shared experts
// where its MLP was; the experts in a buffer of their own, layer by layer.
MoeGpt::BlockModules::BlockModules(Arena& dense, Arena& experts, const GptConfig& c, const MoeConfig& moe,
                                   int ep_size, int ep_rank)
    : ln1(dense, c.channels), attn(dense, c.channels, c.heads), ln2(dense, c.channels),
      moe(dense, experts, c.channels, moe, ep_size, ep_rank) {}

MoeGpt::Modules::Modules(Arena& dense, Arena& experts, const GptConfig& c, const MoeConfig& moe, int ep_size,
                         int ep_rank)
    : wte(dense.allocate(floats(c.vocab, c.channels))), wpe(dense.allocate(floats(c.max_seq, c.channels))),
      blocks([&] {
        std::vector<BlockModules> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(dense, experts, c, moe, ep_size, ep_rank);
        return b;
      }()),
      lnf(dense, c.channels) {}

MoeGpt::BlockActs::BlockActs(Arena& acts, int B, int T, int C, int NH)
    : ln1(acts, B * T, C), attn(acts, B, T, C, NH), residual(acts.allocate(floats(B * T, C))), ln2(acts, B * T, C),
      moe_out(acts.allocate(floats(B * T, C))), out(acts.allocate(floats(B * T, C))) {}

MoeGpt::Acts::Acts(Arena& acts, const GptConfig& c, int B, int T)
    : encoded(acts.allocate(floats(B * T, c.channels))),
      blocks([&] {
        std::vector<BlockActs> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(acts, B, T, c.channels, c.heads);
        return b;
      }()),
      lnf(acts, B * T, c.channels),
      logits(acts.allocate(floats(B * T, c.vocab))),
      probs(acts.allocate(floats(B * T, c.vocab))),
      losses(acts.allocate(floats(B, T))) {}

MoeGpt::MoeGpt(const GptConfig& config, const MoeConfig& moe, int ep_size, int ep_rank, std::uint64_t seed,
               DeviceKind where)
    : config_(config), moe_(moe), ep_size_(ep_size), ep_rank_(ep_rank) {
  check(moe, ep_size);
  if (config.channels % config.heads) throw Error("moe gpt: channels must divide by heads");
  Arena dense_count(nullptr, nullptr), experts_count(nullptr, nullptr);
  Modules(dense_count, experts_count, config, moe, ep_size, ep_rank);
  dense_ = Tensor({dense_count.allocated()});
  dense_grads_ = Tensor({dense_count.allocated()});
  experts_ = Tensor({experts_count.allocated()});
  expert_grads_ = Tensor({experts_count.allocated()});
  Arena dense_params(dense_.data(), dense_grads_.data()), expert_params(experts_.data(), expert_grads_.data());
  m_.emplace(dense_params, expert_params, config, moe, ep_size, ep_rank);

  // GPT-2's initialisation: the dense part drawn in its order from `seed`,
  // each expert from a generator of its own (seed, layer, expert), so that a
  // rank draws only its experts and every ep draws the same ones.
  std::normal_distribution<float> normal(0.0f, 0.02f);
  const auto fill = [&](std::mt19937_64& gen, const Linear& l, float scale) {
    for (std::size_t i = 0; i < floats(l.out, l.in); ++i) l.weight.value[i] = normal(gen) * scale;
  };
  const float residual_scale = 1.0f / std::sqrt(2.0f * config.layers);
  std::mt19937_64 gen(seed);
  for (std::size_t i = 0; i < floats(config.vocab, config.channels); ++i) m_->wte.value[i] = normal(gen);
  for (std::size_t i = 0; i < floats(config.max_seq, config.channels); ++i) m_->wpe.value[i] = normal(gen);
  for (std::size_t l = 0; l < m_->blocks.size(); ++l) {
    const BlockModules& b = m_->blocks[l];
    std::fill_n(b.ln1.weight.value, config.channels, 1.0f);
    fill(gen, b.attn.qkv, 1);
    fill(gen, b.attn.proj, residual_scale);
    std::fill_n(b.ln2.weight.value, config.channels, 1.0f);
    fill(gen, b.moe.router, 1);
    for (const Mlp& m : b.moe.shared) fill(gen, m.fc, 1), fill(gen, m.proj, residual_scale);
    for (std::size_t i = 0; i < b.moe.experts.size(); ++i) {
      std::seed_seq ids{seed, std::uint64_t(l), std::uint64_t(b.moe.first_expert()) + i};
      std::mt19937_64 own(ids);
      fill(own, b.moe.experts[i].fc, 1), fill(own, b.moe.experts[i].proj, residual_scale);
    }
  }
  std::fill_n(m_->lnf.weight.value, config.channels, 1.0f);
  if (where == DeviceKind::cpu) return;
  // Drawn on the host, then moved: the modules carved again from the device's buffers.
  dense_ = dense_.to(where), dense_grads_ = Tensor({dense_.size()}, where);
  experts_ = experts_.to(where), expert_grads_ = Tensor({experts_.size()}, where);
  Arena on_device(dense_.data(), dense_grads_.data()), experts_on_device(experts_.data(), expert_grads_.data());
  m_.emplace(on_device, experts_on_device, config, moe, ep_size, ep_rank);
}

std::size_t MoeGpt::experts_per_layer() const {
  Arena count(nullptr, nullptr);
  Mlp(count, config_.channels);
  return count.allocated() * (moe_.experts / ep_size_);
}

std::vector<float> MoeGpt::experts_of(std::span<const float> whole, int layers, int ep_rank, int ep_size) {
  const std::size_t per_layer = whole.size() / std::size_t(layers), per_rank = per_layer / std::size_t(ep_size);
  if (whole.size() % std::size_t(layers) != 0 || per_layer % std::size_t(ep_size) != 0)
    throw Error(fmt::format("moe gpt: experts_of: {} floats do not cut into {} layers of {} ranks' experts",
                            whole.size(), layers, ep_size));
  std::vector<float> mine;
  for (int l = 0; l < layers; ++l) {
    const float* first = whole.data() + l * per_layer + std::size_t(ep_rank) * per_rank;
    mine.insert(mine.end(), first, first + per_rank);
  }
  return mine;
}

void MoeGpt::prepare(int B, int T) {
  if (T > config_.max_seq) throw Error("moe gpt: sequence longer than the model's context");
  if (B != B_ || T != T_) {
    Arena counter(nullptr, nullptr);
    Acts(counter, config_, B, T);
    acts_ = Tensor({counter.allocated()}, dense_.device().kind);
    grad_acts_ = Tensor({counter.allocated()}, dense_.device().kind);
    B_ = B, T_ = T;
  } else {
    grad_acts_.zero();
  }
  Arena acts(acts_.data(), grad_acts_.data());
  a_.emplace(acts, config_, B, T);
}

float MoeGpt::forward(Comm& ep, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  prepare(B, T);
  const Device& d = dense_.device();
  const int C = config_.channels, V = config_.vocab, N = B * T, n = N * C;
  tokens_ = IndexTensor::from_host(tokens, {std::size_t(N)}, d.kind);
  targets_ = IndexTensor::from_host(targets, {std::size_t(N)}, d.kind);
  d.encoder_forward(a_->encoded.value, tokens_.data(), m_->wte.value, m_->wpe.value, B, T, C);
  for (int l = 0; l < config_.layers; ++l) {
    BlockModules& b = m_->blocks[l];
    const BlockActs& a = a_->blocks[l];
    const float* x = stream(l - 1);
    b.ln1.forward(d, a.ln1, x, N);
    b.attn.forward(d, a.attn, a.ln1.out.value, B, T);
    d.residual_forward(a.residual.value, x, a.attn.out.value, n);
    b.ln2.forward(d, a.ln2, a.residual.value, N);
    b.moe.forward(ep, a.moe_out.value, a.ln2.out.value, N);
    d.residual_forward(a.out.value, a.residual.value, a.moe_out.value, n);
  }
  m_->lnf.forward(d, a_->lnf, stream(config_.layers - 1), N);
  d.matmul_forward(a_->logits.value, a_->lnf.out.value, m_->wte.value, nullptr, N, C, V);  // the head shares wte
  d.softmax_forward(a_->probs.value, a_->logits.value, N, V);
  d.crossentropy_forward(a_->losses.value, a_->probs.value, targets_.data(), N, V);
  return mean_loss(d, a_->losses.value, N);
}

double MoeGpt::balance_loss() const {
  double sum = 0;
  for (const BlockModules& b : m_->blocks) sum += b.moe.stats().balance_loss;
  return sum;
}

void MoeGpt::zero_grad() {
  dense_grads_.zero();
  expert_grads_.zero();
}

void MoeGpt::backward(Comm& ep) {
  const Device& d = dense_.device();
  const int C = config_.channels, V = config_.vocab, N = B_ * T_, n = N * C, last = config_.layers - 1;
  d.fill(a_->losses.grad, 1.0f / float(N), N);  // the loss is the mean over B x T
  d.crossentropy_softmax_backward(a_->logits.grad, a_->losses.grad, a_->probs.value, targets_.data(), N, V);
  d.matmul_backward(a_->lnf.out.grad, m_->wte.grad, nullptr, a_->logits.grad, a_->lnf.out.value, m_->wte.value, N, C,
                    V);
  m_->lnf.backward(d, stream_grad(last), a_->lnf, stream(last), N);
  for (int l = last; l >= 0; --l) {
    BlockModules& b = m_->blocks[l];
    const BlockActs& a = a_->blocks[l];
    d.residual_backward(a.residual.grad, a.moe_out.grad, a.out.grad, n);
    b.moe.backward(ep, a.ln2.out.grad, a.moe_out.grad, a.ln2.out.value);
    b.ln2.backward(d, a.residual.grad, a.ln2, a.residual.value, N);
    d.residual_backward(stream_grad(l - 1), a.attn.out.grad, a.residual.grad, n);
    b.attn.backward(d, a.ln1.out.grad, a.attn, a.ln1.out.value, B_, T_);
    b.ln1.backward(d, stream_grad(l - 1), a.ln1, stream(l - 1), N);
  }
  d.encoder_backward(m_->wte.grad, m_->wpe.grad, stream_grad(-1), tokens_.data(), B_, T_, C);
}

void MoeGpt::average_gradients(Comm& ep) {
  ep.all_reduce({dense_grads_.data(), dense_grads_.size(), DType::f32}, ReduceOp::avg);
  expert_grads_.device().scale(expert_grads_.data(), 1.0f / float(ep_size_), long(expert_grads_.size()));
}

float MoeGpt::train_step(Comm& ep, const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T,
                         const TensorUpdate& update_dense, const TensorUpdate& update_experts) {
  const float loss = forward(ep, tokens, targets, B, T);
  zero_grad();
  backward(ep);
  average_gradients(ep);
  const double started = ep.now();
  update_dense(dense_, dense_grads_);
  update_experts(experts_, expert_grads_);
  ep.record_compute("optimizer", started, 4.0 * double(dense_.size() + experts_.size()));
  update_bias();
  return loss;
}

void MoeGpt::update_bias() {
  for (BlockModules& b : m_->blocks) b.moe.update_bias();
}

MoeTrainer::MoeTrainer(Comm& ep, const GptConfig& config, const MoeConfig& moe, const Sequences& data, int batch,
                       std::uint64_t seed, float lr, DeviceKind where)
    : ep_(ep), data_(data), batch_(batch), sampler_(data.count, 1, 0, seed),
      model_(config, moe, ep.size(), ep.rank(), seed, where), dense_sgd_{.lr = lr}, experts_sgd_{.lr = lr} {}

float MoeTrainer::step(int step) {
  const int share = batch_ / ep_.size();
  const std::vector<std::size_t> batch = batch_of(sampler_, step, batch_);
  const auto mine = batch.begin() + ep_.rank() * share;
  fill_batch(data_, {mine, mine + share}, x_, y_);
  return model_.train_step(
      ep_, x_, y_, share, model_.config().max_seq,
      [&](Tensor& w, Tensor& g) { dense_sgd_.update(w, g); }, [&](Tensor& w, Tensor& g) { experts_sgd_.update(w, g); });
}

}  // namespace labkit
