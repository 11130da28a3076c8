// STUB: // EXERCISE 7.2
// Megatron-LM's row-parallel Linear (Shoeybi et al. 2019, section 3): rank r
// keeps columns [r C/t, (r+1) C/t) of W (OC x C), the ones that meet its
// slice of the input features, and the whole bias. Each rank's product is a
// partial sum of the output; g sums them.
//
//   forward   partial (N, OC) = input_r W_r^T      input_r: this rank's C/t features (its heads, its hidden units)
//             + b on one rank only                 every rank adding it would add it t times
//             g: the sum over ranks                allreduce (sequence parallel: reduce-scatter into the rows)
//
// With a column-parallel layer before it (each rank's features are its own)
// the pair needs one collective forward: attention's output projection after
// QKV, the MLP's proj after fc. N = B T.
// STUB: //
// STUB: // You have g.device.matmul_forward(out, inp, weight, bias or nullptr, N, in, out),
// STUB: // layer.weight.value, layer.bias.value, g.comm.all_reduce and 7.3's pair as
// STUB: // reduce_scatter_rows (tensor_parallel_gpt.h).
// STUB: // Grade it: ./labkit grade tp; run the lab on it: ./labkit mine tp
#include "labkit/ops.h"
#include "labkit/parallel/tensor_parallel_gpt.h"

namespace labkit {

void row_parallel_forward(const TensorParallelGroup& g, const Linear& layer, float* partial, float* rows,
                          const float* input) {
  const int N = g.B * g.T;
  const double started = g.comm.now();
  // BEGIN EXERCISE: this rank's partial sum of the output, the bias added by rank 0 only.
  // STUB: (void)partial, (void)input;
  g.device.matmul_forward(partial, input, layer.weight.value, g.comm.rank() == 0 ? layer.bias.value : nullptr, N,
                          layer.in, layer.out);
  // END EXERCISE
  g.comm.record_compute("row-parallel forward", started, ops::matmul_flops(N, layer.in, layer.out));
  // BEGIN EXERCISE: g: sum the partials over the ranks: all_reduce in place, or with sequence
  //       parallelism reduce_scatter_rows into rows.
  // STUB: (void)rows;
  if (g.sequence_parallel)
    reduce_scatter_rows(g, layer.out, partial, rows);
  else
    g.comm.all_reduce({partial, std::size_t(N) * layer.out, DType::f32}, ReduceOp::sum);
  // END EXERCISE
}

}  // namespace labkit
