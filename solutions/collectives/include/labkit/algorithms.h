// labkit's collective algorithms over point-to-point. Declared here, defined once
// in solutions/collectives/ (the reference) or, for the exercises, in
// exercises/collectives/ (the learner's version); the labkit_collectives library
// holds them and this catalogue, above the Comm that runs them. Each takes the same arguments as the Comm call it
// implements and is never called with ReduceOp::avg (Comm runs avg as sum, then divides).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "labkit/collective.h"
#include "labkit/comm.h"
#include "labkit/scratch.h"

namespace labkit {

void binomial_tree_broadcast(Comm& comm, View buf, int root);
void binomial_tree_reduce(Comm& comm, View buf, ReduceOp op, int root);
void naive_all_reduce(Comm& comm, View buf, ReduceOp op);
void binomial_tree_all_reduce(Comm& comm, View buf, ReduceOp op);
void ring_all_reduce(Comm& comm, View buf, ReduceOp op);
void recursive_halving_doubling_all_reduce(Comm& comm, View buf, ReduceOp op);
void hierarchical_all_reduce(Comm& comm, View buf, ReduceOp op);
void linear_gather(Comm& comm, View send, View recv, int root);
void linear_scatter(Comm& comm, View send, View recv, int root);
void ring_all_gather(Comm& comm, View send, View recv);
void ring_reduce_scatter(Comm& comm, View send, View recv, ReduceOp op);
void pairwise_all_to_all(Comm& comm, View send, View recv);
void pairwise_all_to_allv(Comm& comm, View send, std::span<const std::size_t> send_counts, View recv,
                          std::span<const std::size_t> recv_counts);
void dissemination_barrier(Comm& comm);

// The catalogue the --algo flag looks names up in.
std::span<const Algorithm> all_algorithms();
const Algorithm* find_algorithm(Collective op, std::string_view name);  // null if none
std::string algorithm_names(Collective op);  // "native, ring, ...": what use_algorithm takes for op
// Throws std::invalid_argument ("unknown all_reduce algorithm 'x' (native, ...)") unless it takes `name`.
void check_algorithm(Collective op, std::string_view name);
// Sets how `comm` runs op, by name: "native" or one of the catalogue's. Throws
// naming the rank, the collective and the names it takes.
void use_algorithm(Comm& comm, Collective op, std::string_view name);

}  // namespace labkit
