// EXERCISE 6.2
// ZeRO's step over one flat run of parameters (stages 1 and 2; Rajbhandari et
// al. 2020, sections 5.1 and 5.2): each rank keeps the optimizer state of its shard only,
// so each rank updates only its shard, and the ranks then share the result.
//
//   grads  (P S, padded) ──reduce_scatter(avg)──> grad_shard (S)   the mean, this rank's slice
//   update(param_shard, grad_shard)                                 1/P of the optimizer's work and state
//   param_shard (S) ──unshard──> params (N)                         everyone's updated slices
//
// An allreduce is a reduce-scatter and an all-gather; ZeRO puts the update
// between the two halves, so it sends what DDP sends, 2N, and keeps 1/P of
// the optimizer state. The update runs once, over the whole shard: an optimizer
// that counts its steps (AdamW's bias correction) must see one step per step.
//
// You have unshard (6.1); comm.reduce_scatter(send, recv, ReduceOp::avg) leaves
// rank r with block r of the mean.
// Grade it: ./labkit grade fsdp; run the lab on it: ./labkit mine fsdp
#include "labkit/parallel/fully_sharded.h"

namespace labkit {

void zero_step(Comm& comm, View grads, View grad_shard, View param_shard, View params, const ShardUpdate& update) {
  // TODO: reduce_scatter grads (avg) into grad_shard; update(param_shard, grad_shard);
  //       then unshard param_shard into params.
  (void)comm, (void)grads, (void)grad_shard, (void)param_shard, (void)params, (void)update;
}

}  // namespace labkit
