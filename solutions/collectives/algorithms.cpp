#include "labkit/algorithms.h"

#include <array>
#include <stdexcept>

#include "labkit/error.h"

namespace labkit {

namespace {
constexpr std::array kAlgorithms = {
    Algorithm{Collective::broadcast, "binomial_tree",
              [](Comm& c, const CollectiveCall& a) { binomial_tree_broadcast(c, a.recv, a.root); }},
    Algorithm{Collective::reduce, "binomial_tree",
              [](Comm& c, const CollectiveCall& a) { binomial_tree_reduce(c, a.recv, a.reduce_op, a.root); }},
    Algorithm{Collective::all_reduce, "naive",
              [](Comm& c, const CollectiveCall& a) { naive_all_reduce(c, a.recv, a.reduce_op); }},
    Algorithm{Collective::all_reduce, "binomial_tree",
              [](Comm& c, const CollectiveCall& a) { binomial_tree_all_reduce(c, a.recv, a.reduce_op); }},
    Algorithm{Collective::all_reduce, "ring",
              [](Comm& c, const CollectiveCall& a) { ring_all_reduce(c, a.recv, a.reduce_op); }},
    Algorithm{Collective::all_reduce, "recursive_halving_doubling",
              [](Comm& c, const CollectiveCall& a) { recursive_halving_doubling_all_reduce(c, a.recv, a.reduce_op); }},
    Algorithm{Collective::all_reduce, "hierarchical",
              [](Comm& c, const CollectiveCall& a) { hierarchical_all_reduce(c, a.recv, a.reduce_op); }},
    Algorithm{Collective::gather, "linear",
              [](Comm& c, const CollectiveCall& a) { linear_gather(c, a.send, a.recv, a.root); }},
    Algorithm{Collective::scatter, "linear",
              [](Comm& c, const CollectiveCall& a) { linear_scatter(c, a.send, a.recv, a.root); }},
    Algorithm{Collective::all_gather, "ring",
              [](Comm& c, const CollectiveCall& a) { ring_all_gather(c, a.send, a.recv); }},
    Algorithm{Collective::reduce_scatter, "ring",
              [](Comm& c, const CollectiveCall& a) { ring_reduce_scatter(c, a.send, a.recv, a.reduce_op); }},
    Algorithm{Collective::all_to_all, "pairwise",
              [](Comm& c, const CollectiveCall& a) { pairwise_all_to_all(c, a.send, a.recv); }},
    Algorithm{Collective::all_to_allv, "pairwise",
              [](Comm& c, const CollectiveCall& a) {
                pairwise_all_to_allv(c, a.send, a.send_counts, a.recv, a.recv_counts);
              }},
    Algorithm{Collective::barrier, "dissemination",
              [](Comm& c, const CollectiveCall&) { dissemination_barrier(c); }},
};
}  // namespace

std::span<const Algorithm> all_algorithms() { return kAlgorithms; }

const Algorithm* find_algorithm(Collective op, std::string_view name) {
  for (const Algorithm& a : kAlgorithms)
    if (a.op == op && a.name == name) return &a;
  return nullptr;
}

std::string algorithm_names(Collective op) {
  std::string names = "native";
  for (const Algorithm& a : kAlgorithms)
    if (a.op == op) names += ", " + std::string(a.name);
  return names;
}

void check_algorithm(Collective op, std::string_view name) {
  if (name != "native" && !find_algorithm(op, name))
    throw std::invalid_argument("unknown " + std::string(name_of(op)) + " algorithm '" + std::string(name) + "' (" +
                                algorithm_names(op) + ")");
}

void use_algorithm(Comm& comm, Collective op, std::string_view name) {
  if (name == "native") return comm.set_algorithm(op, nullptr);
  const Algorithm* algorithm = find_algorithm(op, name);
  if (!algorithm) fail(comm.who(), name_of(op), "unknown algorithm '{}' (known: {})", name, algorithm_names(op));
  comm.set_algorithm(op, algorithm);
}

}  // namespace labkit
