#include "labkit/parallel/sampler.h"

#include <numeric>
#include <random>
#include <stdexcept>
#include <string>

namespace labkit {

DistributedSampler::DistributedSampler(std::size_t dataset_size, int ranks, int rank, std::uint64_t seed,
                                       bool shuffle)
    : dataset_size_(dataset_size), ranks_(ranks), rank_(rank), seed_(seed), shuffle_(shuffle),
      per_rank_((dataset_size + ranks - 1) / ranks) {
  if (dataset_size == 0) throw std::invalid_argument("DistributedSampler: an empty dataset");
}

std::vector<std::size_t> DistributedSampler::indices(int epoch) const {
  std::vector<std::size_t> all(dataset_size_);
  std::iota(all.begin(), all.end(), std::size_t(0));
  if (shuffle_) {
    // Fisher-Yates with our own draws (std::shuffle's order differs between
    // standard libraries), so every machine and backend sees the same epochs.
    std::mt19937_64 gen(seed_ + std::uint64_t(epoch));
    for (std::size_t i = all.size() - 1; i > 0; --i) std::swap(all[i], all[gen() % (i + 1)]);
  }
  for (std::size_t i = 0; all.size() < per_rank_ * ranks_; ++i) all.push_back(all[i]);  // the padding
  std::vector<std::size_t> mine;
  for (std::size_t i = rank_; i < all.size(); i += ranks_) mine.push_back(all[i]);
  return mine;
}

std::vector<std::size_t> batch_of(const DistributedSampler& sampler, int step, int batch_per_rank, int micro,
                                  int micro_steps) {
  const std::size_t per_step = std::size_t(batch_per_rank) * std::size_t(micro_steps);  // this rank's, a step
  const std::size_t batch = per_step * std::size_t(sampler.ranks());
  const int steps_per_epoch = int(sampler.dataset_size() / batch);
  if (steps_per_epoch == 0)
    throw std::invalid_argument("batch_of: the dataset (" + std::to_string(sampler.dataset_size()) +
                                " samples) is smaller than the global batch (" + std::to_string(batch) + ")");
  const std::vector<std::size_t> shard = sampler.indices(step / steps_per_epoch);
  const auto first = shard.begin() + std::ptrdiff_t(std::size_t(step % steps_per_epoch) * per_step) +
                     std::ptrdiff_t(micro) * batch_per_rank;
  return {first, first + batch_per_rank};
}

}  // namespace labkit
