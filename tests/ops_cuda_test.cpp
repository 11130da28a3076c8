// The CUDA ops agree with the CPU ops to 1e-5 (relative to max(1, |value|)).
// On a GPU, and in the asan build on the CPU's CUDA (core/src/cuda_emulation),
// where every kernel runs under the sanitizers; in a build for a GPU on a
// machine without one, every test but the first is skipped and says so.
#include <algorithm>
#include <cmath>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "labkit/asan_stacks.h"
#include "labkit/device.h"
#include "labkit/gpt.h"
#include "labkit/optim.h"
#include "labkit/ops.h"
#include "labkit/ops_cuda.h"

namespace cpu = labkit::ops;
namespace gpu = labkit::ops::cuda;

namespace {
std::vector<float> random(std::size_t n, std::uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  std::vector<float> v(n);
  for (float& x : v) x = u(gen);
  return v;
}

// A device copy of a host vector, copied back with host().
template <class T> struct OnGpu {
  T* ptr = nullptr;
  std::size_t n;
  explicit OnGpu(const std::vector<T>& h) : n(h.size()) {
    cudaMalloc(&ptr, n * sizeof(T));
    cudaMemcpy(ptr, h.data(), n * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~OnGpu() { cudaFree(ptr); }
  std::vector<T> host() const {
    std::vector<T> h(n);
    cudaMemcpy(h.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost);
    return h;
  }
};

void expect_close(const std::vector<float>& gpu_out, const std::vector<float>& cpu_out, const char* what) {
  ASSERT_EQ(gpu_out.size(), cpu_out.size()) << what;
  for (std::size_t i = 0; i < cpu_out.size(); ++i)
    ASSERT_NEAR(gpu_out[i], cpu_out[i], 1e-5 * std::max(1.0f, std::abs(cpu_out[i]))) << what << ", element " << i;
}

class CudaOps : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!labkit::cuda_available()) GTEST_SKIP() << "no CUDA device here: the CPU-GPU agreement was not checked";
  }
};
bool cublas_mapped() {
  std::ifstream maps("/proc/self/maps");
  return std::string(std::istreambuf_iterator<char>(maps), {}).find("libcublas") != std::string::npos;
}
}  // namespace

// cuBLAS is opened when a GPU matmul first needs it, so a process on the CPU
// never loads it (libcublasLt's initializers slow every start), nor one whose
// GPU ops so far were not matmuls. It needs a process that has not used cuBLAS:
// the death tests, which gtest runs first, use the GPU but not it. Runs without a GPU.
TEST(CudaLibraries, CublasOpensOnlyWhenAGpuMatmulNeedsIt) {
  const std::vector<float> x = random(4 * 8, 1), w = random(8 * 8, 2);
  std::vector<float> y(4 * 8);
  labkit::device(labkit::DeviceKind::cpu).matmul_forward(y.data(), x.data(), w.data(), nullptr, 4, 8, 8);
  ASSERT_FALSE(cublas_mapped()) << "a process that ran on the CPU has cuBLAS loaded";
  if (labkit::cuda_available()) {
    OnGpu<float> g(y);
    gpu::scale(g.ptr, 2.0f, long(g.n));
    ASSERT_FALSE(cublas_mapped()) << "a process whose only GPU op was a scale has cuBLAS loaded";
  }
  labkit::ops::cuda::open_cublas();
  EXPECT_TRUE(cublas_mapped()) << "open_cublas returned without loading it";
}

TEST_F(CudaOps, MatmulForwardAndBackward) {
  const int N = 150, C = 48, OC = 80;  // rows in three chunks of the column sums, the last a part
  auto inp = random(N * C, 1), w = random(OC * C, 2), b = random(OC, 3), dout = random(N * OC, 4);
  std::vector<float> out(N * OC), dinp(N * C), dw(OC * C), db(OC);
  OnGpu<float> g_inp(inp), g_w(w), g_b(b), g_dout(dout), g_out(out), g_dinp(dinp), g_dw(dw), g_db(db);
  cpu::matmul_forward(out.data(), inp.data(), w.data(), b.data(), N, C, OC);
  cpu::matmul_backward(dinp.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(), N, C, OC);
  gpu::matmul_forward(g_out.ptr, g_inp.ptr, g_w.ptr, g_b.ptr, N, C, OC);
  gpu::matmul_backward(g_dinp.ptr, g_dw.ptr, g_db.ptr, g_dout.ptr, g_inp.ptr, g_w.ptr, N, C, OC);
  expect_close(g_out.host(), out, "matmul out");
  expect_close(g_dinp.host(), dinp, "matmul dinp");
  expect_close(g_dw.host(), dw, "matmul dweight");
  expect_close(g_db.host(), db, "matmul dbias");
}

// No rows at all (an expert that no token chose): nothing launches in error, nothing is written.
TEST_F(CudaOps, MatmulAndGeluOnNoRows) {
  const int C = 48, OC = 80;
  auto inp = random(C, 1), w = random(OC * C, 2), b = random(OC, 3), dout = random(OC, 4), dw = random(OC * C, 5),
       db = random(OC, 6);
  OnGpu<float> g_inp(inp), g_w(w), g_b(b), g_dout(dout), g_out(dout), g_dinp(inp), g_dw(dw), g_db(db);
  gpu::matmul_forward(g_out.ptr, g_inp.ptr, g_w.ptr, g_b.ptr, 0, C, OC);
  gpu::matmul_backward(g_dinp.ptr, g_dw.ptr, g_db.ptr, g_dout.ptr, g_inp.ptr, g_w.ptr, 0, C, OC);
  gpu::gelu_forward(g_out.ptr, g_inp.ptr, 0);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(g_dw.host(), dw) << "dweight with no rows to add";
  EXPECT_EQ(g_db.host(), db) << "dbias with no rows to add";
  EXPECT_EQ(g_out.host(), dout) << "an output of no rows";
}

TEST_F(CudaOps, LayerNormGeluSoftmax) {
  const int N = 150, C = 40;
  auto x = random(N * C, 5), w = random(C, 6), b = random(C, 7), dout = random(N * C, 8);
  std::vector<float> out(N * C), mean(N), rstd(N), dx(N * C), dw(C), db(C), g(N * C), dg(N * C), p(N * C);
  OnGpu<float> g_x(x), g_w(w), g_b(b), g_dout(dout), g_out(out), g_mean(mean), g_rstd(rstd), g_dx(dx), g_dw(dw),
      g_db(db), g_g(g), g_dg(dg), g_p(p);
  cpu::layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
  cpu::layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), x.data(), w.data(), mean.data(), rstd.data(), N, C);
  cpu::gelu_forward(g.data(), x.data(), N * C);
  cpu::gelu_backward(dg.data(), x.data(), dout.data(), N * C);
  cpu::softmax_forward(p.data(), x.data(), N, C);
  gpu::layernorm_forward(g_out.ptr, g_mean.ptr, g_rstd.ptr, g_x.ptr, g_w.ptr, g_b.ptr, N, C);
  gpu::layernorm_backward(g_dx.ptr, g_dw.ptr, g_db.ptr, g_dout.ptr, g_x.ptr, g_w.ptr, g_mean.ptr, g_rstd.ptr, N, C);
  gpu::gelu_forward(g_g.ptr, g_x.ptr, N * C);
  gpu::gelu_backward(g_dg.ptr, g_x.ptr, g_dout.ptr, N * C);
  gpu::softmax_forward(g_p.ptr, g_x.ptr, N, C);
  expect_close(g_out.host(), out, "layernorm out");
  expect_close(g_dx.host(), dx, "layernorm dinp");
  expect_close(g_dw.host(), dw, "layernorm dweight");
  expect_close(g_db.host(), db, "layernorm dbias");
  expect_close(g_g.host(), g, "gelu");
  expect_close(g_dg.host(), dg, "gelu backward");
  expect_close(g_p.host(), p, "softmax");
}

// Past a warp: rows of 70 positions and heads of 40 channels, which the 32
// lanes of a row's warp take in strides, and the scores' shared tiles of 32
// positions by 32 channels in three and two pieces, the last part-filled; the
// last block of 8 queries holds 6 (70 = 8 x 8 + 6).
TEST_F(CudaOps, AttentionPastAWarpsWidth) {
  const int B = 2, T = 70, C = 80, NH = 2;
  auto qkv = random(B * T * 3 * C, 21), dout = random(B * T * C, 22);
  std::vector<float> out(B * T * C), pre(B * NH * T * T), att(pre.size()), dqkv(qkv.size()), dpre(pre.size()),
      datt(pre.size());
  OnGpu<float> g_qkv(qkv), g_dout(dout), g_out(out), g_pre(pre), g_att(att), g_dqkv(dqkv), g_dpre(dpre), g_datt(datt);
  cpu::attention_forward(out.data(), pre.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), dpre.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  gpu::attention_forward(g_out.ptr, g_pre.ptr, g_att.ptr, g_qkv.ptr, B, T, C, NH);
  gpu::attention_backward(g_dqkv.ptr, g_dpre.ptr, g_datt.ptr, g_dout.ptr, g_qkv.ptr, g_att.ptr, B, T, C, NH);
  expect_close(g_att.host(), att, "attention weights");
  expect_close(g_out.host(), out, "attention out");
  expect_close(g_dpre.host(), dpre, "attention score gradients");
  expect_close(g_dqkv.host(), dqkv, "attention dinp");
}

TEST_F(CudaOps, AttentionEmbeddingsCrossEntropy) {
  const int B = 2, T = 8, C = 16, NH = 4, V = 11;
  auto qkv = random(B * T * 3 * C, 9), dout = random(B * T * C, 10), wte = random(V * C, 11), wpe = random(T * C, 12);
  std::vector<int> tokens(B * T);
  for (int i = 0; i < B * T; ++i) tokens[i] = (i * 7) % V;
  std::vector<float> out(B * T * C), pre(B * NH * T * T), att(B * NH * T * T), dqkv(qkv.size()), dpre(pre.size()),
      datt(att.size()), emb(B * T * C), dwte(V * C), dwpe(T * C);
  OnGpu<float> g_qkv(qkv), g_dout(dout), g_out(out), g_pre(pre), g_att(att), g_dqkv(dqkv), g_dpre(dpre), g_datt(datt),
      g_wte(wte), g_wpe(wpe), g_emb(emb), g_dwte(dwte), g_dwpe(dwpe);
  OnGpu<int> g_tokens(tokens);
  cpu::attention_forward(out.data(), pre.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), dpre.data(), datt.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  cpu::encoder_forward(emb.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  gpu::attention_forward(g_out.ptr, g_pre.ptr, g_att.ptr, g_qkv.ptr, B, T, C, NH);
  gpu::attention_backward(g_dqkv.ptr, g_dpre.ptr, g_datt.ptr, g_dout.ptr, g_qkv.ptr, g_att.ptr, B, T, C, NH);
  gpu::encoder_forward(g_emb.ptr, g_tokens.ptr, g_wte.ptr, g_wpe.ptr, B, T, C);
  gpu::encoder_backward(g_dwte.ptr, g_dwpe.ptr, g_dout.ptr, g_tokens.ptr, B, T, C);
  expect_close(g_out.host(), out, "attention out");
  expect_close(g_dqkv.host(), dqkv, "attention dinp");
  expect_close(g_emb.host(), emb, "embeddings");
  expect_close(g_dwte.host(), dwte, "embeddings dwte");
  expect_close(g_dwpe.host(), dwpe, "embeddings dwpe");

  const int N = B * T;
  auto logits = random(N * V, 13), dloss = random(N, 14);
  std::vector<float> probs(N * V), losses(N), dlogits(N * V);
  cpu::softmax_forward(probs.data(), logits.data(), N, V);
  cpu::crossentropy_forward(losses.data(), probs.data(), tokens.data(), N, V);
  cpu::crossentropy_softmax_backward(dlogits.data(), dloss.data(), probs.data(), tokens.data(), N, V);
  const std::vector<float> no_losses(N), no_dlogits(N * V);
  OnGpu<float> g_probs(probs), g_losses(no_losses), g_dloss(dloss), g_dlogits(no_dlogits);
  gpu::crossentropy_forward(g_losses.ptr, g_probs.ptr, g_tokens.ptr, N, V);
  gpu::crossentropy_softmax_backward(g_dlogits.ptr, g_dloss.ptr, g_probs.ptr, g_tokens.ptr, N, V);
  expect_close(g_losses.host(), losses, "cross-entropy");
  expect_close(g_dlogits.host(), dlogits, "cross-entropy backward");
}

TEST_F(CudaOps, ReluAndSoftmaxBackward) {
  const int N = 24, V = 37;
  auto x = random(N * V, 19), dout = random(N * V, 20);
  std::vector<float> r(N * V), dr(N * V), p(N * V), dp(N * V);
  cpu::relu_forward(r.data(), x.data(), N * V);
  cpu::relu_backward(dr.data(), x.data(), dout.data(), N * V);
  cpu::softmax_forward(p.data(), x.data(), N, V);
  cpu::softmax_backward(dp.data(), p.data(), dout.data(), N, V);
  OnGpu<float> g_x(x), g_dout(dout), g_r(std::vector<float>(N * V)), g_dr(g_r.host()), g_p(p), g_dp(g_r.host());
  gpu::relu_forward(g_r.ptr, g_x.ptr, N * V);
  gpu::relu_backward(g_dr.ptr, g_x.ptr, g_dout.ptr, N * V);
  gpu::softmax_backward(g_dp.ptr, g_p.ptr, g_dout.ptr, N, V);
  expect_close(g_r.host(), r, "relu");
  expect_close(g_dr.host(), dr, "relu backward");
  expect_close(g_dp.host(), dp, "softmax backward");
}

TEST_F(CudaOps, ResidualAndAdamW) {
  const int n = 1000;
  auto a = random(n, 15), b = random(n, 16), dout = random(n, 17), grads = random(n, 18);
  std::vector<float> out(n), da(n), db(n);
  OnGpu<float> g_a(a), g_b(b), g_dout(dout), g_out(out), g_da(da), g_db(db);
  cpu::residual_forward(out.data(), a.data(), b.data(), n);
  cpu::residual_backward(da.data(), db.data(), dout.data(), n);
  gpu::residual_forward(g_out.ptr, g_a.ptr, g_b.ptr, n);
  gpu::residual_backward(g_da.ptr, g_db.ptr, g_dout.ptr, n);
  expect_close(g_out.host(), out, "residual");
  expect_close(g_da.host(), da, "residual backward");
  for (bool bf16 : {false, true}) {
    std::vector<float> w = a, master = a, m(n), v(n);
    OnGpu<float> g_w(w), g_master(master), g_grads(grads), g_m(m), g_v(v);
    const cpu::AdamWStep step{.lr = 1e-2f, .beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f,
                              .correct1 = 0.1f, .correct2 = 0.05f, .bf16_weights = bf16};
    float* master_or_null = bf16 ? master.data() : nullptr;
    cpu::adamw_update(w.data(), master_or_null, grads.data(), m.data(), v.data(), n, step);
    gpu::adamw_update(g_w.ptr, bf16 ? g_master.ptr : nullptr, g_grads.ptr, g_m.ptr, g_v.ptr, n, step);
    expect_close(g_w.host(), w, bf16 ? "adamw bf16 weights" : "adamw weights");
    expect_close(g_m.host(), m, "adamw m");
    expect_close(g_v.host(), v, "adamw v");
    if (bf16) expect_close(g_master.host(), master, "adamw master");
  }
}

// The whole model: the GPT on the GPU computes what the GPT on the CPU does,
// starting from the same weights, through several AdamW steps.
TEST_F(CudaOps, SgdFillScaleAndSumOfSquares) {
  const long n = 5000;
  auto w = random(n, 11), g = random(n, 12), v = random(n, 13);
  OnGpu<float> gw(w), gg(g), gv(v);
  cpu::sgd_momentum_update(w.data(), v.data(), g.data(), n, 0.1f, 0.9f);
  gpu::sgd_momentum_update(gw.ptr, gv.ptr, gg.ptr, n, 0.1f, 0.9f);
  expect_close(gw.host(), w, "sgd_momentum_update: weights");
  expect_close(gv.host(), v, "sgd_momentum_update: velocity");
  const double squares = cpu::sum_of_squares(g.data(), n);
  EXPECT_NEAR(gpu::sum_of_squares(gg.ptr, n), squares, 1e-12 * squares);
  cpu::scale(g.data(), 0.25f, n);
  gpu::scale(gg.ptr, 0.25f, n);
  expect_close(gg.host(), g, "scale");
  cpu::fill(g.data(), 7.0f, n - 1);
  gpu::fill(gg.ptr, 7.0f, n - 1);
  expect_close(gg.host(), g, "fill");
}

#ifdef LABKIT_CUDA_EMULATION
// The CPU's CUDA keeps a made stream's work until something waits for it, so
// that work on another stream, not ordered after it, reads what was there
// before, as it may on a GPU; the legacy stream waits for every stream.
TEST(CudaEmulation, AStreamsWorkWaitsUntilItIsWaitedFor) {
  cudaStream_t writer, reader;
  ASSERT_EQ(cudaStreamCreate(&writer), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(&reader), cudaSuccess);
  OnGpu<float> g(std::vector<float>(4, 1.0f));
  gpu::fill(g.ptr, 1.0f, 4);  // the legacy stream: at once
  ASSERT_EQ(cudaMemsetAsync(g.ptr, 0, 4 * sizeof(float), writer), cudaSuccess);
  std::vector<float> seen(4);
  cudaMemcpyAsync(seen.data(), g.ptr, 4 * sizeof(float), cudaMemcpyDeviceToHost, reader);
  cudaStreamSynchronize(reader);
  EXPECT_EQ(seen, std::vector<float>(4, 1.0f)) << "the reader's stream waited for the writer's";
  EXPECT_EQ(g.host(), std::vector<float>(4, 0.0f)) << "a copy on the legacy stream did not wait for the writer's";
}
#endif

#if defined(LABKIT_CUDA_EMULATION) && defined(LABKIT_ASAN)
// On the CPU's CUDA under AddressSanitizer (the asan build), what a GPU runs
// past unnoticed stops: a kernel reading past its tensor, inside the 512 bytes
// the caching allocator rounds a block to, or a tensor used after its release
// (cuda_caching_allocator.cu). The child re-runs the binary (BLAS keeps threads).
TEST(CudaEmulationDeathTest, AKernelPastItsTensorOrAfterItsReleaseStops) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  const labkit::Device& cuda = labkit::cuda_device();
  auto* p = static_cast<float*>(cuda.allocate(3 * sizeof(float)));
  EXPECT_DEATH(gpu::scale(p, 2.0f, 4), "use-after-poison on address[^\n]*\nREAD of size 4[^\n]*\n[^\n]*scale_kernel");
  gpu::scale(p, 2.0f, 3);
  cuda.release(p);
  EXPECT_DEATH(gpu::fill(p, 1.0f, 1), "use-after-poison on address[^\n]*\nWRITE of size 4[^\n]*\n[^\n]*fill_kernel");
}
#endif

// LARS's and LAMB's pieces: y += a x, and LAMB's direction with its moments.
TEST_F(CudaOps, AxpyAndLambDirection) {
  const long n = 5000;
  auto w = random(n, 14), g = random(n, 15), m = random(n, 16), v = random(n, 17), r = std::vector<float>(n);
  for (float& x : v) x = std::abs(x);  // a second moment
  OnGpu<float> gw(w), gg(g), gm(m), gv(v), gr(r);
  const labkit::ops::LambStep step{.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-6f, .weight_decay = 0.01f,
                                   .correct1 = 1 - 0.9 * 0.9, .correct2 = 1 - 0.999 * 0.999};
  cpu::lamb_direction(r.data(), m.data(), v.data(), g.data(), w.data(), n, step);
  gpu::lamb_direction(gr.ptr, gm.ptr, gv.ptr, gg.ptr, gw.ptr, n, step);
  expect_close(gm.host(), m, "lamb_direction: m");
  expect_close(gv.host(), v, "lamb_direction: v");
  expect_close(gr.host(), r, "lamb_direction: direction");
  cpu::axpy(w.data(), -0.3f, r.data(), n);
  gpu::axpy(gw.ptr, -0.3f, gr.ptr, n);
  expect_close(gw.host(), w, "axpy");
}

// Rank 1's slice, tokens [4, 8): tokens on both sides of it, with the
// positions and without (the rank that does not add them).
TEST_F(CudaOps, VocabSliceEmbedding) {
  const int B = 2, T = 8, C = 16, vocab = 11, V = 4, first = 4, N = B * T;
  auto wte = random(V * C, 20), wpe = random(T * C, 21), dout = random(N * C, 22);
  std::vector<int> tokens(N);
  for (int i = 0; i < N; ++i) tokens[i] = (i * 5) % vocab;
  std::vector<float> emb(N * C), dwte(V * C), dwpe(T * C);
  OnGpu<float> g_wte(wte), g_wpe(wpe), g_dout(dout), g_emb(emb), g_dwte(dwte), g_dwpe(dwpe);
  OnGpu<int> g_tokens(tokens);
  for (const bool positions : {false, true}) {
    cpu::vocab_slice_encoder_forward(emb.data(), tokens.data(), wte.data(), positions ? wpe.data() : nullptr, first, V,
                                     B, T, C);
    cpu::vocab_slice_encoder_backward(dwte.data(), positions ? dwpe.data() : nullptr, dout.data(), tokens.data(), first,
                                      V, B, T, C);
    gpu::vocab_slice_encoder_forward(g_emb.ptr, g_tokens.ptr, g_wte.ptr, positions ? g_wpe.ptr : nullptr, first, V, B,
                                     T, C);
    gpu::vocab_slice_encoder_backward(g_dwte.ptr, positions ? g_dwpe.ptr : nullptr, g_dout.ptr, g_tokens.ptr, first, V,
                                      B, T, C);
    expect_close(g_emb.host(), emb, "vocab slice embeddings");
  }
  expect_close(g_dwte.host(), dwte, "vocab slice dwte");
  expect_close(g_dwpe.host(), dwpe, "vocab slice dwpe");
}

// The cross-entropy of a slice of V words from `first`, of a vocabulary of
// `vocab`: the slice's columns past it are padding, and every target is a word.
void check_vocab_slice_crossentropy(int V, int first, int vocab) {
  const int N = 16;
  auto logits = random(N * V, 23);
  std::vector<int> targets(N);
  for (int i = 0; i < N; ++i) targets[i] = (i * 5) % vocab;
  std::vector<float> largest(N), sums(2 * N), probs(N * V), losses(N), dlogits(N * V);
  OnGpu<float> g_logits(logits), g_largest(largest), g_sums(sums), g_probs(probs), g_losses(losses),
      g_dlogits(dlogits);
  OnGpu<int> g_targets(targets);
  cpu::vocab_slice_max(largest.data(), logits.data(), first, vocab, N, V);
  cpu::vocab_slice_exp_sums(sums.data(), logits.data(), largest.data(), targets.data(), first, N, V);
  cpu::vocab_slice_softmax(probs.data(), losses.data(), logits.data(), largest.data(), sums.data(), N, V);
  cpu::vocab_slice_crossentropy_backward(dlogits.data(), probs.data(), targets.data(), first, N, V);
  gpu::vocab_slice_max(g_largest.ptr, g_logits.ptr, first, vocab, N, V);
  gpu::vocab_slice_exp_sums(g_sums.ptr, g_logits.ptr, g_largest.ptr, g_targets.ptr, first, N, V);
  gpu::vocab_slice_softmax(g_probs.ptr, g_losses.ptr, g_logits.ptr, g_largest.ptr, g_sums.ptr, N, V);
  gpu::vocab_slice_crossentropy_backward(g_dlogits.ptr, g_probs.ptr, g_targets.ptr, first, N, V);
  const std::vector<float> masked = g_logits.host();
  for (int i = 0; i < N; ++i)
    for (int j = vocab - first; j < V; ++j)
      ASSERT_TRUE(std::isinf(masked[i * V + j]) && masked[i * V + j] < 0) << "row " << i << ", padding column " << j;
  expect_close(g_largest.host(), largest, "vocab slice max");
  expect_close(g_sums.host(), sums, "vocab slice sums");
  expect_close(g_probs.host(), probs, "vocab slice probs");
  expect_close(g_losses.host(), losses, "vocab slice losses");
  expect_close(g_dlogits.host(), dlogits, "vocab slice backward");
}

// A slice narrower than a warp (its last column padding), and one of two
// warps' widths and a part (its last five columns padding).
TEST_F(CudaOps, VocabSliceCrossEntropy) {
  check_vocab_slice_crossentropy(4, 4, 7);
  check_vocab_slice_crossentropy(70, 70, 135);
}

namespace {
// The online softmax's fold (exercise 7.4's formula), for the CPU's kernel.
void merge_row(float* out, float& lse, const float* block_out, float block_lse, int hs) {
  const float merged = std::max(lse, block_lse) + std::log1p(std::exp(-std::abs(lse - block_lse)));
  for (int i = 0; i < hs; ++i) out[i] = std::exp(lse - merged) * out[i] + std::exp(block_lse - merged) * block_out[i];
  lse = merged;
}
}  // namespace

// A zig-zag rank's two chunks, [4, 8) and [24, 28), folding its own block and
// an earlier rank's [0, 4) and [28, 32): keys before, after and among the queries.
void check_attention_blocks(int C, int NH) {
  const int B = 2, L = 8;
  const std::vector<int> queries = {4, 5, 6, 7, 24, 25, 26, 27}, others = {0, 1, 2, 3, 28, 29, 30, 31};
  auto qkv = random(B * L * 3 * C, 30), other_kv = random(B * L * 2 * C, 31), dout = random(B * L * C, 32);
  std::vector<float> own_kv(B * L * 2 * C), out(B * L * C), lse(B * NH * L, -INFINITY), delta(B * NH * L),
      dqkv(qkv.size()), dkv(own_kv.size()), dother(other_kv.size());
  cpu::copy_columns(own_kv.data(), 2 * C, qkv.data() + C, 3 * C, B * L, 2 * C);
  OnGpu<float> g_qkv(qkv), g_own(own_kv), g_other(other_kv), g_dout(dout), g_out(out), g_lse(lse), g_delta(delta),
      g_dqkv(dqkv), g_dkv(dkv), g_dother(dother);
  OnGpu<int> g_queries(queries), g_others(others);
  gpu::copy_columns(g_own.ptr, 2 * C, g_qkv.ptr + C, 3 * C, B * L, 2 * C);
  expect_close(g_own.host(), own_kv, "copy_columns");
  for (const auto& [kv, g_kv, keys, g_keys] : {std::tuple(&own_kv, &g_own, &queries, &g_queries),
                                               std::tuple(&other_kv, &g_other, &others, &g_others)}) {
    cpu::attention_block_forward(out.data(), lse.data(), qkv.data(), kv->data(), queries.data(), keys->data(), B, L, C,
                                 NH, merge_row);
    gpu::attention_block_forward(g_out.ptr, g_lse.ptr, g_qkv.ptr, g_kv->ptr, g_queries.ptr, g_keys->ptr, B, L, C, NH,
                                 nullptr);
  }
  expect_close(g_out.host(), out, "attention_block_forward: out");
  expect_close(g_lse.host(), lse, "attention_block_forward: lse");
  cpu::attention_block_delta(delta.data(), dout.data(), out.data(), B, L, C, NH);
  gpu::attention_block_delta(g_delta.ptr, g_dout.ptr, g_out.ptr, B, L, C, NH);
  expect_close(g_delta.host(), delta, "attention_block_delta");
  cpu::attention_block_backward(dqkv.data(), dkv.data(), qkv.data(), own_kv.data(), dout.data(), lse.data(),
                                delta.data(), queries.data(), queries.data(), B, L, C, NH);
  cpu::attention_block_backward(dqkv.data(), dother.data(), qkv.data(), other_kv.data(), dout.data(), lse.data(),
                                delta.data(), queries.data(), others.data(), B, L, C, NH);
  gpu::attention_block_backward(g_dqkv.ptr, g_dkv.ptr, g_qkv.ptr, g_own.ptr, g_dout.ptr, g_lse.ptr, g_delta.ptr,
                                g_queries.ptr, g_queries.ptr, B, L, C, NH);
  gpu::attention_block_backward(g_dqkv.ptr, g_dother.ptr, g_qkv.ptr, g_other.ptr, g_dout.ptr, g_lse.ptr, g_delta.ptr,
                                g_queries.ptr, g_others.ptr, B, L, C, NH);
  expect_close(g_dqkv.host(), dqkv, "attention_block_backward: dq");
  expect_close(g_dkv.host(), dkv, "attention_block_backward: the own block's dk, dv");
  expect_close(g_dother.host(), dother, "attention_block_backward: the other block's dk, dv");
}

// Heads narrower than a warp, and of two warps' widths and a part.
TEST_F(CudaOps, AttentionBlocks) {
  check_attention_blocks(32, 2);
  check_attention_blocks(80, 1);
}

// 150 values: two whole blocks and a part one (an odd count, so int4's last byte is half used), one block all zeros;
// on the GPU at an odd byte, as a rank's chunk of qgZ's all-to-all lands after the chunk before it.
TEST_F(CudaOps, QuantizeInt8AndInt4) {
  const long n = 150;
  auto x = random(n, 40);
  for (long i = 64; i < 128; ++i) x[i] = 0;
  for (const int bits : {8, 4}) {
    const long bytes = 3 * long(sizeof(float)) + (n * bits + 7) / 8;
    std::vector<unsigned char> wire(bytes);
    std::vector<float> back(n);
    cpu::quantize(wire.data(), x.data(), n, bits);
    cpu::dequantize(back.data(), wire.data(), n, bits);
    OnGpu<float> g_x(x), g_back(back);
    const std::vector<unsigned char> zeros(1 + bytes);
    OnGpu<unsigned char> g_wire(zeros);
    gpu::quantize(g_wire.ptr + 1, g_x.ptr, n, bits);
    gpu::dequantize(g_back.ptr, g_wire.ptr + 1, n, bits);
    const std::vector<unsigned char> sent = g_wire.host();
    EXPECT_EQ(std::vector<unsigned char>(sent.begin() + 1, sent.end()), wire) << bits << " bits: the wire bytes";
    expect_close(g_back.host(), back, bits == 8 ? "dequantize int8" : "dequantize int4");
  }
}

// Rows by index: a gather with and without weights, a scatter-add whose indices repeat, the dots.
TEST_F(CudaOps, RowsByIndex) {
  const int C = 24;
  const long n = 9;
  auto src = random(6 * C, 50), weights = random(n, 51), rows = random(n * C, 52), dst = random(6 * C, 53);
  const std::vector<int> index = {5, 0, 3, 3, 1, 0, 2, 5, 4};
  std::vector<float> gathered(n * C), weighted(n * C), dots(n);
  OnGpu<float> g_src(src), g_weights(weights), g_rows(rows), g_dst(dst), g_gathered(gathered), g_weighted(weighted),
      g_dots(dots);
  OnGpu<int> g_index(index);
  cpu::gather_rows(gathered.data(), src.data(), index.data(), nullptr, n, C);
  cpu::gather_rows(weighted.data(), src.data(), index.data(), weights.data(), n, C);
  cpu::scatter_add_rows(dst.data(), rows.data(), index.data(), weights.data(), n, C);
  cpu::row_dots(dots.data(), src.data(), index.data(), rows.data(), n, C);
  gpu::gather_rows(g_gathered.ptr, g_src.ptr, g_index.ptr, nullptr, n, C);
  gpu::gather_rows(g_weighted.ptr, g_src.ptr, g_index.ptr, g_weights.ptr, n, C);
  gpu::scatter_add_rows(g_dst.ptr, g_rows.ptr, g_index.ptr, g_weights.ptr, n, C);
  gpu::row_dots(g_dots.ptr, g_src.ptr, g_index.ptr, g_rows.ptr, n, C);
  expect_close(g_gathered.host(), gathered, "gather_rows");
  expect_close(g_weighted.host(), weighted, "gather_rows, weighted");
  expect_close(g_dst.host(), dst, "scatter_add_rows");
  expect_close(g_dots.host(), dots, "row_dots");
}

TEST_F(CudaOps, GptTrainsTheSameOnBothDevices) {
  using labkit::DeviceKind;
  const labkit::GptConfig config{.max_seq = 16, .vocab = 20, .layers = 2, .heads = 4, .channels = 32};
  labkit::Gpt on_cpu(config, 7), on_gpu(config, 7, DeviceKind::cuda);
  labkit::AdamW cpu_adamw, gpu_adamw;
  std::vector<int> x(4 * 16), y(4 * 16);
  for (int step = 0; step < 5; ++step) {
    for (std::size_t i = 0; i < x.size(); ++i) {
      x[i] = int((i * 7 + step) % 20);
      y[i] = int((i * 5 + 3 * step) % 20);
    }
    const float loss_cpu = on_cpu.forward(x, y, 4, 16), loss_gpu = on_gpu.forward(x, y, 4, 16);
    ASSERT_NEAR(loss_gpu, loss_cpu, 1e-5 * loss_cpu) << "step " << step;
    on_cpu.zero_grad();
    on_gpu.zero_grad();
    on_cpu.backward();
    on_gpu.backward();
    const std::vector<float> g_cpu = on_cpu.gradients().to_host(), g_gpu = on_gpu.gradients().to_host();
    float largest = 0;
    for (float g : g_cpu) largest = std::max(largest, std::abs(g));
    for (std::size_t i = 0; i < g_cpu.size(); ++i)
      ASSERT_NEAR(g_gpu[i], g_cpu[i], 1e-5 * largest) << "step " << step << ", gradient " << i;
    cpu_adamw.update(on_cpu.parameters(), on_cpu.gradients());
    gpu_adamw.update(on_gpu.parameters(), on_gpu.gradients());
  }
  expect_close(on_gpu.parameters().to_host(), on_cpu.parameters().to_host(), "weights after 5 AdamW steps");
}
