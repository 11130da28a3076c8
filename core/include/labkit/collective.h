// The eight collectives and barrier, and the one struct that describes a call.
#pragma once

#include <array>
#include <string_view>

#include "labkit/view.h"

namespace labkit {

enum class Collective {
  broadcast, reduce, all_reduce, gather, scatter, all_gather, reduce_scatter, all_to_all, barrier
};
inline constexpr std::array kCollectives = {
    Collective::broadcast, Collective::reduce,         Collective::all_reduce,
    Collective::gather,    Collective::scatter,        Collective::all_gather,
    Collective::reduce_scatter, Collective::all_to_all, Collective::barrier};

std::string_view name_of(Collective c);
Collective parse_collective(std::string_view name);  // throws on an unknown name

// One collective call as a rank issued it. In-place operations (broadcast, reduce,
// all_reduce) use `recv` only. Counts follow NCCL: gather/all_gather receive
// size x send.count, scatter/reduce_scatter send size x recv.count, all_to_all
// sends and receives size equal blocks.
struct CollectiveCall {
  Collective op = Collective::barrier;
  View send;
  View recv;
  ReduceOp reduce_op = ReduceOp::sum;
  int root = 0;
};

bool has_root(Collective c);
bool has_reduce_op(Collective c);

}  // namespace labkit
