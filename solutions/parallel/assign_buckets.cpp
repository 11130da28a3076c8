// STUB: // EXERCISE 5.2
// Gradient buckets, as PyTorch's DDP assigns them
// (compute_bucket_assignment_by_size in torch/csrc/distributed/c10d/reducer.cpp).
//
// Backward finishes the gradients from the last parameter to the first, and
// grad_bytes lists their sizes in that order. Walk them in that order, filling
// one bucket at a time; a bucket closes as soon as it holds at least its cap,
// so a gradient larger than the cap fills a bucket by itself, and the last
// bucket may hold less. The first bucket's cap is small (caps.first_bytes,
// 1 MiB) so that the first allreduce starts early in backward; the rest use
// caps.bytes (bucket_cap_mb = 25 MiB): few enough calls to amortize each
// collective's fixed cost, alpha.
//
//   grad_bytes (backward order)   400K  700K | 10M  9M  8M | 30M | 2M     (K = 10^3, M = 10^6 bytes)
//   caps 1 MiB, then 25 MiB       bucket 0    | bucket 1    | b 2 | b 3
//   returned: the first gradient of each bucket   {0, 2, 5, 6}
//
// Every rank computes the same assignment from the same sizes, so every rank
// issues the same allreduces, in the same order, on the same bytes.
// STUB: // Grade it: ./labkit grade ddp; run the lab on it: ./labkit mine ddp
#include "labkit/parallel/gradient_reducer.h"

namespace labkit {

std::vector<int> assign_buckets(std::span<const std::size_t> grad_bytes, BucketCaps caps) {
  std::vector<int> firsts;
  // BEGIN EXERCISE: for each gradient g in order: if no bucket is open, open one (push g into firsts);
  //       add its bytes to the open bucket; close the bucket once it holds at least its cap
  //       (caps.first_bytes for the first bucket, caps.bytes after).
  // STUB: (void)grad_bytes, (void)caps;
  bool open = false;          // a bucket is being filled
  std::size_t open_bytes = 0;  // what it holds so far
  for (int g = 0; g < int(grad_bytes.size()); ++g) {
    if (!open) {
      firsts.push_back(g);
      open = true;
      open_bytes = 0;
    }
    open_bytes += grad_bytes[g];
    if (open_bytes >= (firsts.size() == 1 ? caps.first_bytes : caps.bytes)) open = false;
  }
  // END EXERCISE
  return firsts;
}

}  // namespace labkit
