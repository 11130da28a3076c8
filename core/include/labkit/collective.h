// The nine collectives and barrier, each described once (collective.cpp's
// table: name, root and operator, count rule, bus factor, the cost a vendor
// library takes), and the one struct that describes a call. Adding a
// collective is an entry there, its native call in each backend, and its
// algorithm files.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string_view>

#include "labkit/view.h"

namespace labkit {

enum class Collective {
  broadcast, reduce, all_reduce, gather, scatter, all_gather, reduce_scatter, all_to_all, all_to_allv, barrier
};
inline constexpr std::array kCollectives = {
    Collective::broadcast,      Collective::reduce,     Collective::all_reduce,  Collective::gather,
    Collective::scatter,        Collective::all_gather, Collective::reduce_scatter, Collective::all_to_all,
    Collective::all_to_allv,    Collective::barrier};

// One collective call as a rank issued it. In-place operations (broadcast, reduce,
// all_reduce) use `recv` only. Counts follow NCCL: gather/all_gather receive
// size x send.count, scatter/reduce_scatter send size x recv.count, all_to_all
// sends and receives size equal blocks, all_to_allv one block per rank of the
// size its counts give.
struct CollectiveCall {
  Collective op = Collective::barrier;
  View send;
  View recv;
  ReduceOp reduce_op = ReduceOp::sum;
  int root = 0;
  // all_to_allv only: the elements this rank sends to and receives from each
  // rank, its blocks packed in rank order (MPI_Alltoallv's counts, with the
  // displacements their running sums). They point at the caller's arrays, which
  // must stay as they are until the collective completes, as MPI's must.
  std::span<const std::size_t> send_counts = {};
  std::span<const std::size_t> recv_counts = {};
};

// How the buffers' counts relate on P ranks.
enum class Counts {
  in_place,   // recv only (broadcast, reduce, all_reduce)
  gathers,    // recv = P x send (gather at its root, all_gather)
  scatters,   // send = P x recv (scatter at its root, reduce_scatter)
  exchanges,  // send = recv, P equal blocks (all_to_all)
  per_peer,   // send = sum of send_counts, recv = sum of recv_counts (all_to_allv)
  none,       // no buffers (barrier)
};

// How the simulator charges a native collective (cost_model.cpp).
enum class NativeCost {
  nccl,            // NCCL's tuning model: its ring or tree, whichever it predicts faster (nccl_model.h)
  point_to_point,  // NCCL's grouped sends: every peer at once, (P-1)/P of the large buffer over each link
  dissemination,   // ceil(log2 P) rounds of latency (NCCL has no barrier: an allreduce of nothing)
};

struct CollectiveInfo {
  Collective op;
  std::string_view name;
  bool has_root;
  bool has_reduce_op;
  Counts counts;
  // nccl-tests' bus bandwidth factor (doc/PERFORMANCE.md): busbw = algbw x
  // factor, which makes busbw comparable with a link's bandwidth at any P.
  double (*bus_factor)(int ranks);
  NativeCost native_cost;
};

const CollectiveInfo& info(Collective c);
std::string_view name_of(Collective c);
Collective parse_collective(std::string_view name);  // throws on an unknown name

inline bool has_root(Collective c) { return info(c).has_root; }
inline bool has_reduce_op(Collective c) { return info(c).has_reduce_op; }

// The buffer every rank passes with the same count and dtype: the per-rank
// block (send of gathers and exchanges, recv of scatters) or the whole buffer.
// all_to_allv's ranks agree on the dtype only (the backends check their counts: check_counts).
inline const View& agreed_buffer(const CollectiveCall& call) {
  const Counts counts = info(call.op).counts;
  return counts == Counts::gathers || counts == Counts::exchanges || counts == Counts::per_peer ? call.send
                                                                                                : call.recv;
}
inline bool has_agreed_count(Collective c) {
  return info(c).counts != Counts::none && info(c).counts != Counts::per_peer;
}

}  // namespace labkit
