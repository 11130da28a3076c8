// The alpha-beta cost of a collective as a vendor library (NCCL) runs it: what the
// simulator charges for a native collective, a black box that is always right.
//
// T = k(P) alpha + m(n, P) beta with beta = 1 / bandwidth (the reading's guide,
// section 5). n is nccl-tests' "size": the bytes of the larger buffer.
#pragma once

#include <cstddef>
#include <string_view>

#include "labkit/collective.h"
#include "labkit/topology.h"

namespace labkit {

struct CostEstimate {
  double seconds;
  std::string_view algorithm;  // the algorithm the library would pick: "ring", "tree"
};

CostEstimate native_cost(Collective op, std::size_t bytes, int ranks, const Link& link);

}  // namespace labkit
