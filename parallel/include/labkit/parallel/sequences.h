// The training data of the data-parallel labs: the kit's character corpus cut
// into sequences of T inputs, T tokens apart, each with its next tokens as
// targets (so a sequence's last target is the next one's first input, as in
// llm.c's loader), from its first 90% (the rest is held out). A
// DistributedSampler picks which sequences each rank reads.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "labkit/gpt.h"

namespace labkit {

struct Sequences {
  Tokens tokens;
  int T = 0;
  std::size_t count = 0;
};
Sequences training_sequences(std::uint64_t seed, int T);

// The inputs x and targets y (B x T each) of the sequences `picked`.
void fill_batch(const Sequences& data, const std::vector<std::size_t>& picked, std::vector<int>& x,
                std::vector<int>& y);

}  // namespace labkit
