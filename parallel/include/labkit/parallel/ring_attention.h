// labkit::RingAttention — causal self-attention over a sequence split across
// the ranks of a context-parallel group (Liu et al. 2023, "Ring Attention with
// Blockwise Transformers"; Megatron-LM's context parallelism).
//
// Each rank holds the queries, keys and values of its positions. Its queries
// must meet every key at or before them, so the keys and values travel: at
// step s rank r attends to the K/V block of rank r - s, while it passes that
// block on to r + 1 and receives the next from r - 1 (the message in flight
// behind the block's compute). After cp steps every query has met every key.
//
// The softmax over all keys is assembled a block at a time (online softmax,
// Milakov and Gimelshein 2018; FlashAttention): each block gives its rows an
// output normalised over the block's keys and its log-sum-exp, and
// merge_attention folds that into the running output and log-sum-exp. Only
// the final log-sum-exp is kept for backward, which recomputes each block's
// probabilities from it and passes dK and dV around the ring with K and V, one
// more hop bringing them home (FlashAttention-2's backward, blockwise).
//
// Which positions a rank holds is its layout. Contiguous: rank r holds chunk r
// of cp. Under a causal mask the last rank's queries meet every key and the
// first rank's only its own, so the work is unequal, (2cp - 1)/cp of the
// mean on the busiest rank. Zig-zag (Megatron-LM, and Brandon et al. 2023's
// "striped" idea): cut the sequence into 2cp chunks and give rank r chunks r
// and 2cp - 1 - r, an early and a late one; every rank then does the same work.
//
// Payload-free: forward and backward with null buffers send the same messages
// (sizes only) and charge the same compute, for what-ifs at thousands of ranks.
//
// On any device: the buffers stay on the one that holds qkv, the blocks are
// device ops (labkit/ops.h's attention_block_*), and merge_attention folds
// each row on the CPU (the GPU's kernel has its own copy of the formula).
#pragma once

#include <span>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/tensor.h"

namespace labkit {

enum class SequenceLayout { contiguous, zigzag };
std::string_view name_of(SequenceLayout layout);  // "contiguous", "zig-zag"

// Positions [first, first + count) of the sequence.
struct PositionRange {
  int first = 0, count = 0;
};

// The positions rank `rank` of `cp` holds of a sequence of T, in the order it
// stores them: one range (contiguous) or two (zig-zag). Throws when T does not
// divide by cp (contiguous) or by 2 cp (zig-zag).
std::vector<PositionRange> positions_of(SequenceLayout layout, int rank, int cp, int T);

// The query-key pairs a causal mask keeps between two sets of positions: the
// work of attending those queries to those keys.
double causal_pairs(std::span<const PositionRange> queries, std::span<const PositionRange> keys);

// This rank's rows of a (B, T, W) buffer, in the order positions_of gives: (B, T/cp, W).
std::vector<float> shard_sequence(std::span<const float> whole, int B, int T, int W, SequenceLayout layout, int rank,
                                  int cp);

// Exercise 7.4: fold one block's attention into a row's running attention.
// out (hs values) and lse are the row's output so far, normalised over the
// keys seen so far, and the log-sum-exp of their scores (-inf: no keys yet);
// block_out and block_lse the same over one more block of keys (block_lse
// finite). Afterwards out and lse are those over both.
void merge_attention(std::span<float> out, float& lse, std::span<const float> block_out, float block_lse);

// The attention of one layer: B sequences of T positions, NH heads of C/NH
// channels on this rank (with tensor parallelism, its heads).
struct AttentionShape {
  int B = 0, T = 0, C = 0, NH = 0;
};

class RingAttention {
 public:
  RingAttention(Comm& cp, SequenceLayout layout, AttentionShape shape);

  int rows() const { return shape_.T / cp_.size(); }  // positions this rank holds
  // qkv: (B, rows, 3C), this rank's positions' queries, keys and values as the
  // model's QKV projection lays them out; out: (B, rows, C); both on one device.
  // Null both for a payload-free run. Keeps qkv, out and the log-sum-exps for backward.
  void forward(const float* qkv, float* out);
  // dout (B, rows, C) into dqkv (B, rows, 3C), overwritten; null both when forward's were.
  void backward(const float* dout, float* dqkv);

  // Elements of K and V (or of their gradients) in one rank's block: 2 B rows C.
  std::size_t block_elements() const { return 2 * std::size_t(shape_.B) * rows() * shape_.C; }
  static constexpr int kTag = 0x4b56;  // "KV": the ring's messages in the trace

 private:
  void place_on(const Device& d);
  // Time for the block's work: measured around real work, charged payload-free.
  void charge(std::string_view what, double started, double flops, bool payload);

  Comm& cp_;
  SequenceLayout layout_;
  AttentionShape shape_;
  std::vector<PositionRange> mine_;     // this rank's positions
  const Device* device_ = nullptr;      // where the buffers are, once a forward with data has run
  std::vector<IndexTensor> positions_;  // each rank's rows' positions in the sequence, on device_
  Tensor qkv_, out_, lse_;              // forward's, for backward: lse_ (B, NH, rows)
  Tensor dqkv_, delta_;                 // backward's: delta_ = rowsum(dout * out), (B, NH, rows)
};

}  // namespace labkit
