#include "labkit/modules.h"

namespace labkit {

Linear::Linear(Arena& params, int in, int out, bool bias)
    : in(in), out(out), weight(params.allocate(std::size_t(out) * in)), bias(bias ? params.allocate(out) : Slice{}) {}

void Linear::forward(const Device& d, float* y, const float* x, int N) const {
  d.matmul_forward(y, x, weight.value, bias.value, N, in, out);
}

void Linear::backward(const Device& d, float* dx, const float* dy, const float* x, int N, BackwardPart part) const {
  const bool input = part != BackwardPart::weights, weights = part != BackwardPart::input;
  d.matmul_backward(input ? dx : nullptr, weights ? weight.grad : nullptr, weights ? bias.grad : nullptr, dy, x,
                    weight.value, N, in, out);
}

LayerNorm::LayerNorm(Arena& params, int C) : C(C), weight(params.allocate(C)), bias(params.allocate(C)) {}

LayerNorm::Acts::Acts(Arena& acts, int N, int C)
    : out(acts.allocate(std::size_t(N) * C)), mean(acts.allocate(N)), rstd(acts.allocate(N)) {}

void LayerNorm::forward(const Device& d, const Acts& a, const float* x, int N) const {
  d.layernorm_forward(a.out.value, a.mean.value, a.rstd.value, x, weight.value, bias.value, N, C);
}

void LayerNorm::backward(const Device& d, float* dx, const Acts& a, const float* x, int N) const {
  d.layernorm_backward(dx, weight.grad, bias.grad, a.out.grad, x, weight.value, a.mean.value, a.rstd.value, N, C);
}

Mlp::Mlp(Arena& params, int C) : fc(params, C, 4 * C), proj(params, 4 * C, C) {}

Mlp::Acts::Acts(Arena& acts, int N, int C)
    : hidden(acts.allocate(std::size_t(N) * 4 * C)), gelu(acts.allocate(std::size_t(N) * 4 * C)),
      out(acts.allocate(std::size_t(N) * C)) {}

void Mlp::forward(const Device& d, const Acts& a, const float* x, int N) const {
  fc.forward(d, a.hidden.value, x, N);
  d.gelu_forward(a.gelu.value, a.hidden.value, N * fc.out);
  proj.forward(d, a.out.value, a.gelu.value, N);
}

void Mlp::backward(const Device& d, float* dx, const Acts& a, const float* x, int N, BackwardPart part) const {
  proj.backward(d, a.gelu.grad, a.out.grad, a.gelu.value, N, part);
  if (part != BackwardPart::weights) d.gelu_backward(a.hidden.grad, a.hidden.value, a.gelu.grad, N * fc.out);
  fc.backward(d, dx, a.hidden.grad, x, N, part);
}

CausalSelfAttention::CausalSelfAttention(Arena& params, int C, int heads)
    : qkv(params, C, 3 * C), proj(params, C, C), heads(heads) {}

CausalSelfAttention::Acts::Acts(Arena& acts, int B, int T, int C, int NH)
    : qkv(acts.allocate(std::size_t(B) * T * 3 * C)), heads_out(acts.allocate(std::size_t(B) * T * C)),
      preatt(acts.allocate(std::size_t(B) * NH * T * T)), att(acts.allocate(std::size_t(B) * NH * T * T)),
      out(acts.allocate(std::size_t(B) * T * C)) {}

void CausalSelfAttention::forward(const Device& d, const Acts& a, const float* x, int B, int T) const {
  qkv.forward(d, a.qkv.value, x, B * T);
  d.attention_forward(a.heads_out.value, a.preatt.value, a.att.value, a.qkv.value, B, T, proj.in, heads);
  proj.forward(d, a.out.value, a.heads_out.value, B * T);
}

void CausalSelfAttention::backward(const Device& d, float* dx, const Acts& a, const float* x, int B, int T,
                                   BackwardPart part) const {
  proj.backward(d, a.heads_out.grad, a.out.grad, a.heads_out.value, B * T, part);
  if (part != BackwardPart::weights)
    d.attention_backward(a.qkv.grad, a.preatt.grad, a.att.grad, a.heads_out.grad, a.qkv.value, a.att.value, B, T,
                         proj.in, heads);
  qkv.backward(d, dx, a.qkv.grad, x, B * T, part);
}

Block::Block(Arena& params, int C, int heads)
    : ln1(params, C), attn(params, C, heads), ln2(params, C), mlp(params, C) {}

Block::Acts::Acts(Arena& acts, int B, int T, int C, int NH)
    : ln1(acts, B * T, C), attn(acts, B, T, C, NH), residual(acts.allocate(std::size_t(B) * T * C)),
      ln2(acts, B * T, C), mlp(acts, B * T, C), out(acts.allocate(std::size_t(B) * T * C)) {}

void Block::forward(const Device& d, const Acts& a, const float* x, int B, int T) const {
  const int N = B * T, n = N * ln1.C;
  ln1.forward(d, a.ln1, x, N);
  attn.forward(d, a.attn, a.ln1.out.value, B, T);
  d.residual_forward(a.residual.value, x, a.attn.out.value, n);
  ln2.forward(d, a.ln2, a.residual.value, N);
  mlp.forward(d, a.mlp, a.ln2.out.value, N);
  d.residual_forward(a.out.value, a.residual.value, a.mlp.out.value, n);
}

void Block::backward(const Device& d, float* dx, const Acts& a, const float* x, int B, int T, BackwardPart part) const {
  const int N = B * T, n = N * ln1.C;
  if (part == BackwardPart::weights) {  // the four Linears, from the gradients the input's part left
    mlp.backward(d, nullptr, a.mlp, a.ln2.out.value, N, part);
    attn.backward(d, nullptr, a.attn, a.ln1.out.value, B, T, part);
    return;
  }
  d.residual_backward(a.residual.grad, a.mlp.out.grad, a.out.grad, n);
  mlp.backward(d, a.ln2.out.grad, a.mlp, a.ln2.out.value, N, part);
  ln2.backward(d, a.residual.grad, a.ln2, a.residual.value, N);
  d.residual_backward(dx, a.attn.out.grad, a.residual.grad, n);
  attn.backward(d, a.ln1.out.grad, a.attn, a.ln1.out.value, B, T, part);
  ln1.backward(d, dx, a.ln1, x, N);
}

}  // namespace labkit
