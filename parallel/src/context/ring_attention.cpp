#include "labkit/parallel/ring_attention.h"

#include <algorithm>
#include <limits>
#include <utility>

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

// Exercise 7.4 as the block op's fold of a row: on the CPU, each row of each
// block goes through the learner's merge_attention.
void merge_row(float* out, float& lse, const float* block_out, float block_lse, int hs) {
  merge_attention({out, std::size_t(hs)}, lse, {block_out, std::size_t(hs)}, block_lse);
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

// The buffers of a run with data, on the device that holds qkv: forward's
// copies, and each rank's positions once (the causal mask's, for the ops).
void RingAttention::place_on(const Device& d) {
  if (device_ == &d) return;
  device_ = &d;
  const std::size_t L = std::size_t(rows());
  positions_.clear();
  for (int source = 0; source < cp_.size(); ++source)
    positions_.push_back(
        IndexTensor::from_host(row_positions(positions_of(layout_, source, cp_.size(), shape_.T)), {L}, d.kind));
}

void RingAttention::forward(const float* qkv, float* out) {
  const bool payload = qkv != nullptr;
  const int P = cp_.size(), r = cp_.rank(), L = rows(), B = shape_.B, C = shape_.C;
  const std::size_t n = block_elements(), rows_here = std::size_t(B) * L;
  Tensor kv, next;
  if (payload) {
    place_on(device_of(qkv));
    const Device& d = *device_;
    qkv_ = Tensor({rows_here * 3 * C}, d.kind);
    d.copy(qkv_.data(), qkv, qkv_.bytes());
    out_ = Tensor({rows_here * C}, d.kind);
    lse_ = Tensor({std::size_t(B) * shape_.NH * L}, d.kind);
    d.fill(lse_.data(), -std::numeric_limits<float>::infinity(), long(lse_.size()));
    kv = Tensor({n}, d.kind), next = Tensor({n}, d.kind);
    // This rank's keys and values: the block it starts with.
    d.copy_columns(kv.data(), 2 * C, qkv_.data() + C, 3 * C, long(rows_here), 2 * C);
  }
  const auto block = [&](Tensor& b) { return payload ? view_of(b) : meta_view(n, DType::f32); };
  for (int s = 0; s < P; ++s) {
    const int source = (r - s + P) % P;  // whose keys and values this rank holds now
    Request sent, received;              // the next block travels while this one is attended to
    if (s + 1 < P) {
      sent = cp_.isend(block(kv), (r + 1) % P, kTag);
      received = cp_.irecv(block(next), (r - 1 + P) % P, kTag);
    }
    const double started = cp_.now();
    if (payload)
      device_->attention_block_forward(out_.data(), lse_.data(), qkv_.data(), kv.data(), positions_[r].data(),
                                       positions_[source].data(), B, L, C, shape_.NH, merge_row);
    // QK^T and PV: 2 x 2 hs flops for each of the NH heads' kept query-key pairs.
    charge("ring attention forward", started,
           4.0 * B * C * causal_pairs(mine_, positions_of(layout_, source, P, shape_.T)), payload);
    sent.wait(), received.wait();
    std::swap(kv, next);
  }
  if (payload) device_->copy(out, out_.data(), out_.bytes());
}

void RingAttention::backward(const float* dout, float* dqkv) {
  const bool payload = dout != nullptr;
  const int P = cp_.size(), r = cp_.rank(), L = rows(), B = shape_.B, C = shape_.C, NH = shape_.NH;
  const std::size_t n = block_elements(), rows_here = std::size_t(B) * L;
  Tensor kv, next, grads, next_grads;  // a block's keys and values, and their gradients so far
  if (payload) {
    if (qkv_.size() == 0) throw Error(fmt::format("{}: ring attention: backward without a forward", cp_.who()));
    const Device& d = *device_;
    dqkv_ = Tensor({qkv_.size()}, d.kind);
    // FlashAttention-2's D = rowsum(dO * O), each row and head once: softmax's backward needs it for every key.
    delta_ = Tensor({lse_.size()}, d.kind);
    d.attention_block_delta(delta_.data(), dout, out_.data(), B, L, C, NH);
    kv = Tensor({n}, d.kind), next = Tensor({n}, d.kind), grads = Tensor({n}, d.kind), next_grads = Tensor({n}, d.kind);
    d.copy_columns(kv.data(), 2 * C, qkv_.data() + C, 3 * C, long(rows_here), 2 * C);
  }
  const auto block = [&](Tensor& b) { return payload ? view_of(b) : meta_view(n, DType::f32); };
  for (int s = 0; s < P; ++s) {
    const int source = (r - s + P) % P;
    Request sent, received;
    if (s + 1 < P) {
      sent = cp_.isend(block(kv), (r + 1) % P, kTag);
      received = cp_.irecv(block(next), (r - 1 + P) % P, kTag);
    }
    const double started = cp_.now();
    if (payload)
      device_->attention_block_backward(dqkv_.data(), grads.data(), qkv_.data(), kv.data(), dout,
                                        lse_.data(), delta_.data(), positions_[r].data(), positions_[source].data(),
                                        B, L, C, NH);
    // The scores again, then dV, dP, dQ and dK: 5 x 2 hs flops a kept pair and head.
    charge("ring attention backward", started,
           10.0 * B * C * causal_pairs(mine_, positions_of(layout_, source, P, shape_.T)), payload);
    sent.wait(), received.wait();
    std::swap(kv, next);
    // The block's gradients follow it to the next rank, which attends to it
    // next; the last hop takes every block's home, so this rank ends with its own.
    if (P == 1) break;
    cp_.sendrecv(block(grads), (r + 1) % P, block(next_grads), (r - 1 + P) % P, kTag + 1);
    std::swap(grads, next_grads);
  }
  if (!payload) return;
  device_->copy_columns(dqkv_.data() + C, 3 * C, grads.data(), 2 * C, long(rows_here), 2 * C);
  device_->copy(dqkv, dqkv_.data(), dqkv_.bytes());
}

}  // namespace labkit
