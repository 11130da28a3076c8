// STUB: // EXERCISE 5.1
// Averaging the gradients: naive data parallelism's one collective, what
// PyTorch's DDP does bucket by bucket (Li et al., "PyTorch Distributed", VLDB 2020).
//
// Each of the P ranks computed the gradient of its mean loss over its own shard
// of the global batch. With equal shards, the mean of those P gradients is the
// gradient of the mean loss over the whole batch, so after averaging every rank
// holds what one rank training on the whole batch would, and applies the same
// update: the weights stay equal everywhere.
//
//   rank r:  g_r = grad of (1/|shard_r|) sum over shard_r of loss
//   all:     g = (1/P) sum_r g_r      = one allreduce (sum), then a division by P
//
// Sum, then divide: MPI has no MPI_AVG, and NCCL added ncclAvg only in 2.10,
// where it too is a sum followed by a division. Cost: one allreduce of every
// gradient, 2(P-1)/P of the buffer per rank on a ring, after backward ends.
// STUB: //
// STUB: // You have comm.all_reduce(view, op) and divide_local(dtype, data, count, divisor)
// STUB: // (dtype.h), which does nothing on a payload-free view (null data), as the
// STUB: // what-if runs at a thousand ranks pass. Do the sum and the division yourself
// STUB: // here: they are the lesson. comm.all_reduce(grads, ReduceOp::avg), which 5.3
// STUB: // hands you, is the same sum and division in one call (the Comm divides after
// STUB: // the sum, as NCCL does), and earns the same marks: the grader checks the mean
// STUB: // every rank ends with, which is identical either way, and that the sum is one
// STUB: // comm.all_reduce (the what-ifs time that collective at a thousand ranks).
// STUB: // Grade it: ./labkit grade ddp; run the lab on it: ./labkit mine ddp
#include "labkit/parallel/gradient_reducer.h"

namespace labkit {

void average_gradients(Comm& comm, View grads) {
  // BEGIN EXERCISE: sum grads over the ranks in place, then divide every element by the rank count.
  // STUB: (void)comm, (void)grads;
  comm.all_reduce(grads, ReduceOp::sum);
  divide_local(grads.dtype, grads.data, grads.count, comm.size());
  // END EXERCISE
}

}  // namespace labkit
