// How many ranks each node holds, where every node holds as many, numbered node
// by node: what qgZ's two all-to-all hops (inside a node, then across) need.
// Otherwise an error from `op` says what the nodes hold.
#pragma once

#include <string_view>

#include "labkit/comm.h"

namespace labkit {

int ranks_per_node(const Comm& comm, std::string_view op);

}  // namespace labkit
