// EXERCISE 6.3
// FSDP's stage 3 around one unit (a transformer block): the parameters exist
// whole only while they compute (Zhao et al. 2023, "PyTorch FSDP", section 3).
//
//   all-gather ──> compute (forward or backward of the block) ──> free
//   shard (1/P)      whole unit                                     shard again
//
// So a rank holds its shard of every unit and, at any moment, one unit whole
// (two with prefetch): 16N/P of model state plus a block, not the model.
// Freeing is what makes the saving real, so say it to the memory tracker:
// comm.track_memory(MemoryUse::gathered, +bytes) once gathered, and -bytes
// once freed; the grader reads the tracker.
//
// You have unshard (6.1), mark_freed(view) and full.bytes().
// Grade it: ./labkit grade fsdp; run the lab on it: ./labkit mine fsdp
#include "labkit/parallel/fully_sharded.h"

namespace labkit {

void gather_compute_free(Comm& comm, View shard, View full, const std::function<void()>& compute) {
  // TODO: unshard into full and track its bytes as gathered; run compute();
  //       then mark_freed(full) and track the bytes freed.
  (void)comm, (void)shard, (void)full, (void)compute;
}

}  // namespace labkit
