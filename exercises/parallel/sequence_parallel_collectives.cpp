// EXERCISE 7.3
// Sequence parallelism's f and g (Korthikanti et al. 2022, section 4.2.2).
// Between the tensor-parallel regions each rank of the group keeps a shard of
// the sequence: positions [r T/t, (r+1) T/t) of each of the B sequences, its
// "rows", (B, T/t, C). A column-parallel layer needs the whole (B, T, C), and
// a row-parallel layer leaves partial sums of the whole that belong summed in
// the rows:
//
//   all_gather_sequence       rows (B, T/t, C) of every rank ──> whole (B, T, C)       f forward, g backward
//   reduce_scatter_sequence   whole (B, T, C) partial sums  ──> rows, summed over ranks   g forward, f backward
//
// The collectives move a rank's block as one contiguous run, rank r's block
// at r x (B T/t C), but in (B, T, C) rank r's rows are B runs of T/t C, one in
// each sequence. So each function moves the data between the model's order
// and rank-major order in `scratch` (B T C floats): after the all-gather, and
// before the reduce-scatter. The pair moves what one allreduce moves, which is
// a reduce-scatter and an all-gather.
//
// comm.all_gather(send, recv), comm.reduce_scatter(send, recv, ReduceOp::sum);
// views: {pointer, count, DType::f32}, or whole.slice(offset, count);
// copy_local(to, from) copies a view where it lives (the host, or a GPU:
// never index a view's data yourself, it may be device memory).
// Grade it: ./labkit grade tp; run the lab on it: ./labkit mine tp
#include "labkit/parallel/tensor_parallel_gpt.h"
#include "labkit/scratch.h"

namespace labkit {

void all_gather_sequence(Comm& comm, View rows, View whole, View scratch, int B, int T, int C) {
  // TODO: all-gather rows into scratch (rank r's rows at r x rows.count); then copy
  //       rank r's rows of sequence b to positions [r T/t, (r+1) T/t) of sequence b in whole.
  (void)comm, (void)rows, (void)whole, (void)scratch, (void)B, (void)T, (void)C;
}

void reduce_scatter_sequence(Comm& comm, View whole, View rows, View scratch, int B, int T, int C) {
  // TODO: copy each rank's rows of whole into rank-major order in scratch;
  //       then reduce-scatter scratch (sum) into rows.
  (void)comm, (void)whole, (void)rows, (void)scratch, (void)B, (void)T, (void)C;
}

}  // namespace labkit
