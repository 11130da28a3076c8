#include "labkit/parallel/tensor_parallel_gpt.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "labkit/error.h"
#include "labkit/ops.h"

namespace labkit {

TensorParallelGpt::BlockModules::BlockModules(Arena& params, int C, int t)
    : ln1(params, C), qkv(params, C, 3 * C / t), proj(params, C / t, C), ln2(params, C), fc(params, C, 4 * C / t),
      fc_proj(params, 4 * C / t, C) {}

TensorParallelGpt::Modules::Modules(Arena& params, const GptConfig& c, int vocab_local, int t)
    : wte(params.allocate(std::size_t(vocab_local) * c.channels)),
      wpe(params.allocate(std::size_t(c.max_seq) * c.channels)),
      blocks([&] {
        std::vector<BlockModules> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(params, c.channels, t);
        return b;
      }()),
      lnf(params, c.channels) {}

namespace {

// A slice of all B x T rows: the scratch with sequence parallelism, else the
// rows' slice itself (the activations are whole on every rank already).
Slice whole_or(const Slice* whole, Slice rows) { return whole ? *whole : rows; }

std::size_t rows_of(int B, int T, int t, bool sp) { return std::size_t(B) * std::size_t(T) / std::size_t(sp ? t : 1); }

}  // namespace

TensorParallelGpt::BlockActs::BlockActs(Arena& acts, int B, int T, int C, int NH, int t, const Slice* whole)
    : ln1(acts, int(rows_of(B, T, t, whole != nullptr)), C), ln1_gathered(whole_or(whole, ln1.out)),
      qkv(acts.allocate(rows_of(B, T, t, false) * 3 * C / t)),
      heads_out(acts.allocate(rows_of(B, T, t, false) * C / t)),
      preatt(acts.allocate(std::size_t(B) * (NH / t) * T * T)), att(acts.allocate(std::size_t(B) * (NH / t) * T * T)),
      attn_out(acts.allocate(rows_of(B, T, t, whole != nullptr) * C)), attn_partial(whole_or(whole, attn_out)),
      residual(acts.allocate(rows_of(B, T, t, whole != nullptr) * C)),
      ln2(acts, int(rows_of(B, T, t, whole != nullptr)), C),
      ln2_gathered(whole_or(whole, ln2.out)), hidden(acts.allocate(rows_of(B, T, t, false) * 4 * C / t)),
      gelu(acts.allocate(rows_of(B, T, t, false) * 4 * C / t)),
      mlp_out(acts.allocate(rows_of(B, T, t, whole != nullptr) * C)),
      mlp_partial(whole_or(whole, mlp_out)), out(acts.allocate(rows_of(B, T, t, whole != nullptr) * C)) {}

TensorParallelGpt::Acts::Acts(Arena& acts, const GptConfig& c, int B, int T, int vocab_local, int t, bool sp)
    : whole(sp ? acts.allocate(rows_of(B, T, t, false) * c.channels) : Slice{}),
      encoded(acts.allocate(rows_of(B, T, t, sp) * c.channels)),
      embed_partial(whole_or(sp ? &whole : nullptr, encoded)),
      blocks([&] {
        std::vector<BlockActs> b;
        for (int l = 0; l < c.layers; ++l) b.emplace_back(acts, B, T, c.channels, c.heads, t, sp ? &whole : nullptr);
        return b;
      }()),
      lnf(acts, int(rows_of(B, T, t, sp)), c.channels), lnf_gathered(whole_or(sp ? &whole : nullptr, lnf.out)),
      logits(acts.allocate(rows_of(B, T, t, false) * vocab_local)),
      probs(acts.allocate(rows_of(B, T, t, false) * vocab_local)),
      losses(acts.allocate(rows_of(B, T, t, false))) {}

std::string tensor_parallel_refusal(const memory::Architecture& a, int t) {
  const std::string model = a.name == "tiny-gpt" ? "the tiny GPT's" : a.name + "'s";
  const auto split = [&](int n, const char* what, const char* why) {
    return n % t == 0 ? std::string()
                      : fmt::format("{} {} {} do not split over {} tensor-parallel ranks ({})", model, n, what, t, why);
  };
  for (const std::string& no : {split(a.heads, "heads", "each rank takes whole heads"),
                                split(a.kv_heads, "kv heads", "each rank takes whole key-value groups"),
                                split(a.ffn, "MLP features", "the column-parallel layer's width")})
    if (!no.empty()) return no;
  return "";
}

std::string sequence_parallel_refusal(int T, int t) {
  return T % t == 0 ? "" : fmt::format("the sequence of {} does not split into {} equal shards", T, t);
}

TensorParallelGpt::TensorParallelGpt(Comm& tp, const Gpt& dense, bool sequence_parallel)
    : tp_(tp), sequence_parallel_(sequence_parallel), config_(dense.config()) {
  const int t = tp.size();
  if (const std::string no = tensor_parallel_refusal(architecture_of(config_), t); !no.empty())
    fail(tp.who(), "TensorParallelGpt", "{}", no);
  vocab_local_ = (config_.vocab + t - 1) / t;
  dense_tensors_ = dense.tensors();
  Arena counter(nullptr, nullptr);
  const Modules sizes(counter, config_, vocab_local_, t);
  const DeviceKind where = dense.device().kind;
  params_ = Tensor::from_host(slice_of_dense(dense.parameters().to_host()), {counter.allocated()}, where);
  grads_ = Tensor({counter.allocated()}, where);
  Arena arena(params_.data(), grads_.data());
  m_.emplace(arena, config_, vocab_local_, t);
  tp.track_memory(MemoryUse::weights, std::int64_t(params_.bytes()));
  tp.track_memory(MemoryUse::gradients, std::int64_t(grads_.bytes()));
}

// The dense model's tensors in order (Gpt::tensors), each cut as this rank
// keeps it: the token table's rows of its vocabulary slice (zeros past V),
// QKV's rows of its heads in each of q, k and v, the MLP's first rows of its
// features, the projections' columns, and the rest whole.
std::vector<float> TensorParallelGpt::slice_of_dense(std::span<const float> dense) const {
  const int t = tp_.size(), r = tp_.rank(), C = config_.channels;
  std::vector<float> out;
  const auto rows = [&](const ParameterTensor& p, std::size_t first, std::size_t count) {
    const auto begin = dense.begin() + std::ptrdiff_t(p.offset + first * std::size_t(p.cols));
    out.insert(out.end(), begin, begin + std::ptrdiff_t(count * std::size_t(p.cols)));
  };
  const auto columns = [&](const ParameterTensor& p, std::size_t first, std::size_t count) {
    for (std::size_t row = 0; row < std::size_t(p.rows); ++row) {
      const auto begin = dense.begin() + std::ptrdiff_t(p.offset + row * std::size_t(p.cols) + first);
      out.insert(out.end(), begin, begin + std::ptrdiff_t(count));
    }
  };
  const auto ends_with = [](const std::string& name, std::string_view end) {
    return name.size() >= end.size() && name.compare(name.size() - end.size(), end.size(), end) == 0;
  };
  for (const ParameterTensor& p : dense_tensors_) {
    const std::size_t cl = std::size_t(C / t), hl = std::size_t(4 * C / t);
    if (p.name == "wte") {
      const std::size_t first = std::size_t(r) * std::size_t(vocab_local_);
      const std::size_t kept = std::min(std::size_t(vocab_local_), std::size_t(std::max(0, config_.vocab - int(first))));
      rows(p, first, kept);
      out.resize(out.size() + (std::size_t(vocab_local_) - kept) * std::size_t(C), 0.0f);
    } else if (ends_with(p.name, "attn.c_attn.weight") || ends_with(p.name, "attn.c_attn.bias")) {
      // A bias is one row: its columns are the features.
      for (std::size_t part = 0; part < 3; ++part)
        p.rows == 1 ? columns(p, part * std::size_t(C) + std::size_t(r) * cl, cl)
                    : rows(p, part * std::size_t(C) + std::size_t(r) * cl, cl);
    } else if (ends_with(p.name, "mlp.c_fc.weight")) {
      rows(p, std::size_t(r) * hl, hl);
    } else if (ends_with(p.name, "mlp.c_fc.bias")) {
      columns(p, std::size_t(r) * hl, hl);
    } else if (ends_with(p.name, "attn.c_proj.weight")) {
      columns(p, std::size_t(r) * cl, cl);
    } else if (ends_with(p.name, "mlp.c_proj.weight")) {
      columns(p, std::size_t(r) * hl, hl);
    } else {
      rows(p, 0, std::size_t(p.rows));
    }
  }
  return out;
}

void TensorParallelGpt::prepare(int B, int T) {
  if (T > config_.max_seq)
    fail(tp_.who(), "TensorParallelGpt", "sequence of {} tokens is longer than the model's context, {}", T,
         config_.max_seq);
  if (const std::string no = sequence_parallel_refusal(T, tp_.size()); sequence_parallel_ && !no.empty())
    fail(tp_.who(), "TensorParallelGpt", "sequence parallelism: {}", no);
  if (B != B_ || T != T_) {
    Arena counter(nullptr, nullptr);
    const Acts sizes(counter, config_, B, T, vocab_local_, tp_.size(), sequence_parallel_);
    tp_.track_memory(MemoryUse::activations, -std::int64_t(activation_bytes()));
    const DeviceKind where = params_.device().kind;
    acts_ = Tensor({counter.allocated()}, where);
    grad_acts_ = Tensor({counter.allocated()}, where);
    tp_.track_memory(MemoryUse::activations, std::int64_t(activation_bytes()));
    B_ = B, T_ = T;
    Arena arena(acts_.data(), grad_acts_.data());
    a_.emplace(arena, config_, B, T, vocab_local_, tp_.size(), sequence_parallel_);
    largest_ = Tensor({std::size_t(B) * T}, where);
    sums_ = Tensor({2 * std::size_t(B) * T}, where);
    shuffled_ = sequence_parallel_ ? Tensor({std::size_t(B) * T * config_.channels}, where) : Tensor();
  } else {
    grad_acts_.zero();
  }
}

void TensorParallelGpt::all_reduce(float* x, std::size_t n, ReduceOp op) { tp_.all_reduce({x, n, DType::f32}, op); }

// f and g with sequence parallelism are exercise 7.3's pair
// (solutions/parallel/sequence_parallel_collectives.cpp); without it, f forward is
// nothing and g an allreduce in place.
void all_gather_rows(const TensorParallelGroup& g, int width, const float* rows, float* whole) {
  const std::size_t n = std::size_t(g.B) * g.T * width;
  all_gather_sequence(g.comm, {const_cast<float*>(rows), n / g.comm.size(), DType::f32}, {whole, n, DType::f32},
                      g.scratch, g.B, g.T, width);
}

void reduce_scatter_rows(const TensorParallelGroup& g, int width, float* whole, float* rows) {
  const std::size_t n = std::size_t(g.B) * g.T * width;
  reduce_scatter_sequence(g.comm, {whole, n, DType::f32}, {rows, n / g.comm.size(), DType::f32}, g.scratch, g.B, g.T,
                          width);
}

void TensorParallelGpt::gather_rows(const float* rows, float* whole) {
  if (sequence_parallel_) all_gather_rows(group(), config_.channels, rows, whole);
}

void TensorParallelGpt::sum_partials(float* whole, float* rows) {
  if (!sequence_parallel_) return all_reduce(whole, std::size_t(B_) * T_ * config_.channels);  // whole is rows
  reduce_scatter_rows(group(), config_.channels, whole, rows);
}

// With sequence parallelism the column-parallel layers' input gradients share
// one scratch buffer, and their backward adds into it: clear what the last use left.
void TensorParallelGpt::clear_whole_gradient() {
  if (sequence_parallel_)
    params_.device().zero(a_->whole.grad, std::size_t(B_) * T_ * config_.channels * sizeof(float));
}

// Each norm's gain and bias got this rank's positions' share: packed into one
// buffer on the device, one allreduce of them all, and back.
void TensorParallelGpt::sum_norm_gradients() {
  const Device& d = params_.device();
  std::vector<float*> grads;
  for (const BlockModules& b : m_->blocks)
    grads.insert(grads.end(), {b.ln1.weight.grad, b.ln1.bias.grad, b.ln2.weight.grad, b.ln2.bias.grad});
  grads.insert(grads.end(), {m_->lnf.weight.grad, m_->lnf.bias.grad});
  const std::size_t C = std::size_t(config_.channels), bytes = C * sizeof(float);
  Tensor packed({grads.size() * C}, d.kind);
  for (std::size_t i = 0; i < grads.size(); ++i) d.copy(packed.data() + i * C, grads[i], bytes);
  all_reduce(packed.data(), packed.size());
  for (std::size_t i = 0; i < grads.size(); ++i) d.copy(grads[i], packed.data() + i * C, bytes);
}

float* TensorParallelGpt::stream(int layer) const { return layer < 0 ? a_->encoded.value : a_->blocks[layer].out.value; }
float* TensorParallelGpt::stream_grad(int layer) const {
  return layer < 0 ? a_->encoded.grad : a_->blocks[layer].out.grad;
}

float TensorParallelGpt::forward(const std::vector<int>& tokens, const std::vector<int>& targets, int B, int T) {
  prepare(B, T);
  const Device& d = params_.device();
  tokens_ = IndexTensor::from_host(tokens, {std::size_t(B) * T}, d.kind);
  // The vocabulary-parallel embedding: each rank its rows' tokens (zeros for
  // the others), rank 0 the positions; summing them is the embedding.
  const double started = tp_.now();
  float* x = a_->embed_partial.value;
  d.vocab_slice_encoder_forward(x, tokens_.data(), m_->wte.value, tp_.rank() == 0 ? m_->wpe.value : nullptr,
                                tp_.rank() * vocab_local_, vocab_local_, B, T, config_.channels);
  tp_.record_compute("forward embeddings", started, 0);
  sum_partials(x, a_->encoded.value);
  for (int l = 0; l < config_.layers; ++l) forward_block(l);
  return vocab_parallel_cross_entropy(targets);
}

void TensorParallelGpt::forward_block(int l) {
  const Device& d = params_.device();
  const BlockModules& b = m_->blocks[l];
  const BlockActs& a = a_->blocks[l];
  const int t = tp_.size(), C = config_.channels, N = B_ * T_, R = rows(), cl = C / t, hl = 4 * C / t;
  const float* x = stream(l - 1);
  double started = tp_.now();
  b.ln1.forward(d, a.ln1, x, R);
  tp_.record_compute(fmt::format("forward block {} ln1", l), started, 0);
  column_parallel_forward(group(), b.qkv, a.qkv.value, a.ln1.out.value, a.ln1_gathered.value);  // f, this rank's heads
  started = tp_.now();
  d.attention_forward(a.heads_out.value, a.preatt.value, a.att.value, a.qkv.value, B_, T_, cl, config_.heads / t);
  tp_.record_compute(fmt::format("forward block {} attention", l), started, ops::attention_flops(B_, T_, cl));
  row_parallel_forward(group(), b.proj, a.attn_partial.value, a.attn_out.value, a.heads_out.value);  // then g
  started = tp_.now();
  d.residual_forward(a.residual.value, x, a.attn_out.value, R * C);
  b.ln2.forward(d, a.ln2, a.residual.value, R);
  tp_.record_compute(fmt::format("forward block {} ln2", l), started, 0);
  column_parallel_forward(group(), b.fc, a.hidden.value, a.ln2.out.value, a.ln2_gathered.value);  // f, 4C/t features
  started = tp_.now();
  d.gelu_forward(a.gelu.value, a.hidden.value, N * hl);
  tp_.record_compute(fmt::format("forward block {} gelu", l), started, 0);
  row_parallel_forward(group(), b.fc_proj, a.mlp_partial.value, a.mlp_out.value, a.gelu.value);  // then g
  d.residual_forward(a.out.value, a.residual.value, a.mlp_out.value, R * C);
}

// The tied head gives this rank the logits of its vocabulary slice. The
// softmax needs every rank's: the row's largest logit by an allreduce (max),
// then the sum of exponentials and the target's logit by one allreduce (sum),
// the target's from the rank whose slice holds it. Padding columns are -inf.
float TensorParallelGpt::vocab_parallel_cross_entropy(const std::vector<int>& targets) {
  const Device& d = params_.device();
  const int C = config_.channels, N = B_ * T_, vl = vocab_local_, first = tp_.rank() * vl;
  targets_ = IndexTensor::from_host(targets, {std::size_t(N)}, d.kind);
  double started = tp_.now();
  m_->lnf.forward(d, a_->lnf, stream(config_.layers - 1), rows());
  tp_.record_compute("forward lnf", started, 0);
  gather_rows(a_->lnf.out.value, a_->lnf_gathered.value);  // f
  started = tp_.now();
  float* logits = a_->logits.value;
  d.matmul_forward(logits, a_->lnf_gathered.value, m_->wte.value, nullptr, N, C, vl);
  d.vocab_slice_max(largest_.data(), logits, first, config_.vocab, N, vl);
  tp_.record_compute("forward head", started, ops::matmul_flops(N, C, vl));
  all_reduce(largest_.data(), largest_.size(), ReduceOp::max);
  d.vocab_slice_exp_sums(sums_.data(), logits, largest_.data(), targets_.data(), first, N, vl);
  all_reduce(sums_.data(), sums_.size());
  d.vocab_slice_softmax(a_->probs.value, a_->losses.value, logits, largest_.data(), sums_.data(), N, vl);
  return mean_loss(d, a_->losses.value, N);
}

void TensorParallelGpt::backward() {
  const Device& d = params_.device();
  const int C = config_.channels, N = B_ * T_, vl = vocab_local_, first = tp_.rank() * vl, last = config_.layers - 1;
  double started = tp_.now();
  // d loss / d logit = (p - 1[target]) / N, on this rank's columns.
  float* dlogits = a_->logits.grad;
  d.vocab_slice_crossentropy_backward(dlogits, a_->probs.value, targets_.data(), first, N, vl);
  // The head's input is still whole: with sequence parallelism nothing has used the scratch since the forward
  // gathered it, and the gradient's scratch is as the forward cleared it.
  d.matmul_backward(a_->lnf_gathered.grad, m_->wte.grad, nullptr, dlogits, a_->lnf_gathered.value, m_->wte.value, N,
                    C, vl);
  tp_.record_compute("backward head", started, 2 * ops::matmul_flops(N, C, vl));
  sum_partials(a_->lnf_gathered.grad, a_->lnf.out.grad);  // f's backward: each rank held part of the head's input gradient
  started = tp_.now();
  m_->lnf.backward(d, stream_grad(last), a_->lnf, stream(last), rows());
  tp_.record_compute("backward lnf", started, 0);
  for (int l = last; l >= 0; --l) backward_block(l);
  // The embedding: its rows' tokens to this rank's table, the positions to every rank's.
  gather_rows(a_->encoded.grad, a_->embed_partial.grad);
  started = tp_.now();
  d.vocab_slice_encoder_backward(m_->wte.grad, m_->wpe.grad, a_->embed_partial.grad, tokens_.data(), first, vl, B_, T_,
                                 C);
  tp_.record_compute("backward embeddings", started, 0);
  if (sequence_parallel_) sum_norm_gradients();
}

void TensorParallelGpt::backward_block(int l) {
  const Device& d = params_.device();
  const BlockModules& b = m_->blocks[l];
  const BlockActs& a = a_->blocks[l];
  const int t = tp_.size(), C = config_.channels, N = B_ * T_, R = rows(), cl = C / t, hl = 4 * C / t;
  const float* x = stream(l - 1);
  float* dx = stream_grad(l - 1);
  d.residual_backward(a.residual.grad, a.mlp_out.grad, a.out.grad, R * C);
  gather_rows(a.mlp_out.grad, a.mlp_partial.grad);  // g's backward
  double started = tp_.now();
  b.fc_proj.backward(d, a.gelu.grad, a.mlp_partial.grad, a.gelu.value, N);
  d.gelu_backward(a.hidden.grad, a.hidden.value, a.gelu.grad, N * hl);
  tp_.record_compute(fmt::format("backward block {} mlp", l), started, 2 * ops::matmul_flops(N, hl, C));
  clear_whole_gradient();
  column_parallel_backward(group(), b.fc, a.ln2_gathered.grad, a.ln2.out.grad, a.hidden.grad, a.ln2.out.value,
                           a.ln2_gathered.value);  // ln2's output again, then f's backward
  started = tp_.now();
  b.ln2.backward(d, a.residual.grad, a.ln2, a.residual.value, R);
  d.residual_backward(dx, a.attn_out.grad, a.residual.grad, R * C);
  tp_.record_compute(fmt::format("backward block {} ln2", l), started, 0);
  gather_rows(a.attn_out.grad, a.attn_partial.grad);  // g's backward
  started = tp_.now();
  b.proj.backward(d, a.heads_out.grad, a.attn_partial.grad, a.heads_out.value, N);
  d.attention_backward(a.qkv.grad, a.preatt.grad, a.att.grad, a.heads_out.grad, a.qkv.value, a.att.value, B_, T_, cl,
                       config_.heads / t);
  tp_.record_compute(fmt::format("backward block {} attention", l), started,
                     2 * (ops::attention_flops(B_, T_, cl) + ops::matmul_flops(N, cl, C)));
  clear_whole_gradient();
  column_parallel_backward(group(), b.qkv, a.ln1_gathered.grad, a.ln1.out.grad, a.qkv.grad, a.ln1.out.value,
                           a.ln1_gathered.value);  // ln1's output again, then f's backward
  started = tp_.now();
  b.ln1.backward(d, dx, a.ln1, x, R);
  tp_.record_compute(fmt::format("backward block {} ln1", l), started, 0);
}

}  // namespace labkit
