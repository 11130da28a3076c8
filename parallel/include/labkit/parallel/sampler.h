// labkit::DistributedSampler — which samples each data-parallel rank reads,
// with the semantics of torch.utils.data.distributed.DistributedSampler:
//
//   epoch e: shuffle the dataset's indices with seed + e      [7 2 9 0 4 1 8 3 6 5]
//   pad by repeating the first ones until they divide by P    [7 2 9 0 4 1 8 3 6 5 7 2]   (P = 4)
//   rank r takes every P-th index from r on                   rank 1: [2 1 5]
//
// So the ranks' shards are disjoint (but for the padding), together they are
// the epoch, and every rank has the same number of samples: a rank that ran out
// early would leave the others waiting in an allreduce forever. A rank's loader
// cuts its shard into batches of B/P, and an epoch has as many global batches as
// the dataset holds whole (one rank's loader with drop_last), so global batch s
// is the same set of samples on P ranks as on one. (PyTorch's loaders on the P
// ranks would also read a last batch where the padding makes one whole, which
// one rank never reads: torch's DistributedSampler(drop_last=True) avoids it.)
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace labkit {

class DistributedSampler {
 public:
  DistributedSampler(std::size_t dataset_size, int ranks, int rank, std::uint64_t seed, bool shuffle = true);

  std::vector<std::size_t> indices(int epoch) const;  // this rank's shard of the epoch, in order
  std::size_t dataset_size() const { return dataset_size_; }
  int ranks() const { return ranks_; }
  std::size_t per_rank() const { return per_rank_; }  // ceil(dataset / ranks)
  std::size_t padding() const { return per_rank_ * ranks_ - dataset_size_; }  // repeated samples per epoch

 private:
  std::size_t dataset_size_;
  int ranks_, rank_;
  std::uint64_t seed_;
  bool shuffle_;
  std::size_t per_rank_;
};

// Rank `rank`'s part of global batch `step`: batch / ranks samples, from the
// epoch that step falls in (each epoch has dataset / batch steps). A step of
// `micro_steps` micro-batches (gradient accumulation) reads micro-batch `micro`
// of the rank's part of a global batch micro_steps times larger, so that its
// micro-batches on P ranks are the one batch of one rank's step.
std::vector<std::size_t> batch_of(const DistributedSampler& sampler, int step, int batch_per_rank, int micro = 0,
                                  int micro_steps = 1);

}  // namespace labkit
