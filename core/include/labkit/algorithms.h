// labkit's collective algorithms over point-to-point. Declared here, defined once
// in solutions/ (the reference) or, for the exercises, in exercises/ (the
// learner's version). Each takes the same arguments as the Comm call it implements
// and is never called with ReduceOp::avg (Comm runs avg as sum, then divides).
#pragma once

#include <bit>
#include <cstddef>
#include <memory>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "labkit/collective.h"
#include "labkit/comm.h"
#include "labkit/device.h"

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

// The registry the --algo flag looks names up in.
struct Algorithm {
  Collective op;
  std::string_view name;
  void (*run)(Comm& comm, const CollectiveCall& call);
};
std::span<const Algorithm> all_algorithms();
const Algorithm* find_algorithm(Collective op, std::string_view name);  // null if none
std::string algorithm_names(Collective op);  // "native, ring, ...": what set_algorithm takes for op
// Throws std::invalid_argument ("unknown all_reduce algorithm 'x' (native, ...)") unless it takes `name`.
void check_algorithm(Collective op, std::string_view name);

// Chunk i of `count` elements split into `parts`: the first count % parts chunks
// hold one element more, so any count splits, divisible or not.
struct Chunk {
  std::size_t offset;
  std::size_t count;
};
Chunk chunk_range(std::size_t count, int parts, int i);

// Helpers the algorithms share. Both respect payload-free views (null data),
// and work where the buffers live: host memory, or a GPU's under NCCL.
inline void copy_local(View to, View from) {
  if (to.data && from.data && from.bytes()) device_of(to.data).copy(to.data, from.data, from.bytes());
}

// A temporary buffer of `count` elements of like.dtype: real memory when `like`
// has data, sizes only when the run is payload-free. The memory comes from a
// pool and goes back to it, so an algorithm called in a loop (a benchmark, a
// training step) neither allocates nor faults in fresh pages on every call,
// as NCCL and gloo keep their buffers. It lives on the same device as `like`.
// Its contents start undefined.
class Scratch {
 public:
  Scratch(View like, std::size_t count);
  ~Scratch();
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  Scratch(Scratch&&) = default;
  View view() const { return view_; }

 private:
  std::shared_ptr<std::byte> memory_;
  std::size_t capacity_ = 0;
  DeviceKind where_ = DeviceKind::cpu;
  View view_;
};

}  // namespace labkit
