#include "labkit/gpt.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <set>
#include <stdexcept>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/ops.h"
#include "labkit/output.h"
#include "labkit/units.h"

namespace labkit {

GptConfig gpt_preset(const std::string& name, int vocab) {
  if (name == "tiny-gpt") return {.max_seq = 32, .vocab = vocab, .layers = 2, .heads = 4, .channels = 64};
  // Big enough that a GPU's kernels, not their launches, take a step's time.
  if (name == "small-gpt") return {.max_seq = 256, .vocab = vocab, .layers = 4, .heads = 8, .channels = 512};
  throw std::invalid_argument("unknown model '" + name + "' (tiny-gpt, small-gpt)");
}

memory::Architecture architecture_of(const GptConfig& c) {
  return {.name = "tiny-gpt", .layers = c.layers, .hidden = c.channels, .heads = c.heads, .kv_heads = c.heads,
          .ffn = 4 * c.channels, .vocab = c.vocab, .positions = c.max_seq, .tied_embeddings = true, .biases = true};
}

// The parameters, layer by layer, so one layer's are contiguous: the unit that
// data parallelism reduces as soon as backward is done with it, and that FSDP
// shards and gathers. wte (V,C), wpe (maxT,C); then each block: ln1, qkv,
// attention projection, ln2, fc, fc projection (weight then bias each); then
// the final norm.
Gpt::Modules::Modules(Arena& params, const GptConfig& c)
    : wte(params.allocate(std::size_t(c.vocab) * c.channels)),
      wpe(params.allocate(std::size_t(c.max_seq) * c.channels)),
      blocks([&] {
        std::vector<Block> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(params, c.channels, c.heads);
        return b;
      }()),
      lnf(params, c.channels) {}

Gpt::Acts::Acts(Arena& acts, const GptConfig& c, int B, int T, const std::vector<bool>& held)
    : encoded(acts.allocate(std::size_t(B) * T * c.channels)),
      blocks([&] {
        std::vector<Block::Acts> b;
        Arena none(nullptr, nullptr);  // a layer not held: null slices, but for its output
        for (int l = 0; l < c.layers; ++l)
          if (held.empty() || held[std::size_t(l)]) {
            b.emplace_back(acts, B, T, c.channels, c.heads);
          } else {
            b.emplace_back(none, B, T, c.channels, c.heads);
            b.back().out = acts.allocate(std::size_t(B) * T * c.channels);
          }
        return b;
      }()),
      lnf(acts, B * T, c.channels), logits(acts.allocate(std::size_t(B) * T * c.vocab)),
      probs(acts.allocate(std::size_t(B) * T * c.vocab)), losses(acts.allocate(std::size_t(B) * T)) {}

Gpt::Gpt(const GptConfig& config, std::uint64_t seed, DeviceKind where) : config_(config) {
  if (config.channels % config.heads) throw std::invalid_argument("gpt: channels must divide by heads");
  Arena counter(nullptr, nullptr);
  const Modules sizes(counter, config);
  // GPT-2's initialisation: N(0, 0.02) weights, residual projections scaled by
  // 1/sqrt(2L) (Radford et al. 2019), zero biases, unit layer-norm gains.
  Tensor init({counter.allocated()});
  Arena arena(init.data(), nullptr);
  const Modules p(arena, config);
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
      held_(other.held_), B_(other.B_), T_(other.T_), sets_(other.sets_), set_(other.set_),
      set_floats_(other.set_floats_) {
  for (const IndexTensor& t : other.tokens_) tokens_.push_back(t.size() ? t.clone() : IndexTensor());
  for (const IndexTensor& t : other.targets_) targets_.push_back(t.size() ? t.clone() : IndexTensor());
  carve();
}

void Gpt::carve() {
  Arena params(params_.data(), grads_.data());
  m_.emplace(params, config_);
  if (B_ == 0) return;
  const std::size_t offset = std::size_t(set_) * set_floats_;
  Arena acts(acts_.data() + offset, grad_acts_.data() + offset);
  a_.emplace(acts, config_, B_, T_, held_);
}

void Gpt::prepare(int B, int T, int set, int sets) {
  if (T > config_.max_seq) throw std::invalid_argument("gpt: sequence longer than the model's context");
  if (set < 0 || set >= sets)
    throw std::invalid_argument(fmt::format("gpt: activation set {} of {}", set, sets));
  if (B != B_ || T != T_ || sets != sets_) {
    Arena counter(nullptr, nullptr);
    const Acts sizes(counter, config_, B, T, held_);
    set_floats_ = counter.allocated();
    acts_ = Tensor({set_floats_ * std::size_t(sets)}, device().kind);
    grad_acts_ = Tensor({set_floats_ * std::size_t(sets)}, device().kind);
    tokens_.resize(std::size_t(sets));
    targets_.resize(std::size_t(sets));
    B_ = B, T_ = T, sets_ = sets;
  } else {
    device().zero(grad_acts_.data() + std::size_t(set) * set_floats_, set_floats_ * sizeof(float));
  }
  set_ = set;
  carve();
}

void check_batch_fits(const GptConfig& config, int batch, int T, const std::string& option) {
  // The memory lab's count of llm.c's buffers, which the model allocates to the byte (gpt_test).
  const double per_sequence = memory::llmc_activation_bytes(architecture_of(config), T, 1);
  const double needed = per_sequence * batch;
  const double memory = double(sysconf(_SC_PHYS_PAGES)) * double(sysconf(_SC_PAGE_SIZE));
  if (needed > memory)
    throw Error(fmt::format("{} {}: its activations and their gradients need {} ({} a sequence of {} tokens), more "
                            "than this machine's {} of memory", option, batch, format_bytes(std::uint64_t(needed)),
                            format_bytes(std::uint64_t(per_sequence)), T, format_bytes(std::uint64_t(memory))));
}

void Gpt::hold_layers(std::vector<bool> held) {
  if (!held.empty() && held.size() != std::size_t(config_.layers))
    throw std::invalid_argument(fmt::format("gpt: hold_layers: {} flags for {} layers", held.size(), config_.layers));
  held_ = std::move(held);
  sets_ = 0;  // sized again at the next prepare
}

void Gpt::use_activations(int set) {
  if (set < 0 || set >= sets_)
    throw std::invalid_argument(fmt::format("gpt: activation set {} of the {} prepared", set, sets_));
  set_ = set;
  carve();
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
  queue_forward(tokens, targets, B, T);
  return loss();
}

void Gpt::queue_forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  prepare(B, T);
  embed(tokens);
  forward_layers(0, config_.layers);
  head(targets);
}

float Gpt::loss() const { return mean_loss(device(), a_->losses.value, B_ * T_); }

void Gpt::embed(const std::vector<int>& tokens) {
  IndexTensor& ids = tokens_[std::size_t(set_)];
  ids = IndexTensor::from_host(tokens, {std::size_t(B_), std::size_t(T_)}, device().kind);
  device().encoder_forward(a_->encoded.value, ids.data(), m_->wte.value, m_->wpe.value, B_, T_, config_.channels);
}

void Gpt::forward_layers(int first, int last) {
  for (int l = first; l < last; ++l) m_->blocks[l].forward(device(), a_->blocks[l], stream(l - 1).data(), B_, T_);
}

void Gpt::head(const std::vector<int>& targets) {
  const Device& d = device();
  const int C = config_.channels, V = config_.vocab, BT = B_ * T_;
  IndexTensor& ids = targets_[std::size_t(set_)];
  ids = IndexTensor::from_host(targets, {std::size_t(B_), std::size_t(T_)}, d.kind);
  m_->lnf.forward(d, a_->lnf, stream(config_.layers - 1).data(), BT);
  d.matmul_forward(a_->logits.value, a_->lnf.out.value, m_->wte.value, nullptr, BT, C, V);  // the head shares wte
  d.softmax_forward(a_->probs.value, a_->logits.value, BT, V);
  d.crossentropy_forward(a_->losses.value, a_->probs.value, ids.data(), BT, V);
}

float mean_loss(const Device& d, const float* losses, int n) {
  std::vector<float> host(static_cast<std::size_t>(n));
  d.copy_to_host(host.data(), losses, host.size() * sizeof(float));
  double mean = 0;
  for (float loss : host) mean += loss;
  return float(mean / n);
}

void Gpt::zero_grad() { grads_.zero(); }

void Gpt::backward(const std::function<void(ParameterRange)>& on_ready) {
  backward_head();
  if (on_ready) on_ready(range_of(m_->lnf.weight, 2 * std::size_t(config_.channels)));
  backward_layers(0, config_.layers, on_ready);
  backward_embed();
  if (on_ready) on_ready(range_of(m_->wte, layer_range(0).offset));
}

std::vector<ParameterRange> Gpt::backward_order() const {
  std::vector<ParameterRange> order = {range_of(m_->lnf.weight, 2 * std::size_t(config_.channels))};
  for (int l = config_.layers - 1; l >= 0; --l) order.push_back(layer_range(l));
  order.push_back(range_of(m_->wte, layer_range(0).offset));
  return order;
}

void Gpt::backward_head() {
  const Device& d = device();
  const int C = config_.channels, V = config_.vocab, BT = B_ * T_;
  d.fill(a_->losses.grad, 1.0f / float(BT), BT);  // the loss is the mean over B x T
  d.crossentropy_softmax_backward(a_->logits.grad, a_->losses.grad, a_->probs.value,
                                  targets_[std::size_t(set_)].data(), BT, V);
  d.matmul_backward(a_->lnf.out.grad, m_->wte.grad, nullptr, a_->logits.grad, a_->lnf.out.value, m_->wte.value, BT,
                    C, V);
  const int last = config_.layers - 1;
  m_->lnf.backward(d, stream_grad(last).data(), a_->lnf, stream(last).data(), BT);
}

void Gpt::backward_layers(int first, int last, const std::function<void(ParameterRange)>& on_ready,
                          BackwardPart part) {
  for (int l = last - 1; l >= first; --l) {
    m_->blocks[l].backward(device(), stream_grad(l - 1).data(), a_->blocks[l], stream(l - 1).data(), B_, T_, part);
    // This layer's gradients are final: data parallelism can start reducing them.
    if (on_ready && part != BackwardPart::input) on_ready(layer_range(l));
  }
}

void Gpt::backward_embed() {
  device().encoder_backward(m_->wte.grad, m_->wpe.grad, stream_grad(-1).data(), tokens_[std::size_t(set_)].data(),
                            B_, T_, config_.channels);
}

ParameterRange Gpt::range_of(Slice start, std::size_t count) const {
  return {std::size_t(start.value - params_.data()), count};
}

std::vector<ParameterTensor> Gpt::tensors() const {
  std::vector<ParameterTensor> out;
  auto add = [&](std::string name, Slice s, int rows, int cols) {
    out.push_back({std::move(name), std::size_t(s.value - params_.data()), rows, cols});
  };
  auto add_linear = [&](const std::string& name, const Linear& l) {
    add(name + ".weight", l.weight, l.out, l.in);
    add(name + ".bias", l.bias, 1, l.out);
  };
  auto add_norm = [&](const std::string& name, const LayerNorm& n) {
    add(name + ".weight", n.weight, 1, n.C);
    add(name + ".bias", n.bias, 1, n.C);
  };
  add("wte", m_->wte, config_.vocab, config_.channels);
  add("wpe", m_->wpe, config_.max_seq, config_.channels);
  for (int l = 0; l < config_.layers; ++l) {
    const Block& b = m_->blocks[l];
    const std::string h = fmt::format("h.{}.", l);
    add_norm(h + "ln_1", b.ln1);
    add_linear(h + "attn.c_attn", b.attn.qkv);
    add_linear(h + "attn.c_proj", b.attn.proj);
    add_norm(h + "ln_2", b.ln2);
    add_linear(h + "mlp.c_fc", b.mlp.fc);
    add_linear(h + "mlp.c_proj", b.mlp.proj);
  }
  add_norm("ln_f", m_->lnf);
  return out;
}

ParameterRange Gpt::layer_range(int layer) const {
  const Block& b = m_->blocks[layer];
  const float* end = layer + 1 < config_.layers ? m_->blocks[layer + 1].ln1.weight.value : m_->lnf.weight.value;
  return range_of(b.ln1.weight, std::size_t(end - b.ln1.weight.value));
}

double Gpt::block_flops(int B, int T) const {
  const int C = config_.channels, N = B * T;
  using ops::attention_flops, ops::matmul_flops;
  return matmul_flops(N, C, 3 * C) + matmul_flops(N, C, C) + matmul_flops(N, C, 4 * C) + matmul_flops(N, 4 * C, C) +
         attention_flops(B, T, C);
}

double Gpt::head_flops(int B, int T) const { return ops::matmul_flops(B * T, config_.channels, config_.vocab); }

double Gpt::flops_per_step(int B, int T) const {
  const double forward = config_.layers * block_flops(B, T) + head_flops(B, T);
  return 3 * forward;  // backward costs twice the forward
}

Tokens character_tokens(const std::string& text) {
  const std::set<char> charset(text.begin(), text.end());
  const std::vector<char> table(charset.begin(), charset.end());
  Tokens t{{}, int(table.size())};
  t.ids.reserve(text.size());
  for (char c : text) t.ids.push_back(int(std::lower_bound(table.begin(), table.end(), c) - table.begin()));
  return t;
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

// ---- checkpoints ---------------------------------------------------------------
//
// The layout, in this machine's byte order: the magic line; the model's shape,
// the data order and AdamW's step (int64 each); the weights, m, v and the master
// copy (a count, then the floats; AdamW's are empty before its first step); then
// an FNV-1a hash of everything before it, so a flipped or missing byte is caught.

namespace {
constexpr std::string_view kMagic = "labkit gpt checkpoint 1\n";

std::uint64_t fnv1a(std::string_view bytes) {
  std::uint64_t h = 1469598103934665603ull;
  for (char c : bytes) {
    h ^= std::uint8_t(c);
    h *= 1099511628211ull;
  }
  return h;
}

std::string describe(const GptConfig& c) {
  return fmt::format("{} layers, {} heads, {} channels, context {}, vocabulary {}", c.layers, c.heads, c.channels,
                     c.max_seq, c.vocab);
}
}  // namespace

void save_checkpoint(const std::string& path, const Gpt& model, const AdamW& adamw, const DataOrder& data) {
  std::string out(kMagic);
  auto put = [&](const void* p, std::size_t bytes) { out.append(static_cast<const char*>(p), bytes); };
  const GptConfig& c = model.config();
  const std::int64_t h[8] = {c.max_seq, c.vocab, c.layers, c.heads, c.channels, std::int64_t(data.seed), data.batch,
                             adamw.step};  // the shape, the data order, the step
  put(h, sizeof h);
  for (const Tensor* t : {&model.parameters(), &adamw.m, &adamw.v, &adamw.master}) {
    const std::vector<float> values = t->to_host();
    const std::uint64_t count = values.size();
    put(&count, sizeof count);
    put(values.data(), count * sizeof(float));
  }
  const std::uint64_t hash = fnv1a(out);
  put(&hash, sizeof hash);
  const std::string temporary = path + ".tmp";
  {
    std::ofstream file = create_file(temporary);
    file.write(out.data(), std::streamsize(out.size()));
    if (!file.flush()) throw Error(fmt::format("checkpoint '{}': cannot write it", temporary));
  }
  std::error_code error;
  std::filesystem::rename(temporary, path, error);
  if (error) throw Error(fmt::format("checkpoint '{}': cannot rename '{}' to it ({})", path, temporary, error.message()));
}

void load_checkpoint(const std::string& path, Gpt& model, AdamW& adamw, const DataOrder& data) {
  std::ifstream file(path, std::ios::binary);
  if (!file) throw Error(fmt::format("checkpoint '{}': cannot open it", path));
  const std::string in{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
  if (in.compare(0, kMagic.size(), kMagic) != 0) throw Error(fmt::format("checkpoint '{}': not a labkit checkpoint", path));
  std::uint64_t hash = 0;
  if (in.size() >= kMagic.size() + sizeof hash) std::memcpy(&hash, in.data() + in.size() - sizeof hash, sizeof hash);
  if (in.size() < kMagic.size() + sizeof hash || hash != fnv1a(std::string_view(in).substr(0, in.size() - sizeof hash)))
    throw Error(fmt::format("checkpoint '{}': corrupt or cut short (its checksum does not match)", path));
  std::size_t at = kMagic.size();
  auto take = [&](void* p, std::size_t bytes) {  // within the checksummed bytes
    if (at + bytes > in.size() - sizeof hash) throw Error(fmt::format("checkpoint '{}': its sizes overrun it", path));
    std::memcpy(p, in.data() + at, bytes);
    at += bytes;
  };
  std::int64_t h[8];  // the shape, the data order, the step
  take(h, sizeof h);
  const GptConfig shape{.max_seq = int(h[0]), .vocab = int(h[1]), .layers = int(h[2]), .heads = int(h[3]),
                        .channels = int(h[4])};
  const DataOrder order{.seed = std::uint64_t(h[5]), .batch = int(h[6])};
  if (shape != model.config())
    throw Error(fmt::format("checkpoint '{}': a model of {}, but this run's has {}", path, describe(shape),
                            describe(model.config())));
  if (order.seed != data.seed || order.batch != data.batch)
    throw Error(fmt::format("checkpoint '{}': trained with seed {} and batch {}, but this run has seed {} and batch {}",
                            path, order.seed, order.batch, data.seed, data.batch));
  const std::size_t n = model.parameter_count();
  const DeviceKind where = model.device().kind;
  std::vector<Tensor> state;
  for (int i = 0; i < 4; ++i) {  // weights, m, v, master
    std::uint64_t count = 0;
    take(&count, sizeof count);
    if (count != n && (i == 0 || count != 0))
      throw Error(fmt::format("checkpoint '{}': {} values where the model has {}", path, count, n));
    std::vector<float> values(count);
    take(values.data(), count * sizeof(float));
    state.push_back(count ? Tensor::from_host(values, {count}, where) : Tensor());
  }
  model.device().copy(model.parameters().data(), state[0].data(), n * sizeof(float));
  adamw.m = state[1];
  adamw.v = state[2];
  adamw.master = state[3];
  adamw.step = int(h[7]);
}

}  // namespace labkit
