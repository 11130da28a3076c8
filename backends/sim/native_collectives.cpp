#include "native_collectives.h"

#include <vector>

#include "labkit/scratch.h"

namespace labkit::sim {

void compute_native(std::span<const CollectiveCall> calls) {
  const int p = int(calls.size());
  const CollectiveCall& first = calls[0];
  const CollectiveCall& root = calls[has_root(first.op) ? first.root : 0];
  // Every rank's `part(i)` reduced elementwise, in rank order, into a new buffer.
  auto reduced = [&](auto part) {
    Scratch acc(part(0), part(0).count);
    copy_local(acc.view(), part(0));
    for (int i = 1; i < p; ++i)
      reduce_local(first.reduce_op, first.recv.dtype, part(i).data, acc.view().data, acc.view().count);
    return acc;
  };
  // A rank's send may be its recv (all_to_all in place): copy every send aside
  // before writing any recv.
  auto stage_sends = [&] {
    std::vector<Scratch> staged;
    for (const CollectiveCall& c : calls) copy_local(staged.emplace_back(c.send, c.send.count).view(), c.send);
    return staged;
  };
  switch (first.op) {
    case Collective::broadcast:
      for (int i = 0; i < p; ++i)
        if (i != first.root) copy_local(calls[i].recv, root.recv);
      break;
    case Collective::reduce: {
      const Scratch sum = reduced([&](int i) { return calls[i].recv; });
      copy_local(root.recv, sum.view());
      break;
    }
    case Collective::all_reduce: {
      const Scratch sum = reduced([&](int i) { return calls[i].recv; });
      for (int i = 0; i < p; ++i) copy_local(calls[i].recv, sum.view());
      break;
    }
    case Collective::gather: {
      const std::size_t n = first.send.count;
      for (int i = 0; i < p; ++i) copy_local(root.recv.slice(i * n, n), calls[i].send);
      break;
    }
    case Collective::scatter: {
      const std::size_t n = first.recv.count;
      for (int i = 0; i < p; ++i) copy_local(calls[i].recv, root.send.slice(i * n, n));
      break;
    }
    case Collective::all_gather: {
      const std::size_t n = first.send.count;
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j) copy_local(calls[i].recv.slice(j * n, n), calls[j].send);
      break;
    }
    case Collective::reduce_scatter: {
      const std::size_t n = first.recv.count;
      const Scratch sum = reduced([&](int i) { return calls[i].send; });
      for (int i = 0; i < p; ++i) copy_local(calls[i].recv, sum.view().slice(i * n, n));
      break;
    }
    case Collective::all_to_all: {
      const std::size_t n = first.send.count / p;
      const std::vector<Scratch> staged = stage_sends();
      for (int i = 0; i < p; ++i)
        for (int j = 0; j < p; ++j) copy_local(calls[i].recv.slice(j * n, n), staged[j].view().slice(i * n, n));
      break;
    }
    case Collective::all_to_allv: {
      // Rank j's blocks leave in rank order and land, on each rank i, after the
      // blocks of the ranks before j.
      const std::vector<Scratch> staged = stage_sends();
      std::vector<std::size_t> recv_at(p, 0);
      for (int j = 0; j < p; ++j) {
        std::size_t send_at = 0;
        for (int i = 0; i < p; ++i) {
          const std::size_t n = calls[j].send_counts[i];
          copy_local(calls[i].recv.slice(recv_at[i], n), staged[j].view().slice(send_at, n));
          send_at += n;
          recv_at[i] += n;
        }
      }
      break;
    }
    case Collective::barrier:
      break;
  }
}

}  // namespace labkit::sim
