// The simulator's native collectives as a vendor library delivers them: a black
// box that computes the right answer straight from every rank's buffers, so it
// stays right while a learner's algorithm is broken. Reductions run in rank order.
#pragma once

#include <span>

#include "labkit/collective.h"

namespace labkit::sim {

// calls[i] is rank i's call; every rank's output buffers are filled in.
void compute_native(std::span<const CollectiveCall> calls);

}  // namespace labkit::sim
