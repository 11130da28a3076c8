#include "labkit/op_bench.h"

#include <algorithm>
#include <chrono>
#include <random>

#include "labkit/ops.h"

namespace labkit {

namespace {
constexpr double F = sizeof(float);  // bytes per element: the ops run in fp32

// n floats of a device's memory, zero-filled, released when it goes.
struct DeviceFloats {
  const Device& device;
  float* p;
  DeviceFloats(const Device& d, std::size_t n) : device(d), p(static_cast<float*>(d.allocate(n * sizeof(float)))) {}
  ~DeviceFloats() { device.release(p); }
};

// What the ops work in: inputs, outputs and their gradients for the widest op
// (the MLP's 4C or the vocabulary), attention's (B,NH,T,T) scores, AdamW's state;
// `vector` holds a bias or the position table (T,C), whichever is larger.
struct Sizes {
  int B, T, C, NH, V;
  std::size_t N, width, vector, scores, params;
  Sizes(const GptConfig& c, int B)
      : B(B), T(c.max_seq), C(c.channels), NH(c.heads), V(c.vocab), N(std::size_t(B) * c.max_seq),
        width(std::max(4 * c.channels, c.vocab)), vector(std::max<std::size_t>(width, std::size_t(T) * C)),
        scores(std::size_t(B) * c.heads * c.max_seq * c.max_seq),
        params(std::size_t(memory::count_parameters(architecture_of(c)).total)) {}
};
}  // namespace

struct GptOpBench::Buffers {
  const Device& device;
  float *in, *out, *dout, *dinp, *weight, *dweight, *bias, *dbias, *mean, *rstd;
  float *preatt, *att, *dpreatt, *datt, *losses, *dlosses, *params, *grads, *m, *v;
  int* tokens;  // token ids, and the targets: uniform in [0, V)
  std::vector<void*> owned;

  Buffers(const Sizes& s, const Device& d) : device(d) {
    const std::size_t rows = s.N * s.width, weights = std::size_t(s.width) * s.width;
    in = take(rows, true), out = take(rows), dout = take(rows, true), dinp = take(rows);
    weight = take(weights, true), dweight = take(weights), bias = take(s.vector, true), dbias = take(s.vector);
    mean = take(s.N), rstd = take(s.N, true), losses = take(s.N), dlosses = take(s.N, true);
    preatt = take(s.scores), att = take(s.scores, true), dpreatt = take(s.scores), datt = take(s.scores);
    params = take(s.params, true), grads = take(s.params, true), m = take(s.params), v = take(s.params);
    std::mt19937 rng(1);
    std::vector<int> ids(s.N);
    for (int& id : ids) id = int(rng() % unsigned(s.V));
    tokens = static_cast<int*>(allocate(s.N * sizeof(int)));
    device.copy_from_host(tokens, ids.data(), s.N * sizeof(int));
  }
  ~Buffers() {
    for (void* p : owned) device.release(p);
  }
  void* allocate(std::size_t bytes) { return owned.emplace_back(device.allocate(bytes)); }
  // n floats, zero or (`values`) uniform in [-1, 1): finite inputs whatever an op does with them.
  float* take(std::size_t n, bool values = false) {
    float* p = static_cast<float*>(allocate(n * sizeof(float)));
    if (values) {
      std::mt19937 rng{std::uint32_t(n)};
      std::uniform_real_distribution<float> uniform(-1, 1);
      std::vector<float> host(n);
      for (float& x : host) x = uniform(rng);
      device.copy_from_host(p, host.data(), n * sizeof(float));
    }
    return p;
  }
};

namespace {
using Add = std::function<void(OpCost, std::function<void()>)>;

// A linear layer (N,C) -> (N,OC), weight (OC,C), with a bias or not.
void linear(const Add& add, const std::string& name, const Sizes& s, int C, int OC, bool biased, const Device& d,
            GptOpBench::Buffers* b) {
  const double N = double(s.N), bias = biased ? OC : 0;
  add({name, "forward", ops::matmul_flops(s.N, C, OC) + N * bias, F * (N * C + double(OC) * C + bias + N * OC)},
      [=, &d] { d.matmul_forward(b->out, b->in, b->weight, biased ? b->bias : nullptr, s.N, C, OC); });
  add({name, "backward", 2 * ops::matmul_flops(s.N, C, OC) + N * bias,
       F * (N * OC + N * C + double(OC) * C + 2 * N * C + 2.0 * OC * C + 2 * bias)},
      [=, &d] {
        d.matmul_backward(b->dinp, b->dweight, biased ? b->dbias : nullptr, b->dout, b->in, b->weight, s.N, C, OC);
      });
}

// Every op of a training step, in the order a step runs them (one of each shape).
void each_op(const GptConfig& c, int B, const Add& add, const Device& d, GptOpBench::Buffers* b) {
  const Sizes s(c, B);
  const double N = double(s.N), NC = N * s.C, NV = N * s.V, H = double(4 * s.C) * N, S = double(s.scores);
  const int C = s.C, V = s.V, T = s.T, NH = s.NH;
  // Forward. The encoder adds rows of wte (V,C) and wpe (T,C): the tables are read once.
  add({"encoder", "forward", NC, F * (N + double(V) * C + double(T) * C + NC)},
      [=, &d] { d.encoder_forward(b->out, b->tokens, b->weight, b->bias, B, T, C); });
  // LayerNorm: mean (1), variance (3), normalise, scale and shift (4) per element.
  add({"layernorm", "forward", 8 * NC, F * (NC + 2.0 * C + NC + 2 * N)},
      [=, &d] { d.layernorm_forward(b->out, b->mean, b->rstd, b->in, b->weight, b->bias, s.N, C); });
  linear(add, "matmul qkv (C->3C)", s, C, 3 * C, true, d, b);
  // Attention reads q, k, v (N,3C), writes the scores before and after softmax and the output.
  add({"attention", "forward", ops::attention_flops(B, T, C), F * (3 * NC + 2 * S + NC)},
      [=, &d] { d.attention_forward(b->out, b->preatt, b->att, b->in, B, T, C, NH); });
  linear(add, "matmul proj (C->C)", s, C, C, true, d, b);
  add({"residual", "forward", NC, F * 3 * NC}, [=, &d] { d.residual_forward(b->out, b->in, b->dout, s.N * C); });
  linear(add, "matmul fc (C->4C)", s, C, 4 * C, true, d, b);
  // GELU's tanh form: 9 per element, tanh as one.
  add({"gelu", "forward", 9 * H, F * 2 * H}, [=, &d] { d.gelu_forward(b->out, b->in, int(H)); });
  linear(add, "matmul fcproj (4C->C)", s, 4 * C, C, true, d, b);
  linear(add, "matmul head (C->V)", s, C, V, false, d, b);
  // Softmax: max, subtract and exp, sum, divide: 4 per logit.
  add({"softmax", "forward", 4 * NV, F * 2 * NV}, [=, &d] { d.softmax_forward(b->out, b->in, s.N, V); });
  add({"crossentropy", "forward", N, F * 3 * N},
      [=, &d] { d.crossentropy_forward(b->losses, b->in, b->tokens, s.N, V); });
  // Backward: softmax and cross-entropy fused, 3 per logit; dlogits accumulated.
  add({"crossentropy+softmax", "backward", 3 * NV, F * (NV + 2 * N + 2 * NV)},
      [=, &d] { d.crossentropy_softmax_backward(b->dinp, b->dlosses, b->in, b->tokens, s.N, V); });
  // GELU's derivative: 18 per element; dinp accumulated.
  add({"gelu", "backward", 18 * H, F * 4 * H}, [=, &d] { d.gelu_backward(b->dinp, b->in, b->dout, int(H)); });
  add({"residual", "backward", 2 * NC, F * 5 * NC},
      [=, &d] { d.residual_backward(b->dinp, b->out, b->dout, s.N * C); });
  add({"attention", "backward", 2 * ops::attention_flops(B, T, C), F * (NC + 3 * NC + S + 2 * 3 * NC + 4 * S)},
      [=, &d] { d.attention_backward(b->dinp, b->dpreatt, b->datt, b->dout, b->in, b->att, B, T, C, NH); });
  // LayerNorm's: two row reductions (6), then dinp, dweight, dbias (8) per element.
  add({"layernorm", "backward", 14 * NC, F * (2 * NC + C + 2 * N + 2 * NC + 4.0 * C)},
      [=, &d] {
        d.layernorm_backward(b->dinp, b->dweight, b->dbias, b->dout, b->in, b->weight, b->mean, b->rstd, s.N, C);
      });
  add({"encoder", "backward", 2 * NC, F * (NC + N + 2.0 * V * C + 2.0 * T * C)},
      [=, &d] { d.encoder_backward(b->dweight, b->dbias, b->dout, b->tokens, B, T, C); });
  // AdamW: the moments (3 + 4), the update (8 with sqrt and the divisions) per
  // parameter; reads the gradients, reads and writes the weights, m and v.
  const double P = double(s.params);
  const ops::AdamWStep step{.lr = 1e-4f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                            .correct1 = 0.1f, .correct2 = 0.05f, .bf16_weights = false};
  add({"adamw", "update", 15 * P, F * 7 * P},
      [=, &d] { d.adamw_update(b->params, nullptr, b->grads, b->m, b->v, long(s.params), step); });
}
}  // namespace

std::vector<OpCost> gpt_op_costs(const GptConfig& config, int B) {
  std::vector<OpCost> costs;
  each_op(config, B, [&](OpCost cost, auto) { costs.push_back(cost); }, device(DeviceKind::cpu), nullptr);
  return costs;
}

double best_seconds(const Device& device, const std::function<void()>& op, double min_seconds, int min_calls) {
  using clock = std::chrono::steady_clock;
  op();  // warm up: first touch of the pages, cuBLAS's handle
  device.synchronize();
  double best = 1e30, total = 0;
  for (int calls = 0; calls < min_calls || total < min_seconds; ++calls) {
    const auto start = clock::now();
    op();
    device.synchronize();
    const double took = std::chrono::duration<double>(clock::now() - start).count();
    best = std::min(best, took);
    total += took;
  }
  return best;
}

double measure_peak_flops(const Device& device, int n) {
  const DeviceFloats a(device, std::size_t(n) * n), w(device, std::size_t(n) * n), out(device, std::size_t(n) * n);
  const auto matmul = [&] { device.matmul_forward(out.p, a.p, w.p, nullptr, n, n, n); };
  const double seconds = best_seconds(device, matmul, 0.5);  // long enough to see the clock settle
  return ops::matmul_flops(n, n, n) / seconds;
}

double measure_bandwidth(const Device& device, std::size_t bytes_per_array) {
  const std::size_t n = bytes_per_array / sizeof(float);
  const DeviceFloats a(device, n), b(device, n), out(device, n);
  const double seconds = best_seconds(device, [&] { device.residual_forward(out.p, a.p, b.p, int(n)); });
  return 3 * F * double(n) / seconds;
}

GptOpBench::GptOpBench(const GptConfig& config, int B, const Device& device)
    : device_(device), buffers_(std::make_unique<Buffers>(Sizes(config, B), device)) {
  each_op(config, B, [&](OpCost cost, std::function<void()> call) {
    costs_.push_back(cost);
    calls_.push_back(std::move(call));
  }, device, buffers_.get());
}

GptOpBench::~GptOpBench() = default;

double GptOpBench::best_seconds(std::size_t op, double min_seconds) const {
  return labkit::best_seconds(device_, calls_.at(op), min_seconds);
}

}  // namespace labkit
