#include "labkit/algorithms.h"

#include <array>
#include <map>
#include <mutex>
#include <stdexcept>

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

Chunk chunk_range(std::size_t count, int parts, int i) {
  const std::size_t base = count / parts, extra = count % parts, index = i;
  return {index * base + std::min(index, extra), base + (index < extra ? 1 : 0)};
}

// The scratch pool: free buffers by device and capacity. A buffer is held by
// one Scratch at a time, so ranks (fibers on the simulator, threads elsewhere)
// never share one.
namespace {
std::mutex pool_mutex;
std::multimap<std::pair<DeviceKind, std::size_t>, std::shared_ptr<std::byte>> pool;
}  // namespace

Scratch::Scratch(View like, std::size_t count) : view_{nullptr, count, like.dtype} {
  const std::size_t bytes = like.data ? count * size_of(like.dtype) : 0;
  if (bytes == 0) return;
  const Device& d = device_of(like.data);
  where_ = d.kind;
  {
    std::lock_guard lock(pool_mutex);
    if (auto it = pool.lower_bound({where_, bytes}); it != pool.end() && it->first.first == where_) {
      capacity_ = it->first.second;
      memory_ = std::move(it->second);
      pool.erase(it);
    }
  }
  if (!memory_) {
    memory_ = std::shared_ptr<std::byte>(static_cast<std::byte*>(d.allocate(bytes)), [&d](std::byte* p) { d.release(p); });
    capacity_ = bytes;
  }
  view_.data = memory_.get();
}

Scratch::~Scratch() {
  if (!memory_) return;
  std::lock_guard lock(pool_mutex);
  pool.emplace(std::pair(where_, capacity_), std::move(memory_));
}

}  // namespace labkit
