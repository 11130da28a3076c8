// Ring attention's block ops on the CPU (labkit/ops.h): a row (b, i, h) at a
// time, the block's softmax over the keys its causal mask keeps, folded into
// the row's running attention by the merge it is given.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "labkit/ops.h"

namespace labkit::ops {

namespace {
float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}
}  // namespace

void attention_block_forward(float* out, float* lse, const float* qkv, const float* kv, const int* query_positions,
                             const int* key_positions, int B, int L, int C, int NH, MergeRow merge) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  std::vector<float> scores(L), block_out(hs);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < L; ++i)
      for (int h = 0; h < NH; ++h) {
        const float* q = qkv + (std::size_t(b) * L + i) * 3 * C + h * hs;
        const auto key = [&](int j) { return kv + (std::size_t(b) * L + j) * 2 * C + h * hs; };
        float max = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < L; ++j)
          if (key_positions[j] <= query_positions[i]) max = std::max(max, scores[j] = dot(q, key(j), hs) * scale);
        if (max == -std::numeric_limits<float>::infinity()) continue;  // every key of the block is in q's future
        // The block's softmax over its kept keys, and its output normalised by it.
        float sum = 0;
        std::fill(block_out.begin(), block_out.end(), 0.0f);
        for (int j = 0; j < L; ++j) {
          if (key_positions[j] > query_positions[i]) continue;
          const float w = std::exp(scores[j] - max);
          sum += w;
          const float* v = key(j) + C;
          for (int d = 0; d < hs; ++d) block_out[d] += w * v[d];
        }
        for (float& o : block_out) o /= sum;
        merge(out + (std::size_t(b) * L + i) * C + h * hs, lse[(std::size_t(b) * NH + h) * L + i], block_out.data(),
              max + std::log(sum), hs);
      }
}

void attention_block_delta(float* delta, const float* dout, const float* out, int B, int L, int C, int NH) {
  const int hs = C / NH;
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < L; ++i)
      for (int h = 0; h < NH; ++h) {
        const std::size_t at = (std::size_t(b) * L + i) * C + h * hs;
        delta[(std::size_t(b) * NH + h) * L + i] = dot(dout + at, out + at, hs);
      }
}

void attention_block_backward(float* dqkv, float* dkv, const float* qkv, const float* kv, const float* dout,
                              const float* lse, const float* delta, const int* query_positions,
                              const int* key_positions, int B, int L, int C, int NH) {
  const int hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < L; ++i)
      for (int h = 0; h < NH; ++h) {
        const std::size_t row = std::size_t(b) * L + i, stat = (std::size_t(b) * NH + h) * L + i;
        const float* q = qkv + row * 3 * C + h * hs;
        float* dq = dqkv + row * 3 * C + h * hs;
        const float* d = dout + row * C + h * hs;
        for (int j = 0; j < L; ++j) {
          if (key_positions[j] > query_positions[i]) continue;
          const std::size_t at = (std::size_t(b) * L + j) * 2 * C + h * hs;
          const float* k = kv + at;
          const float* v = k + C;
          float* dk = dkv + at;
          float* dv = dk + C;
          // The probability, from the final log-sum-exp: what forward's softmax over all keys gave this pair.
          const float p = std::exp(dot(q, k, hs) * scale - lse[stat]);
          const float ds = p * (dot(d, v, hs) - delta[stat]) * scale;  // through the softmax and the scale
          for (int c = 0; c < hs; ++c) {
            dv[c] += p * d[c];
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
          }
        }
      }
}

void copy_columns(float* dst, int dst_stride, const float* src, int src_stride, long rows, int width) {
  for (long r = 0; r < rows; ++r) std::copy_n(src + r * src_stride, width, dst + r * dst_stride);
}

}  // namespace labkit::ops
