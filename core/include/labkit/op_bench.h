// The roofline, measured: this device's peak FLOP/s and memory bandwidth as the
// kit's own ops reach them, and each op of the tiny GPT's training step with the
// FLOPs it does, the bytes it must move and the time it takes here.
//
// Bytes are compulsory traffic: every input read once, every output written once,
// a gradient the op accumulates into (+=) read and written. A real run moves at
// least that much, so intensity = FLOPs / bytes is an upper bound on the true one.
// FLOPs: the matmuls and attention count as the kit's model FLOPs do (labkit/ops.h:
// 2 per multiply-add, a backward twice its forward); the other ops count each
// add, multiply, divide, exp, tanh or sqrt as one.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "labkit/device.h"
#include "labkit/gpt.h"

namespace labkit {

struct OpCost {
  std::string name;  // "matmul fc (C->4C)"
  std::string pass;  // "forward", "backward", "update"
  double flops, bytes;
  double intensity() const { return flops / bytes; }
};

// The ops of one training step of `config` on B sequences of config.max_seq
// tokens: one of each shape (the blocks repeat them layer after layer), forward,
// backward, then AdamW over every parameter.
std::vector<OpCost> gpt_op_costs(const GptConfig& config, int B);

// The best time of one call of `op` on `device` (the best, as STREAM reports):
// calls are repeated until at least `min_calls` and `min_seconds` in all.
double best_seconds(const Device& device, const std::function<void()>& op, double min_seconds = 0.05,
                    int min_calls = 3);

// Peak FLOP/s as the kit's matmul (OpenBLAS sgemm on one core, cuBLAS on a GPU)
// reaches it on an n x n x n product: large enough to be compute-bound.
double measure_peak_flops(const Device& device, int n);
// Memory bandwidth as STREAM's "add" measures it: out = a + b (the kit's
// residual_forward) over three arrays of `bytes_per_array`, far larger than any
// cache; 3 x 4 bytes per element (the write-allocate read is not counted).
double measure_bandwidth(const Device& device, std::size_t bytes_per_array);

// gpt_op_costs' ops, runnable on a device: buffers for the largest of them,
// allocated once and filled with small values.
class GptOpBench {
 public:
  GptOpBench(const GptConfig& config, int B, const Device& device);
  ~GptOpBench();
  const std::vector<OpCost>& costs() const { return costs_; }
  double best_seconds(std::size_t op, double min_seconds = 0.05) const;  // of costs()[op]
  struct Buffers;  // the ops' inputs, outputs and state (op_bench.cpp)

 private:
  const Device& device_;
  std::vector<OpCost> costs_;
  std::unique_ptr<Buffers> buffers_;
  std::vector<std::function<void()>> calls_;  // by op, as costs_
};

}  // namespace labkit
