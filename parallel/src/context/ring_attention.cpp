#include "labkit/parallel/ring_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit {

std::string_view name_of(SequenceLayout layout) {
  return layout == SequenceLayout::contiguous ? "contiguous" : "zig-zag";
}

std::vector<PositionRange> positions_of(SequenceLayout layout, int rank, int cp, int T) {
  const int chunks = layout == SequenceLayout::contiguous ? cp : 2 * cp;
  if (cp < 1 || rank < 0 || rank >= cp) throw Error(fmt::format("positions_of: rank {} of {}", rank, cp));
  if (T % chunks != 0)
    throw Error(fmt::format("a sequence of {} does not split into {} equal chunks ({} layout over {} ranks{})", T,
                            chunks, name_of(layout), cp, layout == SequenceLayout::zigzag ? ", two chunks each" : ""));
  const int n = T / chunks;
  if (layout == SequenceLayout::contiguous) return {{rank * n, n}};
  return {{rank * n, n}, {(chunks - 1 - rank) * n, n}};
}

double causal_pairs(std::span<const PositionRange> queries, std::span<const PositionRange> keys) {
  // For each query position q, the keys k <= q in [first, first + count): a
  // sum over q of min(count, max(0, q - first + 1)), in closed form.
  const auto up_to = [](double n) { return n * (n + 1) / 2; };  // 1 + 2 + ... + n
  double pairs = 0;
  for (const PositionRange& q : queries)
    for (const PositionRange& k : keys) {
      // Queries before k.first see none; from k.first on, 1, 2, ..., then count each.
      const double lo = std::max(q.first, k.first), hi = q.first + q.count;  // queries [lo, hi) see some
      if (hi <= lo) continue;
      const double full_from = k.first + k.count - 1;  // from here on a query sees every key
      const double ramp_end = std::min(hi, full_from);  // queries [lo, ramp_end) see q - k.first + 1
      if (ramp_end > lo) pairs += up_to(ramp_end - k.first) - up_to(lo - k.first);
      pairs += std::max(0.0, hi - std::max(lo, full_from)) * k.count;
    }
  return pairs;
}

std::vector<float> shard_sequence(std::span<const float> whole, int B, int T, int W, SequenceLayout layout, int rank,
                                  int cp) {
  if (whole.size() != std::size_t(B) * T * W) throw Error("shard_sequence: the buffer is not B x T x W");
  std::vector<float> shard;
  shard.reserve(whole.size() / std::size_t(cp));
  for (int b = 0; b < B; ++b)
    for (const PositionRange& range : positions_of(layout, rank, cp, T)) {
      const auto first = whole.begin() + (std::size_t(b) * T + range.first) * W;
      shard.insert(shard.end(), first, first + std::size_t(range.count) * W);
    }
  return shard;
}

namespace {

// The position of each of a rank's rows, in the order it stores them.
std::vector<int> row_positions(std::span<const PositionRange> ranges) {
  std::vector<int> positions;
  for (const PositionRange& r : ranges)
    for (int i = 0; i < r.count; ++i) positions.push_back(r.first + i);
  return positions;
}

float dot(const float* a, const float* b, int n) {
  float s = 0;
  for (int i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

}  // namespace

RingAttention::RingAttention(Comm& cp, SequenceLayout layout, AttentionShape shape)
    : cp_(cp), layout_(layout), shape_(shape) {
  if (shape.NH < 1 || shape.C % shape.NH != 0)
    throw Error(fmt::format("{}: ring attention: {} channels do not split into {} heads", cp.who(), shape.C, shape.NH));
  try {
    mine_ = positions_of(layout, cp.rank(), cp.size(), shape.T);
  } catch (const Error& e) {
    throw Error(fmt::format("{}: ring attention: {}", cp.who(), e.what()));
  }
}

void RingAttention::charge(std::string_view what, double started, double flops, bool payload) {
  if (payload)
    cp_.record_compute(what, started, flops);
  else
    cp_.compute_flops(what, flops);
}

void RingAttention::forward(const float* qkv, float* out) {
  const bool payload = qkv != nullptr;
  const int P = cp_.size(), r = cp_.rank(), L = rows(), B = shape_.B, C = shape_.C;
  const std::size_t n = block_elements();
  std::vector<float> kv, next;
  if (payload) {
    qkv_.assign(qkv, qkv + std::size_t(B) * L * 3 * C);
    out_.assign(std::size_t(B) * L * C, 0.0f);
    lse_.assign(std::size_t(B) * shape_.NH * L, -std::numeric_limits<float>::infinity());
    kv.resize(n), next.resize(n);
    for (std::size_t row = 0; row < std::size_t(B) * L; ++row)  // this rank's keys and values: the block it starts with
      std::copy_n(qkv_.begin() + row * 3 * C + C, 2 * C, kv.begin() + row * 2 * C);
  }
  const auto block = [&](std::vector<float>& b) { return payload ? view_of(b) : meta_view(n, DType::f32); };
  for (int s = 0; s < P; ++s) {
    const int source = (r - s + P) % P;  // whose keys and values this rank holds now
    Request sent, received;              // the next block travels while this one is attended to
    if (s + 1 < P) {
      sent = cp_.isend(block(kv), (r + 1) % P, kTag);
      received = cp_.irecv(block(next), (r - 1 + P) % P, kTag);
    }
    const double started = cp_.now();
    if (payload) attend_forward(source, kv.data());
    // QK^T and PV: 2 x 2 hs flops for each of the NH heads' kept query-key pairs.
    charge("ring attention forward", started,
           4.0 * B * C * causal_pairs(mine_, positions_of(layout_, source, P, shape_.T)), payload);
    sent.wait(), received.wait();
    kv.swap(next);
  }
  if (payload) std::copy(out_.begin(), out_.end(), out);
}

void RingAttention::attend_forward(int source, const float* kv) {
  const int L = rows(), B = shape_.B, C = shape_.C, NH = shape_.NH, hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  const std::vector<int> queries = row_positions(mine_);
  const std::vector<int> keys = row_positions(positions_of(layout_, source, cp_.size(), shape_.T));
  std::vector<float> scores(L), block_out(hs);
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < L; ++i)
      for (int h = 0; h < NH; ++h) {
        const float* q = &qkv_[(std::size_t(b) * L + i) * 3 * C + h * hs];
        const auto key = [&](int j) { return kv + (std::size_t(b) * L + j) * 2 * C + h * hs; };
        float max = -std::numeric_limits<float>::infinity();
        for (int j = 0; j < L; ++j)
          if (keys[j] <= queries[i]) max = std::max(max, scores[j] = dot(q, key(j), hs) * scale);
        if (max == -std::numeric_limits<float>::infinity()) continue;  // every key of the block is in q's future
        // The block's softmax over its kept keys, and its output normalised by it.
        float sum = 0;
        std::fill(block_out.begin(), block_out.end(), 0.0f);
        for (int j = 0; j < L; ++j) {
          if (keys[j] > queries[i]) continue;
          const float w = std::exp(scores[j] - max);
          sum += w;
          const float* v = key(j) + C;
          for (int d = 0; d < hs; ++d) block_out[d] += w * v[d];
        }
        for (float& o : block_out) o /= sum;
        merge_attention({&out_[(std::size_t(b) * L + i) * C + h * hs], std::size_t(hs)},
                        lse_[(std::size_t(b) * NH + h) * L + i], block_out, max + std::log(sum));
      }
}

void RingAttention::backward(const float* dout, float* dqkv) {
  const bool payload = dout != nullptr;
  const int P = cp_.size(), r = cp_.rank(), L = rows(), B = shape_.B, C = shape_.C, NH = shape_.NH, hs = C / NH;
  const std::size_t n = block_elements();
  std::vector<float> kv, next, grads, next_grads;  // a block's keys and values, and their gradients so far
  if (payload) {
    if (qkv_.empty()) throw Error(fmt::format("{}: ring attention: backward without a forward", cp_.who()));
    dqkv_.assign(qkv_.size(), 0.0f);
    // FlashAttention-2's D = rowsum(dO * O), each row and head once: softmax's backward needs it for every key.
    delta_.assign(lse_.size(), 0.0f);
    for (int b = 0; b < B; ++b)
      for (int i = 0; i < L; ++i)
        for (int h = 0; h < NH; ++h) {
          const std::size_t at = (std::size_t(b) * L + i) * C + h * hs;
          delta_[(std::size_t(b) * NH + h) * L + i] = dot(dout + at, &out_[at], hs);
        }
    kv.resize(n), next.resize(n), grads.assign(n, 0.0f), next_grads.resize(n);
    for (std::size_t row = 0; row < std::size_t(B) * L; ++row)
      std::copy_n(qkv_.begin() + row * 3 * C + C, 2 * C, kv.begin() + row * 2 * C);
  }
  const auto block = [&](std::vector<float>& b) { return payload ? view_of(b) : meta_view(n, DType::f32); };
  for (int s = 0; s < P; ++s) {
    const int source = (r - s + P) % P;
    Request sent, received;
    if (s + 1 < P) {
      sent = cp_.isend(block(kv), (r + 1) % P, kTag);
      received = cp_.irecv(block(next), (r - 1 + P) % P, kTag);
    }
    const double started = cp_.now();
    if (payload) attend_backward(source, kv.data(), grads.data(), dout);
    // The scores again, then dV, dP, dQ and dK: 5 x 2 hs flops a kept pair and head.
    charge("ring attention backward", started,
           10.0 * B * C * causal_pairs(mine_, positions_of(layout_, source, P, shape_.T)), payload);
    sent.wait(), received.wait();
    kv.swap(next);
    // The block's gradients follow it to the next rank, which attends to it
    // next; the last hop takes every block's home, so this rank ends with its own.
    if (P == 1) break;
    cp_.sendrecv(block(grads), (r + 1) % P, block(next_grads), (r - 1 + P) % P, kTag + 1);
    grads.swap(next_grads);
  }
  if (!payload) return;
  for (std::size_t row = 0; row < std::size_t(B) * L; ++row)
    for (int c = 0; c < 2 * C; ++c) dqkv_[row * 3 * C + C + c] = grads[row * 2 * C + c];
  std::copy(dqkv_.begin(), dqkv_.end(), dqkv);
}

void RingAttention::attend_backward(int source, const float* kv, float* kv_grads, const float* dout) {
  const int L = rows(), B = shape_.B, C = shape_.C, NH = shape_.NH, hs = C / NH;
  const float scale = 1.0f / std::sqrt(float(hs));
  const std::vector<int> queries = row_positions(mine_);
  const std::vector<int> keys = row_positions(positions_of(layout_, source, cp_.size(), shape_.T));
  for (int b = 0; b < B; ++b)
    for (int i = 0; i < L; ++i)
      for (int h = 0; h < NH; ++h) {
        const std::size_t row = std::size_t(b) * L + i, stat = (std::size_t(b) * NH + h) * L + i;
        const float* q = &qkv_[row * 3 * C + h * hs];
        float* dq = &dqkv_[row * 3 * C + h * hs];
        const float* d = dout + row * C + h * hs;
        for (int j = 0; j < L; ++j) {
          if (keys[j] > queries[i]) continue;
          const std::size_t at = (std::size_t(b) * L + j) * 2 * C + h * hs;
          const float* k = kv + at;
          const float* v = k + C;
          float* dk = kv_grads + at;
          float* dv = dk + C;
          // The probability, from the final log-sum-exp: what forward's softmax over all keys gave this pair.
          const float p = std::exp(dot(q, k, hs) * scale - lse_[stat]);
          const float ds = p * (dot(d, v, hs) - delta_[stat]) * scale;  // through the softmax and the scale
          for (int c = 0; c < hs; ++c) {
            dv[c] += p * d[c];
            dq[c] += ds * k[c];
            dk[c] += ds * q[c];
          }
        }
      }
}

}  // namespace labkit
