// labkit::GradientCompressor — the gradients averaged over a data-parallel
// group with fewer bytes sent (the DDP lab's --compress), four ways:
//
//   scheme       what each rank sends                                   bytes per rank and step
//   none         the fp32 gradient, allreduced (the baseline)            4 N
//   bf16         each value rounded to bf16, allreduced in bf16          2 N
//   powersgd:R   each M x N matrix as factors P (M x R) and Q (N x R),    4 R (M + N) per matrix,
//                allreduced in turn (Vogels et al. 2019); vectors whole   4 x each vector's count
//   topk:F       the k = F N largest entries, indices and values,         k (4 + 4)
//                all_gathered (Lin et al. 2018)
//
// N is the gradient's element count. "Bytes per rank" is the payload a rank
// hands to the collectives, what compression shrinks; on the wire a ring
// allreduce carries 2 (P-1)/P of it per rank, and an all_gather gives each
// rank's block to the P-1 others, so top-k's cost grows with P where an
// allreduce's does not.
//
// PowerSGD and top-k drop part of the gradient. Error feedback (Seide et al.
// 2014, Stich et al. 2018, Karimireddy et al. 2019) keeps what a rank did not
// send and adds it to its next gradient, so nothing is lost, only delayed:
// without it both converge worse or not at all.
//
// Every scheme also runs payload-free (a View with null data): it issues the
// same collectives with sizes only, and skips the arithmetic.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "labkit/comm.h"
#include "labkit/gpt.h"

namespace labkit {

enum class Compression { none, bf16, powersgd, topk };

struct CompressionSpec {
  Compression kind = Compression::none;
  int rank = 0;          // powersgd: R, the factors' columns
  double fraction = 0;   // topk: F, in (0, 1]
};
// "none", "bf16", "powersgd:R" (R >= 1) or "topk:F" (0 < F <= 1); anything
// else throws std::invalid_argument naming what is allowed.
CompressionSpec parse_compression(std::string_view text);
std::string name_of(const CompressionSpec& spec);
// A PowerSGD rank no matrix of `model`'s `tensors` can take (R > min(M, N) of
// every one of them) is refused, naming the largest and the limit.
void check_compression(const CompressionSpec& spec, const std::vector<ParameterTensor>& tensors,
                       std::string_view model);

class GradientCompressor {
 public:
  virtual ~GradientCompressor() = default;
  // `grads` (f32, laid out as the tensors the compressor was made for; null
  // data: payload-free) becomes the average over the ranks of what they sent.
  void average(View grads);
  // The bytes this rank handed to the collectives in the last average(),
  // counted from the buffers it passed them, and the same in closed form.
  std::uint64_t bytes_sent() const { return sent_; }
  virtual std::uint64_t formula_bytes() const = 0;
  // What this rank has not sent yet (error feedback), in the gradient's layout;
  // zeros for a scheme that drops nothing.
  virtual std::vector<float> error() const;

 protected:
  GradientCompressor(Comm& comm, std::size_t count) : comm_(comm), count_(count) {}
  virtual void reduce(View grads) = 0;
  // The collectives, counting this rank's payload.
  void all_reduce(ReduceOp op, View buf);
  void all_gather(View send, View recv);
  Comm& comm_;
  std::size_t count_;  // N

 private:
  std::uint64_t sent_ = 0;
};

// One fp32 allreduce of the average: what DDP does without compression.
class NoCompression : public GradientCompressor {
 public:
  NoCompression(Comm& comm, std::size_t count) : GradientCompressor(comm, count) {}
  std::uint64_t formula_bytes() const override { return 4 * count_; }

 private:
  void reduce(View grads) override;
};

// PyTorch's bf16_compress_hook: cast to bf16, divide by P, allreduce, cast back.
class Bf16Compression : public GradientCompressor {
 public:
  Bf16Compression(Comm& comm, std::size_t count) : GradientCompressor(comm, count) {}
  std::uint64_t formula_bytes() const override { return 2 * count_; }

 private:
  void reduce(View grads) override;
  std::vector<bfloat16> halves_;
};

// PowerSGD (Vogels, Karimireddy and Jaggi, NeurIPS 2019, Algorithm 1), one
// step of power iteration per training step, Q warm-started from the last:
//   M = G + E            this rank's gradient plus the error it kept
//   P = M Q              allreduce(avg) P, then orthonormalize its columns (P^)
//   Q = M^T P^           E = M - P^ Q^T (what this rank's factors miss)
//   allreduce(avg) Q     the update is P^ Q^T = P^ P^T mean(M)
// An M x N matrix costs R (M + N) values instead of M N. A tensor is compressed
// only where that saves: R (M + N) x min_compression_rate < M N (PyTorch's
// PowerSGDState, rate 2 by default); vectors and small matrices are allreduced
// whole, in one buffer.
class PowerSgd : public GradientCompressor {
 public:
  PowerSgd(Comm& comm, const std::vector<ParameterTensor>& tensors, int rank, std::uint64_t seed,
           double min_compression_rate = 2);
  std::uint64_t formula_bytes() const override;
  std::vector<float> error() const override;
  std::vector<ParameterTensor> compressed() const;  // the matrices sent as factors

 private:
  struct Matrix {
    ParameterTensor tensor;
    int rank;                     // min(R, M, N)
    std::size_t p_offset, q_offset;  // into p_ and q_
    std::vector<float> error;     // E, M x N (allocated on the first step with data)
  };
  void reduce(View grads) override;
  void average_whole(float* g, bool payload);
  void add_error_and_multiply(float* M, Matrix& m);
  void orthonormalize_and_keep_error(const float* M, Matrix& m);
  void write_update(float* M, const Matrix& m) const;
  std::vector<Matrix> matrices_;
  std::vector<ParameterTensor> whole_;  // sent uncompressed
  std::vector<float> p_, q_, whole_values_;
  std::size_t whole_count_ = 0;
};

// Top-k sparsification with error feedback (Lin et al. 2018, "Deep Gradient
// Compression"; Stich et al. 2018): each rank adds its kept error, sends the
// k = max(1, floor(F N)) entries of largest magnitude as (index, value) pairs
// by all_gather, and keeps the rest as its error. Every rank adds the P k pairs
// it receives into a zeroed gradient and divides by P. Indices are 4 bytes,
// enough for a gradient of 2^31 entries.
class TopK : public GradientCompressor {
 public:
  TopK(Comm& comm, std::size_t count, double fraction);
  std::size_t k() const { return k_; }
  std::uint64_t formula_bytes() const override { return k_ * (sizeof(std::int32_t) + sizeof(float)); }
  std::vector<float> error() const override;

 private:
  void reduce(View grads) override;
  void select_largest();  // error_ holds M: moves its k largest into indices_ and values_
  std::size_t k_;
  std::vector<float> error_;
  std::vector<std::int32_t> indices_, all_indices_;
  std::vector<float> values_, all_values_;
};

std::unique_ptr<GradientCompressor> make_compressor(Comm& comm, const CompressionSpec& spec,
                                                    const std::vector<ParameterTensor>& tensors,
                                                    std::uint64_t seed);

}  // namespace labkit
