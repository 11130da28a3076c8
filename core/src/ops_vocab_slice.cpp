// The vocabulary slice's ops on the CPU (labkit/ops.h): the tensor-parallel
// GPT's embedding and cross-entropy, a rank's rows of the token table at a time.
#include <algorithm>
#include <cmath>
#include <limits>

#include "labkit/ops.h"

namespace labkit::ops {

namespace {
// The slice's row of a token, or -1 where another rank's slice holds it.
int local_row(int token, int first, int V) { return token >= first && token < first + V ? token - first : -1; }
}  // namespace

void vocab_slice_encoder_forward(float* out, const int* tokens, const float* wte, const float* wpe, int first, int V,
                                 int B, int Tn, int C) {
  for (long i = 0; i < long(B) * Tn; ++i) {
    float* row = out + i * C;
    const int local = local_row(tokens[i], first, V);
    for (int c = 0; c < C; ++c) row[c] = local >= 0 ? wte[long(local) * C + c] : 0.0f;
    if (wpe)
      for (int c = 0; c < C; ++c) row[c] += wpe[(i % Tn) * C + c];
  }
}

void vocab_slice_encoder_backward(float* dwte, float* dwpe, const float* dout, const int* tokens, int first, int V,
                                  int B, int Tn, int C) {
  for (long i = 0; i < long(B) * Tn; ++i) {
    const float* row = dout + i * C;
    if (const int local = local_row(tokens[i], first, V); local >= 0)
      for (int c = 0; c < C; ++c) dwte[long(local) * C + c] += row[c];
    if (dwpe)
      for (int c = 0; c < C; ++c) dwpe[(i % Tn) * C + c] += row[c];
  }
}

void vocab_slice_max(float* largest, float* logits, int first, int vocab, int N, int V) {
  for (long i = 0; i < N; ++i) {
    largest[i] = -std::numeric_limits<float>::infinity();
    for (int j = 0; j < V; ++j) {
      float& z = logits[i * V + j];
      if (first + j >= vocab) z = -std::numeric_limits<float>::infinity();
      largest[i] = std::max(largest[i], z);
    }
  }
}

void vocab_slice_exp_sums(float* sums, const float* logits, const float* largest, const int* targets, int first, int N,
                          int V) {
  for (long i = 0; i < N; ++i) {
    const float* z = logits + i * V;
    sums[i] = 0;
    for (int j = 0; j < V; ++j) sums[i] += std::exp(z[j] - largest[i]);
    const int local = local_row(targets[i], first, V);
    sums[N + i] = local >= 0 ? z[local] - largest[i] : 0.0f;
  }
}

void vocab_slice_softmax(float* probs, float* losses, const float* logits, const float* largest, const float* sums,
                         int N, int V) {
  for (long i = 0; i < N; ++i) {
    for (int j = 0; j < V; ++j) probs[i * V + j] = std::exp(logits[i * V + j] - largest[i]) / sums[i];
    losses[i] = std::log(sums[i]) - sums[N + i];
  }
}

void vocab_slice_crossentropy_backward(float* dlogits, const float* probs, const int* targets, int first, int N,
                                       int V) {
  for (long i = 0; i < N; ++i)
    for (int j = 0; j < V; ++j)
      dlogits[i * V + j] += (probs[i * V + j] - (first + j == targets[i] ? 1.0f : 0.0f)) / float(N);
}

}  // namespace labkit::ops
