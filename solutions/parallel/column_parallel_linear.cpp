// STUB: // EXERCISE 7.1
// Megatron-LM's column-parallel Linear (Shoeybi et al. 2019, section 3): rank
// r keeps rows [r OC/t, (r+1) OC/t) of W (OC x C) and of b, so from the whole
// input it computes its slice of the output features, in full.
//
//   forward   f: whole = every rank's rows        (the identity; sequence parallel: all-gather)
//             out (N, OC/t) = whole W_r^T + b_r   no communication: each rank's features are its own
//   backward  (sequence parallel: whole again)    the rows all-gathered once more: whole was not kept
//             dW_r, db_r from dout and whole      layer.backward does these and dwhole
//             dwhole (N, C) = dout W_r            only this rank's features' share of x's gradient,
//             f's backward: the sum over ranks    so sum it (allreduce; sequence parallel: reduce-scatter)
//
// N = B T. The column-parallel layers are attention's QKV (each rank its
// heads) and the MLP's fc (its 4C/t hidden features). With sequence
// parallelism a rank keeps only its rows of their input, 1/t of it, and pays
// one more all-gather in backward for that (Korthikanti et al. 2022, 4.2.2).
// STUB: //
// STUB: // You have layer.forward(device, y, x, N), layer.backward(device, dx, dy, x, N)
// STUB: // (it accumulates), g.comm.all_reduce(view, ReduceOp::sum), and 7.3's pair as
// STUB: // all_gather_rows and reduce_scatter_rows (tensor_parallel_gpt.h).
// STUB: // Grade it: ./labkit grade tp; run the lab on it: ./labkit mine tp
#include "labkit/ops.h"
#include "labkit/parallel/tensor_parallel_gpt.h"

namespace labkit {

void column_parallel_forward(const TensorParallelGroup& g, const Linear& layer, float* out, const float* rows,
                             float* whole) {
  const int N = g.B * g.T;
  // BEGIN EXERCISE: f: with sequence parallelism, all_gather_rows the rows into whole
  //       (without it, rows is whole already).
  // STUB: (void)rows;
  if (g.sequence_parallel) all_gather_rows(g, layer.in, rows, whole);
  // END EXERCISE
  const double started = g.comm.now();
  // BEGIN EXERCISE: this rank's output features from the whole input.
  // STUB: (void)out, (void)whole;
  layer.forward(g.device, out, whole, N);
  // END EXERCISE
  g.comm.record_compute("column-parallel forward", started, ops::matmul_flops(N, layer.in, layer.out));
}

void column_parallel_backward(const TensorParallelGroup& g, const Linear& layer, float* dwhole, float* drows,
                              const float* dout, const float* rows, float* whole) {
  const int N = g.B * g.T;
  // BEGIN EXERCISE: with sequence parallelism, all_gather_rows the rows into whole again.
  // STUB: (void)rows;
  if (g.sequence_parallel) all_gather_rows(g, layer.in, rows, whole);
  // END EXERCISE
  const double started = g.comm.now();
  // BEGIN EXERCISE: the weight and bias gradients, and this rank's share of dwhole.
  // STUB: (void)dout, (void)whole;
  layer.backward(g.device, dwhole, dout, whole, N);
  // END EXERCISE
  g.comm.record_compute("column-parallel backward", started, 2 * ops::matmul_flops(N, layer.in, layer.out));
  // BEGIN EXERCISE: f's backward: sum dwhole over the ranks: all_reduce in place, or with
  //       sequence parallelism reduce_scatter_rows into drows.
  // STUB: (void)dwhole, (void)drows;
  if (g.sequence_parallel)
    reduce_scatter_rows(g, layer.in, dwhole, drows);
  else
    g.comm.all_reduce({dwhole, std::size_t(N) * layer.in, DType::f32}, ReduceOp::sum);
  // END EXERCISE
}

}  // namespace labkit
