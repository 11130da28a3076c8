// STUB: // EXERCISE 6.1
// Sharding a flat run of parameters, and gathering it back: the unit of
// ZeRO and FSDP (Rajbhandari et al. 2020; Zhao et al. 2023, FlatParameter).
//
// A run of N elements over P ranks: each rank keeps S = ceil(N / P) of them, the
// run padded with zeros to P S so that every shard is the same size (an
// all_gather needs equal blocks).
//
//   N = 10, P = 4, S = 3:   [ 0 1 2 | 3 4 5 | 6 7 8 | 9 0 0 ]
//                             rank 0   rank 1  rank 2  rank 3 (2 zeros of padding)
//
// shard_of: this rank's S elements of the padded run (zeros past the end of
// `full`; a rank's shard may be all padding when N is small).
// unshard: one all_gather of the shards into a padded buffer of P S elements,
// then its first N into `full`. Both respect payload-free views (null data):
// use copy_local, and Scratch for the padded buffer.
// STUB: // Grade it: ./labkit grade fsdp; run the lab on it: ./labkit mine fsdp
#include <algorithm>

#include "labkit/parallel/fully_sharded.h"
#include "labkit/scratch.h"

namespace labkit {

void shard_of(View full, View shard, int rank) {
  // BEGIN EXERCISE: copy elements [rank S, min((rank + 1) S, N)) of full into the start of shard
  //       (none if rank S >= N), and zeros after them (the padding).
  // STUB: (void)full, (void)shard, (void)rank;
  const std::size_t begin = std::min(full.count, std::size_t(rank) * shard.count);
  const std::size_t end = std::min(full.count, begin + shard.count);
  copy_local(shard.slice(0, end - begin), full.slice(begin, end - begin));
  fill_local(shard.slice(end - begin, shard.count - (end - begin)), 0.0f);
  // END EXERCISE
}

void unshard(Comm& comm, View shard, View full) {
  // BEGIN EXERCISE: all_gather every rank's shard into a Scratch of P S elements, then copy
  //       its first full.count into full.
  // STUB: (void)comm, (void)shard, (void)full;
  const Scratch gathered(full, shard.count * comm.size());
  comm.all_gather(shard, gathered.view());
  copy_local(full, gathered.view().slice(0, full.count));
  // END EXERCISE
}

}  // namespace labkit
