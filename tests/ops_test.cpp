// Gradient checks: every op's backward against central finite differences of
// the same op in double precision, with loss = sum(out * G) for a fixed random G
// (so dout = G). Then float against double, to float's precision.
#include <cmath>
#include <functional>
#include <random>

#include <gtest/gtest.h>

#include "labkit/ops.h"
#include "labkit/tensor_parallel.h"

using namespace labkit::ops;
using Vec = std::vector<double>;

namespace {
Vec random(std::size_t n, std::uint32_t seed, double lo = -1, double hi = 1) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Vec v(n);
  for (double& x : v) x = u(gen);
  return v;
}

double dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (std::size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Compares analytic[i] with (loss(x + eps e_i) - loss(x - eps e_i)) / 2 eps for every i.
void check(Vec& x, const Vec& analytic, const std::function<double()>& loss, const char* what) {
  constexpr double eps = 1e-6;
  ASSERT_EQ(x.size(), analytic.size()) << what;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + eps;
    const double up = loss();
    x[i] = saved - eps;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * eps);
    EXPECT_NEAR(analytic[i], numeric, 1e-6 * std::max(1.0, std::abs(numeric))) << what << ", element " << i;
  }
}
}  // namespace

TEST(Gradients, Matmul) {
  const int N = 3, C = 4, OC = 5;
  Vec inp = random(N * C, 1), w = random(OC * C, 2), b = random(OC, 3), G = random(N * OC, 4), out(N * OC);
  auto loss = [&] {
    matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
    return dot(out, G);
  };
  Vec dinp(N * C), dw(OC * C), db(OC);
  loss();
  matmul_backward(dinp.data(), dw.data(), db.data(), G.data(), inp.data(), w.data(), N, C, OC);
  check(inp, dinp, loss, "matmul dinp");
  check(w, dw, loss, "matmul dweight");
  check(b, db, loss, "matmul dbias");
}

TEST(Gradients, ElementwiseAndSoftmax) {
  const int n = 12, V = 4;
  Vec x = random(n, 5, 0.05, 2), G = random(n, 6), out(n);
  for (std::size_t i = 0; i < x.size(); i += 2) x[i] = -x[i];  // both signs, none near ReLU's kink
  struct { const char* name; void (*fwd)(double*, const double*, int); void (*bwd)(double*, const double*, const double*, int); } ops[] = {
      {"gelu", gelu_forward<double>, gelu_backward<double>}, {"relu", relu_forward<double>, relu_backward<double>}};
  for (auto op : ops) {
    auto loss = [&] {
      op.fwd(out.data(), x.data(), n);
      return dot(out, G);
    };
    Vec dx(n);
    op.bwd(dx.data(), x.data(), G.data(), n);
    check(x, dx, loss, op.name);
  }
  auto loss = [&] {
    softmax_forward(out.data(), x.data(), n / V, V);
    return dot(out, G);
  };
  loss();
  Vec probs = out, dx(n);
  softmax_backward(dx.data(), probs.data(), G.data(), n / V, V);
  check(x, dx, loss, "softmax");
}

TEST(Gradients, LayerNorm) {
  const int N = 3, C = 5;
  Vec x = random(N * C, 7), w = random(C, 8), b = random(C, 9), G = random(N * C, 10), out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return dot(out, G);
  };
  loss();
  Vec dx(N * C), dw(C), db(C);
  layernorm_backward(dx.data(), dw.data(), db.data(), G.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  check(x, dx, loss, "layernorm dinp");
  check(w, dw, loss, "layernorm dweight");
  check(b, db, loss, "layernorm dbias");
}

TEST(Gradients, CausalAttention) {
  const int B = 2, T = 3, C = 4, NH = 2;
  Vec inp = random(B * T * 3 * C, 11), G = random(B * T * C, 12), out(B * T * C), pre(B * NH * T * T), att(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), pre.data(), att.data(), inp.data(), B, T, C, NH);
    return dot(out, G);
  };
  loss();
  Vec dinp(inp.size()), dpre(pre.size()), datt(att.size());
  attention_backward(dinp.data(), dpre.data(), datt.data(), G.data(), inp.data(), att.data(), B, T, C, NH);
  check(inp, dinp, loss, "attention dinp");
  // Causal: the first position attends only to itself.
  for (int t2 = 1; t2 < T; ++t2) EXPECT_EQ(att[t2], 0.0);
  EXPECT_DOUBLE_EQ(att[0], 1.0);
}

TEST(Gradients, EmbeddingsAndCrossEntropy) {
  const int B = 2, T = 3, C = 4, V = 5;
  const std::vector<int> tokens = {1, 4, 0, 2, 2, 3};
  Vec wte = random(V * C, 13), wpe = random(T * C, 14), G = random(B * T * C, 15), out(B * T * C);
  auto embed = [&] {
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(out, G);
  };
  Vec dwte(V * C), dwpe(T * C);
  encoder_backward(dwte.data(), dwpe.data(), G.data(), tokens.data(), B, T, C);
  check(wte, dwte, embed, "embedding dwte");
  check(wpe, dwpe, embed, "embedding dwpe");

  const int N = B * T;
  Vec logits = random(N * V, 16), weights = random(N, 17, 0.1, 1), probs(N * V), losses(N);
  auto loss = [&] {
    softmax_forward(probs.data(), logits.data(), N, V);
    crossentropy_forward(losses.data(), probs.data(), tokens.data(), N, V);
    return dot(losses, weights);
  };
  loss();
  Vec dlogits(N * V);
  crossentropy_softmax_backward(dlogits.data(), weights.data(), probs.data(), tokens.data(), N, V);
  check(logits, dlogits, loss, "softmax + cross-entropy dlogits");
}

TEST(Precision, FloatMatchesDoubleToFloatPrecision) {
  const int N = 16, C = 64, OC = 32;
  const Vec inp = random(N * C, 18), w = random(OC * C, 19);
  Vec out(N * OC);
  matmul_forward(out.data(), inp.data(), w.data(), static_cast<const double*>(nullptr), N, C, OC);
  std::vector<float> fi(inp.begin(), inp.end()), fw(w.begin(), w.end()), fo(N * OC);
  matmul_forward(fo.data(), fi.data(), fw.data(), static_cast<const float*>(nullptr), N, C, OC);
  for (int i = 0; i < N * OC; ++i) EXPECT_NEAR(fo[i], out[i], 1e-5 * std::max(1.0, std::abs(out[i])));
  EXPECT_DOUBLE_EQ(matmul_flops(N, C, OC), 2.0 * N * C * OC);
}

TEST(TensorParallel, ColumnThenRowParallelMlpEqualsTheWholeMlp) {
  // y = gelu(x W1^T + b1) W2^T + b2 with W1 (H, C) split by columns (rows of W1)
  // and W2 (C, H) split by rows (columns of W2): each of p ranks computes a
  // partial y; their sum (the all-reduce) plus b2 is the unsplit MLP.
  const int N = 4, C = 8, H = 32, p = 4;
  auto f = [](const Vec& v) { return std::vector<float>(v.begin(), v.end()); };
  const std::vector<float> x = f(random(N * C, 20)), w1 = f(random(H * C, 21)), b1 = f(random(H, 22)),
                           w2 = f(random(C * H, 23)), b2 = f(random(C, 24));
  std::vector<float> h(N * H), g(N * H), y(N * C);
  matmul_forward(h.data(), x.data(), w1.data(), b1.data(), N, C, H);
  gelu_forward(g.data(), h.data(), N * H);
  matmul_forward(y.data(), g.data(), w2.data(), b2.data(), N, H, C);

  std::vector<float> sum(N * C, 0.0f);
  const int slice = H / p;
  for (int r = 0; r < p; ++r) {
    const std::vector<float> w1_r = labkit::column_shard(w1, H, C, p, r), w2_r = labkit::row_shard(w2, C, H, p, r);
    const std::vector<float> b1_r(b1.begin() + r * slice, b1.begin() + (r + 1) * slice);
    std::vector<float> h_r(N * slice), g_r(N * slice), y_r(N * C);
    matmul_forward(h_r.data(), x.data(), w1_r.data(), b1_r.data(), N, C, slice);
    gelu_forward(g_r.data(), h_r.data(), N * slice);  // elementwise: no communication
    matmul_forward(y_r.data(), g_r.data(), w2_r.data(), static_cast<const float*>(nullptr), N, slice, C);
    for (int i = 0; i < N * C; ++i) sum[i] += y_r[i];
  }
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(sum[i] + b2[i % C], y[i], 1e-5) << "element " << i;
  EXPECT_THROW(labkit::column_shard(w1, H, C, 5, 0), std::invalid_argument);
}
