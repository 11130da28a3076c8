// backends/sim: timing model, contention, determinism, deadlocks, misuse errors,
// sub-groups, payload-free runs, and every collective on every rank count.
#include <signal.h>
#include <unistd.h>

#include <charconv>
#include <csignal>
#include <numeric>
#include <sstream>
#include <type_traits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "harness.h"
#include "labkit/device.h"
#include "labkit/algorithms.h"
#include "labkit/error.h"

using namespace labkit;
using labkit::test::error_of;
using labkit::test::simulate;

namespace {
const Topology kH100 = find_topology("dgx-h100");
}  // namespace

TEST(SimTime, MessageCostsAlphaPlusBytesOverBandwidth) {
  const std::size_t n = 1 << 18;  // 1 MiB of f32
  auto run = simulate(2, [&](Comm& c) {
    std::vector<float> buf(n, float(c.rank()));
    c.rank() == 0 ? c.send(view_of(buf), 1) : c.recv(view_of(buf), 0);
    if (c.rank() == 1) {
      EXPECT_EQ(buf[n - 1], 0.0f);
    }
  });
  EXPECT_DOUBLE_EQ(run.elapsed, kH100.intra.alpha + 4.0 * n / kH100.intra.bandwidth);
  EXPECT_EQ(run.messages, 1u);
}

TEST(SimTime, ARootThatReceivesFromEveryonePaysForItsLink) {
  const std::size_t bytes = 1 << 20;
  const double wire = bytes / kH100.intra.bandwidth;
  auto fan_in = simulate(4, [&](Comm& c) {
    std::vector<std::byte> buf(bytes);
    const View v{buf.data(), bytes / 4, DType::f32};
    if (c.rank() != 0) return c.send(v, 0);
    std::vector<std::vector<std::byte>> in(3, std::vector<std::byte>(bytes));
    std::vector<Request> r;
    for (int from = 1; from < 4; ++from) r.push_back(c.irecv({in[from - 1].data(), bytes / 4, DType::f32}, from));
    for (Request& q : r) q.wait();
  });
  EXPECT_NEAR(fan_in.elapsed, kH100.intra.alpha + 3 * wire, 1e-12);
  auto pairs = simulate(4, [&](Comm& c) {
    std::vector<float> buf(bytes / 4);
    c.rank() % 2 == 0 ? c.send(view_of(buf), c.rank() + 1) : c.recv(view_of(buf), c.rank() - 1);
  });
  EXPECT_NEAR(pairs.elapsed, kH100.intra.alpha + wire, 1e-12);
}

TEST(SimTime, RanksOfANodeShareItsSingleNic) {
  const Topology eth = find_topology("ethernet");  // one NIC per node of 8
  const std::size_t count = 1 << 16;
  auto run = simulate(16, [&](Comm& c) {
    std::vector<float> buf(count);
    c.rank() < 8 ? c.send(view_of(buf), c.rank() + 8) : c.recv(view_of(buf), c.rank() - 8);
  }, "ethernet");
  EXPECT_NEAR(run.elapsed, eth.inter.alpha + 8 * 4.0 * count / eth.inter.bandwidth, 1e-12);
}

// Messages that meet on a port share its bandwidth max-min fairly (the
// simulator's default, as SimGrid models a network): ranks 0, 2 and 4 send n
// bytes each to rank 1, and rank 2 also sends n bytes to rank 3. Rank 1's in
// port is the bottleneck: its three flows get a third of it each. Rank 2's out
// port gives the third it has left over to the message for rank 3, which
// therefore moves at two thirds and ends first; nothing changes when it does.
TEST(SimNetwork, FlowsShareEachPortMaxMinFairly) {
  const std::size_t count = 1 << 18;
  const double wire = 4.0 * count / kH100.intra.bandwidth, alpha = kH100.intra.alpha;
  std::vector<double> delivered(5, 0.0);
  simulate(5, [&](Comm& c) {
    std::vector<float> a(count), b(count), d(count);
    if (c.rank() == 1) {
      std::vector<Request> r;
      for (int from : {0, 2, 4}) r.push_back(c.irecv(view_of(from == 0 ? a : from == 2 ? b : d), from));
      for (Request& q : r) q.wait();
    } else if (c.rank() == 2) {
      Request to1 = c.isend(view_of(a), 1), to3 = c.isend(view_of(b), 3);
      to3.wait();
      delivered[3] = c.now();
      to1.wait();
    } else if (c.rank() == 3) {
      c.recv(view_of(a), 2);
    } else {
      c.send(view_of(a), 1);
    }
    if (c.rank() != 3) delivered[c.rank()] = c.now();
  });
  EXPECT_NEAR(delivered[3], alpha + 1.5 * wire, 1e-12);  // at 2/3 of the bandwidth
  for (int rank : {0, 1, 2, 4}) EXPECT_NEAR(delivered[rank], alpha + 3 * wire, 1e-12) << "rank " << rank;
}

// When a flow ends, the ones that shared its port speed up: two messages into
// rank 0, of n and 2n bytes, share its in port until the first ends at
// alpha + 2n/B; the second then has it alone and ends at alpha + 3n/B. The
// serial model gives the port to one message at a time, in the order they start.
TEST(SimNetwork, AFlowSpeedsUpWhenTheOneBesideItEnds) {
  const std::size_t count = 1 << 18;
  const double wire = 4.0 * count / kH100.intra.bandwidth, alpha = kH100.intra.alpha;
  for (const sim::Network network : {sim::Network::fair, sim::Network::serial}) {
    std::vector<double> done(3, 0.0);
    simulate(3, [&](Comm& c) {
      std::vector<float> one(count), two(2 * count);
      if (c.rank() == 0) {
        Request small = c.irecv(view_of(one), 1), large = c.irecv(view_of(two), 2);
        small.wait();
        done[1] = c.now();
        large.wait();
        done[2] = c.now();
      } else {
        c.send(view_of(c.rank() == 1 ? one : two), 0);
      }
    }, "dgx-h100", true, network);
    const bool fair = network == sim::Network::fair;
    EXPECT_NEAR(done[1], alpha + (fair ? 2 : 1) * wire, 1e-12) << (fair ? "fair" : "serial");
    EXPECT_NEAR(done[2], alpha + 3 * wire, 1e-12) << (fair ? "fair" : "serial");
  }
}

TEST(SimTime, ComputeChargesFlopsAndStragglersMakeEveryoneWait) {
  Trace trace(4);
  sim::Engine engine({.ranks = 4, .topology = kH100, .speed = {1, 1, 0.25, 1}, .trace = &trace});
  engine.run([](Comm& c) {
    c.compute_flops("matmul", 989e12 * 0.5 * 1e-3);  // 1 ms at half of the H100's peak
    c.barrier();
  });
  const double barrier = std::bit_width(3u) * kH100.intra.alpha;
  EXPECT_NEAR(engine.elapsed(), 4e-3 + barrier, 1e-12);  // rank 2 runs at a quarter speed
  EXPECT_EQ(trace.tracks()[0].events[0].name, "matmul");
  EXPECT_NEAR(trace.tracks()[0].events[1].end - trace.tracks()[0].events[1].start, 3e-3 + barrier, 1e-12);
}

TEST(SimDeterminism, SameInputsGiveIdenticalTraceBytes) {
  auto scenario = [](Comm& c) {
    std::vector<float> buf(1000, float(c.rank()));
    use_algorithm(c, Collective::all_reduce, "ring");
    c.compute_seconds("step", 1e-6 * (c.rank() % 3));
    c.all_reduce(view_of(buf), ReduceOp::sum);
    std::vector<float> out(8000);
    c.all_gather(view_of(buf), view_of(out));
  };
  std::ostringstream a, b;
  simulate(8, scenario).trace->write_chrome_json(a, "sim");
  simulate(8, scenario).trace->write_chrome_json(b, "sim");
  EXPECT_GT(a.str().size(), 1000u);
  EXPECT_EQ(a.str(), b.str());
}

// Where flows share NICs and their rates are solved again and again (a pairwise
// all-to-all over four nodes of four ranks, one NIC each), the bits still repeat.
TEST(SimDeterminism, SharedNicsGiveIdenticalTraceBytes) {
  auto scenario = [](Comm& c) {
    std::vector<float> send(16 * 1000, float(c.rank())), recv(send.size());
    use_algorithm(c, Collective::all_to_all, "pairwise");
    c.compute_seconds("skew", 1e-6 * (c.rank() % 5));
    c.all_to_all(view_of(send), view_of(recv));
  };
  std::ostringstream a, b;
  simulate(16, scenario, "pcie").trace->write_chrome_json(a, "sim");
  simulate(16, scenario, "pcie").trace->write_chrome_json(b, "sim");
  EXPECT_GT(a.str().size(), 10000u);
  EXPECT_EQ(a.str(), b.str());
}

TEST(SimDeadlock, MismatchedOrderIsReportedWithTheWaitForCycle) {
  const std::string report = error_of(3, [](Comm& c) {
    std::vector<int> x(4);
    if (c.rank() == 2) return;
    c.recv(view_of(x), 1 - c.rank());  // both receive first: neither ever sends
    c.send(view_of(x), 1 - c.rank());
  });
  EXPECT_NE(report.find("deadlock"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 0: recv(from=1, tag=0)"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 1: recv(from=0, tag=0)"), std::string::npos) << report;
  EXPECT_NE(report.find("rank 2: finished"), std::string::npos) << report;
  EXPECT_NE(report.find("wait-for cycle: rank 0 -> rank 1 -> rank 0"), std::string::npos) << report;
}

TEST(SimDeadlock, TwoBlockingSendsDeadlockBecauseSendIsRendezvous) {
  const std::string report = error_of(2, [](Comm& c) {
    std::vector<int> x(4);
    c.send(view_of(x), 1 - c.rank());
    c.recv(view_of(x), 1 - c.rank());
  });
  EXPECT_NE(report.find("rank 0: send(to=1, tag=0, 16 bytes)"), std::string::npos) << report;
}

TEST(SimDeadlock, ARankThatSkipsACollectiveIsNamed) {
  const std::string report = error_of(3, [](Comm& c) {
    if (c.rank() != 1) c.barrier();
  });
  EXPECT_NE(report.find("rank 0: barrier(group=0) waiting for rank 1"), std::string::npos) << report;
}

// The report names the call a learner wrote (gather_object), as MPI's error does.
TEST(SimDeadlock, ARankThatSkipsAGatherObjectIsNamed) {
  const std::string report = error_of(3, [](Comm& c) {
    if (c.rank() != 1) c.gather_object(c.rank());
  });
  EXPECT_NE(report.find("rank 0: gather_object(group=0) waiting for rank 1"), std::string::npos) << report;
}

TEST(SimErrors, NameTheRankTheOperationAndTheArgument) {
  auto expect = [](int ranks, const std::function<void(Comm&)>& fn, const std::string& text) {
    const std::string e = error_of(ranks, fn);
    EXPECT_NE(e.find(text), std::string::npos) << "expected \"" << text << "\" in: " << e;
  };
  expect(2, [](Comm& c) {
    std::vector<float> a(4), b(3);
    c.rank() == 0 ? c.send(view_of(a), 1) : c.recv(view_of(b), 0);
  }, "rank 1: recv(from=0, tag=0): the message is 16 bytes but the receive buffer holds 12 bytes");
  expect(4, [](Comm& c) {
    std::vector<float> a(4);
    c.broadcast(view_of(a), 7);
  }, "rank 0: broadcast: root=7 is out of range for 4 ranks");
  expect(2, [](Comm& c) {
    std::vector<float> a(4);
    c.send(view_of(a), c.rank());
  }, "rank 0: send: to=0 is this rank itself");
  expect(4, [](Comm& c) {
    std::vector<float> a(10), b(2);
    c.reduce_scatter(view_of(a), view_of(b), ReduceOp::sum);
  }, "rank 0: reduce_scatter: send count 10 is not divisible by 4 ranks");
  expect(3, [](Comm& c) {
    std::vector<float> a(c.rank() == 2 ? 5 : 4);
    c.all_reduce(view_of(a), ReduceOp::sum);
  }, "rank 2: all_reduce: count=5 but rank 0 passed count=4");
  expect(2, [](Comm& c) {
    std::vector<float> a(4);
    c.all_reduce(view_of(a), c.rank() ? ReduceOp::max : ReduceOp::sum);
  }, "rank 1: all_reduce: op=max but rank 0 passed op=sum");
  expect(2, [](Comm& c) {  // rank 1 expects 3 elements from rank 0, which sends it 2
    std::vector<float> a(4), b(4);
    const std::vector<std::size_t> send = {2, 2}, recv = {c.rank() ? 3u : 2u, c.rank() ? 1u : 2u};
    c.all_to_allv(view_of(a), send, view_of(b), recv);
  }, "rank 1: all_to_allv: recv_counts[0]=3 but rank 0 sends send_counts[1]=2 to this rank");
  expect(3, [](Comm& c) {
    std::vector<float> a(4), b(4);
    const std::vector<std::size_t> send = {2, 2}, recv = {2, 1, 1};
    c.all_to_allv(view_of(a), send, view_of(b), recv);
  }, "rank 0: all_to_allv: send_counts has 2 entries for 3 ranks");
  expect(2, [](Comm& c) {
    std::vector<float> a(4), b(4);
    const std::vector<std::size_t> send = {2, 2}, recv = {2, 1};
    c.all_to_allv(view_of(a), send, view_of(b), recv);
  }, "rank 0: all_to_allv: recv count 4 differs from the recv_counts sum 3");
  expect(2, [](Comm& c) { use_algorithm(c, Collective::all_reduce, "rign"); },
         "rank 0: all_reduce: unknown algorithm 'rign' (known: native, naive, binomial_tree, ring, "
         "recursive_halving_doubling, hierarchical)");
  expect(2, [](Comm& c) {
    if (c.rank() == 1) throw std::runtime_error("my bug");
    c.barrier();
  }, "rank 1: an exception escaped: my bug");
}

TEST(SimP2P, NonBlockingRequestsCompleteAndTestTellsWhen) {
  simulate(2, [](Comm& c) {
    std::vector<int> out = {c.rank() * 10 + 1, c.rank() * 10 + 2}, in(2);
    Request r = c.irecv(view_of(in), 1 - c.rank());
    Request s = c.isend(view_of(out), 1 - c.rank());
    while (!r.test()) c.compute_seconds("overlap", 1e-7);
    s.wait();
    EXPECT_EQ(in, (std::vector<int>{(1 - c.rank()) * 10 + 1, (1 - c.rank()) * 10 + 2}));
    EXPECT_GE(c.now(), kH100.intra.alpha);
  });
}

TEST(SimSplit, GroupsByColorAndOrdersByKey) {
  simulate(8, [](Comm& c) {
    // Even and odd ranks; key = -rank reverses the order inside each group.
    std::unique_ptr<Comm> g = c.split(c.rank() % 2, -c.rank());
    ASSERT_TRUE(g);
    EXPECT_EQ(g->size(), 4);
    EXPECT_EQ(g->rank(), 3 - c.rank() / 2);
    std::vector<std::int64_t> x = {c.rank()};
    g->all_reduce(view_of(x), ReduceOp::sum);
    EXPECT_EQ(x[0], c.rank() % 2 ? 1 + 3 + 5 + 7 : 0 + 2 + 4 + 6);
    std::unique_ptr<Comm> none = c.split(c.rank() == 0 ? -1 : 0, 0);
    EXPECT_EQ(none == nullptr, c.rank() == 0);
  });
}

// A Comm counts its collectives by how each ran, blocking or started, its split
// groups' with its own: what lets a lab refuse an --algo choice no collective used.
TEST(SimSplit, GroupsCountTheirCollectivesWithTheirParent) {
  simulate(4, [](Comm& c) {
    use_algorithm(c, Collective::all_reduce, "ring");
    std::vector<std::int64_t> x = {c.rank()}, all(4);
    c.all_reduce(view_of(x), ReduceOp::sum);
    std::unique_ptr<Comm> pair = c.split(c.rank() / 2, c.rank());
    pair->all_reduce(view_of(x), ReduceOp::sum);
    Request r = c.i_all_reduce(view_of(x), ReduceOp::sum);
    r.wait();
    c.all_gather(view_of(x), view_of(all));
    const Comm::CollectiveCalls expected = {{{Collective::all_reduce, "ring"}, 3},
                                            {{Collective::all_gather, "native"}, 1}};
    EXPECT_EQ(c.collective_calls(), expected);
    EXPECT_EQ(pair->collective_calls(), expected);
  });
}

// On a GPU each simulated rank's ops go to its own stream (cuda_streams.cu): the
// engine says which rank issues them, across every switch between ranks.
TEST(SimRanks, EachRankIssuesItsOwnOpsAndNoneDoesAfterTheRun) {
  simulate(4, [](Comm& c) {
    EXPECT_EQ(issuing_rank(), c.rank());
    std::unique_ptr<Comm> reversed = c.split(0, -c.rank());
    std::vector<std::int64_t> x = {c.rank()};
    reversed->all_reduce(view_of(x), ReduceOp::sum);
    Request r = c.i_all_reduce(view_of(x), ReduceOp::sum);
    EXPECT_EQ(issuing_rank(), c.rank()) << "the global rank, not the split communicator's " << reversed->rank();
    r.wait();
    EXPECT_EQ(issuing_rank(), c.rank());
  });
  EXPECT_EQ(issuing_rank(), -1);
}

TEST(SimPayloadFree, MovesSizesOnlyAndTakesTheSameTime) {
  auto scenario = [](bool payload) {
    return [payload](Comm& c) {
      std::vector<float> data(payload ? 4096 : 0);
      const View v = payload ? view_of(data) : meta_view(4096, DType::f32);
      use_algorithm(c, Collective::all_reduce, "ring");
      c.all_reduce(v, ReduceOp::sum);
    };
  };
  const double with = simulate(64, scenario(true)).elapsed;
  const double without = simulate(64, scenario(false), "dgx-h100", false).elapsed;
  EXPECT_GT(with, 0);
  EXPECT_DOUBLE_EQ(with, without);
}

// Each rank's stack was two memory maps of its own (the stack and its guard
// page), and Linux gives a process 65530 (vm.max_map_count): 32768 ranks and more
// ended in std::bad_alloc. From one pool's slabs (stack_pool.h) they fit.
TEST(SimScale, FortyThousandRanksRunPastTheMemoryMapLimit) {
  constexpr int kRanks = 40000;
  std::vector<char> passed(kRanks, 0);
  simulate(kRanks, [&](Comm& c) {
    const View token = meta_view(1, DType::f32);
    Request from_left = c.irecv(token, (c.rank() + kRanks - 1) % kRanks);
    c.send(token, (c.rank() + 1) % kRanks);
    from_left.wait();
    passed[std::size_t(c.rank())] = 1;
  }, "dgx-h100", false);
  EXPECT_EQ(std::count(passed.begin(), passed.end(), 1), kRanks);
}

namespace {
// A kilobyte a frame, written, so the stack grows through every page; on the
// fault, from an alternate stack, how deep it went.
volatile std::sig_atomic_t depth_reached = 0;
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Winfinite-recursion"  // the runaway the guard page is there to stop
int recurse_forever(int depth) {
  volatile char frame[1024];
  frame[depth % sizeof(frame)] = char(depth);
  depth_reached = depth;
  return recurse_forever(depth + 1) + frame[0];
}
#pragma GCC diagnostic pop
void report_depth(int) {
  char text[32] = "faulted at depth ";
  char* end = std::to_chars(text + 17, text + sizeof(text) - 1, int(depth_reached)).ptr;
  *end++ = '\n';
  [[maybe_unused]] const ssize_t written = write(2, text, std::size_t(end - text));
  _exit(1);
}
}  // namespace

// Rank 1's stack lies just above rank 0's in the pool's slab: its guard page
// stops a runaway recursion within its own 256 KiB (some 250 frames of a
// kilobyte); without one it would run on through rank 0's stack, past 500.
TEST(SimScaleDeathTest, ARunawayRecursionFaultsOnItsGuardPage) {
  EXPECT_DEATH(simulate(2, [](Comm& c) {
    static char alternate[1 << 16];
    const stack_t on_alternate{.ss_sp = alternate, .ss_flags = 0, .ss_size = sizeof(alternate)};
    sigaltstack(&on_alternate, nullptr);
    struct sigaction on_fault {};
    on_fault.sa_handler = report_depth;
    on_fault.sa_flags = SA_ONSTACK;
    sigaction(SIGSEGV, &on_fault, nullptr);
    if (c.rank() == 1) recurse_forever(0);
  }), "faulted at depth [12]?[0-9]?[0-9]\n");
}

// ---- every collective, natively and as each labkit algorithm ---------------------

namespace {
// Inputs depend on rank and index, so a misrouted block shows.
float input(int rank, std::size_t i) { return float((rank + 1) * 1000 + i); }

struct Result {
  std::vector<std::vector<float>> per_rank;
};

// all_to_allv's blocks: uneven, some empty, different for every pair.
std::size_t v_count(int from, int to, std::size_t count) { return std::size_t(from * 3 + to * 5) % (count + 2); }

// Runs `op` with the given algorithm on P ranks with `count` elements per block;
// `nonblocking`: started with Comm::start, waited after a compute region.
Result run_collective(Collective op, const std::string& algo, int p, std::size_t count, int root, ReduceOp rop,
                      bool nonblocking = false) {
  Result out{std::vector<std::vector<float>>(p)};
  simulate(p, [&](Comm& c) {
    use_algorithm(c, op, algo);
    const int r = c.rank();
    const std::size_t big = count * p;
    auto fill = [&](std::size_t n) {
      std::vector<float> v(n);
      for (std::size_t i = 0; i < n; ++i) v[i] = input(r, i);
      return v;
    };
    std::vector<float> send, recv;
    std::vector<std::size_t> send_counts, recv_counts;
    switch (op) {
      case Collective::broadcast: case Collective::reduce: case Collective::all_reduce:
        recv = fill(count); break;
      case Collective::gather: send = fill(count); recv.resize(r == root ? big : 0); break;
      case Collective::scatter: send = r == root ? fill(big) : std::vector<float>{}; recv.resize(count); break;
      case Collective::all_gather: send = fill(count); recv.resize(big); break;
      case Collective::reduce_scatter: send = fill(big); recv.resize(count); break;
      case Collective::all_to_all: send = fill(big); recv.resize(big); break;
      case Collective::all_to_allv:
        for (int j = 0; j < p; ++j) send_counts.push_back(v_count(r, j, count)), recv_counts.push_back(v_count(j, r, count));
        send = fill(std::accumulate(send_counts.begin(), send_counts.end(), std::size_t(0)));
        recv.resize(std::accumulate(recv_counts.begin(), recv_counts.end(), std::size_t(0)));
        break;
      case Collective::barrier: break;
    }
    const CollectiveCall call{op, view_of(send), view_of(recv), rop, root, send_counts, recv_counts};
    if (nonblocking) {
      Request in_flight = c.start(call);
      c.compute_seconds("meanwhile", 1e-6);
      in_flight.wait();
    } else {
      c.run(call);
    }
    out.per_rank[r] = recv;
  });
  return out;
}
}  // namespace

TEST(SimCollectives, NativeMatchesTheClosedForm) {
  for (int p : {1, 2, 3, 5, 8}) {
    const std::size_t n = 3;
    auto sum = [&](std::size_t i) { float s = 0; for (int r = 0; r < p; ++r) s += input(r, i); return s; };
    const Result ar = run_collective(Collective::all_reduce, "native", p, n, 0, ReduceOp::sum);
    const Result avg = run_collective(Collective::all_reduce, "native", p, n, 0, ReduceOp::avg);
    const Result mx = run_collective(Collective::all_reduce, "native", p, n, 0, ReduceOp::max);
    const Result bc = run_collective(Collective::broadcast, "native", p, n, p - 1, ReduceOp::sum);
    const Result ag = run_collective(Collective::all_gather, "native", p, n, 0, ReduceOp::sum);
    const Result rs = run_collective(Collective::reduce_scatter, "native", p, n, 0, ReduceOp::sum);
    const Result a2a = run_collective(Collective::all_to_all, "native", p, n, 0, ReduceOp::sum);
    const Result a2av = run_collective(Collective::all_to_allv, "native", p, n, 0, ReduceOp::sum);
    for (int r = 0; r < p; ++r) {
      // Rank q's block for r starts after its blocks for the ranks before r, and
      // lands after the blocks from the ranks before q.
      std::size_t at = 0;
      for (int q = 0; q < p; ++q) {
        std::size_t from = 0;
        for (int i = 0; i < r; ++i) from += v_count(q, i, n);
        for (std::size_t k = 0; k < v_count(q, r, n); ++k) EXPECT_EQ(a2av.per_rank[r][at + k], input(q, from + k));
        at += v_count(q, r, n);
      }
      EXPECT_EQ(a2av.per_rank[r].size(), at);
    }
    for (int r = 0; r < p; ++r)
      for (std::size_t i = 0; i < n; ++i) {
        EXPECT_EQ(ar.per_rank[r][i], sum(i));
        EXPECT_FLOAT_EQ(avg.per_rank[r][i], sum(i) / p);
        EXPECT_EQ(mx.per_rank[r][i], input(p - 1, i));
        EXPECT_EQ(bc.per_rank[r][i], input(p - 1, i));
        for (int q = 0; q < p; ++q) EXPECT_EQ(ag.per_rank[r][q * n + i], input(q, i));
        EXPECT_EQ(rs.per_rank[r][i], sum(r * n + i));
        for (int q = 0; q < p; ++q) EXPECT_EQ(a2a.per_rank[r][q * n + i], input(q, r * n + i));
      }
  }
}

TEST(SimCollectives, EveryAlgorithmMatchesNativeOnEveryRankCountAndSize) {
  for (const Algorithm& algo : all_algorithms()) {
    if (algo.op == Collective::barrier) continue;
    for (int p = 1; p <= 9; ++p)
      for (std::size_t count : {0, 1, 5, 64})
        for (int root : {0, p - 1, p / 2}) {
          const ReduceOp rop = algo.op == Collective::all_reduce && p == 3 ? ReduceOp::max : ReduceOp::sum;
          const Result want = run_collective(algo.op, "native", p, count, root, rop);
          for (bool nonblocking : {false, true}) {
            const Result got = run_collective(algo.op, std::string(algo.name), p, count, root, rop, nonblocking);
            const Result native = run_collective(algo.op, "native", p, count, root, rop, nonblocking);
            for (int r = 0; r < p; ++r) {
              ASSERT_EQ(got.per_rank[r], want.per_rank[r])
                  << name_of(algo.op) << " algo " << algo.name << " P=" << p << " count=" << count << " root=" << root
                  << " rank " << r << (nonblocking ? " (non-blocking)" : "");
              ASSERT_EQ(native.per_rank[r], want.per_rank[r]) << name_of(algo.op) << " native, non-blocking";
            }
          }
        }
  }
}

TEST(SimCollectives, BarrierAlgorithmSynchronizes) {
  simulate(5, [](Comm& c) {
    use_algorithm(c, Collective::barrier, "dissemination");
    c.compute_seconds("work", c.rank() * 1e-3);
    c.barrier();
    EXPECT_GE(c.now(), 4e-3);
  });
}

TEST(SimReplay, StoppingAtATimeShowsOnlyWhatWasDeliveredByThen) {
  std::vector<float> inbox(2, 0.0f);
  auto rank_fn = [&](Comm& c) {
    std::vector<float> one = {1}, two = {2};
    if (c.rank() == 0) {
      c.send(view_of(one), 1);
      c.send(view_of(two), 1);
    } else {
      c.recv({&inbox[0], 1, DType::f32}, 0);
      c.recv({&inbox[1], 1, DType::f32}, 0);
    }
  };
  const double first = kH100.intra.alpha + 4 / kH100.intra.bandwidth;
  sim::Engine partial({.ranks = 2, .topology = kH100, .stop_at = first});
  partial.run(rank_fn);  // stopped, not deadlocked: no error
  EXPECT_EQ(inbox, (std::vector<float>{1, 0}));
  sim::Engine whole({.ranks = 2, .topology = kH100});
  whole.run(rank_fn);
  EXPECT_EQ(inbox, (std::vector<float>{1, 2}));
  EXPECT_DOUBLE_EQ(whole.elapsed(), 2 * first);
}

TEST(SimP2P, AReceiveMatchesOnlyItsOwnSource) {
  // Rank 0 posts receives from 3, 2, 1 (in that order) before anyone sends;
  // each must get its own sender's message, whatever order they arrive in.
  simulate(4, [](Comm& c) {
    if (c.rank() != 0) {
      std::vector<int> mine(c.rank(), c.rank());  // rank r sends r copies of r
      c.compute_seconds("stagger", c.rank() * 1e-6);  // rank 1 sends first
      c.send(view_of(mine), 0);
      return;
    }
    std::vector<std::vector<int>> in = {{}, std::vector<int>(1), std::vector<int>(2), std::vector<int>(3)};
    std::vector<Request> pending;
    for (int from = 3; from >= 1; --from) pending.push_back(c.irecv(view_of(in[from]), from));
    for (Request& r : pending) r.wait();
    for (int from = 1; from <= 3; ++from) EXPECT_EQ(in[from], std::vector<int>(from, from)) << "from " << from;
  });
}

TEST(SimCollectives, AllReduceAlgorithmsAreRightAcrossNodes) {
  // 2 full nodes, and 2 nodes plus a partial third (8 devices per node).
  for (int p : {16, 20})
    for (const char* algo : {"hierarchical", "recursive_halving_doubling", "ring", "binomial_tree"}) {
      const Result want = run_collective(Collective::all_reduce, "native", p, 37, 0, ReduceOp::sum);
      const Result got = run_collective(Collective::all_reduce, algo, p, 37, 0, ReduceOp::sum);
      for (int r = 0; r < p; ++r) ASSERT_EQ(got.per_rank[r], want.per_rank[r]) << algo << " P=" << p << " rank " << r;
    }
}

TEST(SimMemory, TracksCurrentAndPeakBytesAndTracesThemAsCounters) {
  auto run = simulate(2, [](Comm& c) {
    c.track_memory(MemoryUse::weights, 1000);
    c.track_memory(MemoryUse::activations, 500 * (c.rank() + 1));
    c.track_memory(MemoryUse::activations, -500 * (c.rank() + 1));
    c.track_memory(MemoryUse::gradients, 1000);
    EXPECT_EQ(c.memory().total(), 2000);
    EXPECT_EQ(c.memory().peak[std::size_t(MemoryUse::activations)], 500 * (c.rank() + 1));
    EXPECT_EQ(c.memory().peak_total, std::max(1500 + 500 * c.rank(), 2000));
    EXPECT_THROW(c.track_memory(MemoryUse::optimizer, -1), std::invalid_argument);
  });
  std::ostringstream json;
  run.trace->write_chrome_json(json, "sim");
  EXPECT_NE(json.str().find(R"("name":"rank 1 memory","ph":"C")"), std::string::npos);
  EXPECT_NE(json.str().find(R"("activations":1000.0)"), std::string::npos);
}

// Memory is the rank's: what a rank tells through one of its groups, the world sees.
TEST(SimMemory, ARanksGroupsShareItsTracker) {
  simulate(4, [](Comm& c) {
    std::unique_ptr<Comm> half = c.split(c.rank() / 2, c.rank());
    c.track_memory(MemoryUse::weights, 1000);
    half->track_memory(MemoryUse::gathered, 300);
    EXPECT_EQ(c.memory().total(), 1300);
    EXPECT_EQ(half->memory().total(), 1300);
    half->track_memory(MemoryUse::gathered, -300);
    EXPECT_EQ(c.memory().peak_total, 1300);
  });
}

namespace {
// Runs fn with rank `failing` stopped at virtual time `at`; the RankFailedError's report.
std::string failure_of(int ranks, int failing, double at, const std::function<void(Comm&)>& fn, Trace* trace = nullptr) {
  sim::Engine engine({.ranks = ranks, .topology = kH100, .trace = trace, .fail_rank = failing, .fail_at = at});
  try {
    engine.run(fn);
  } catch (const RankFailedError& e) {
    return e.what();
  }
  return "no failure";
}
}  // namespace

TEST(SimFaults, PeersWaitingOnAFailedRankAreToldWhoAndWhatInsteadOfHanging) {
  Trace trace(4);
  bool ran_past = false;
  const std::string report = failure_of(4, 1, 5e-6, [&](Comm& c) {
    std::vector<int> x(4);
    if (c.rank() == 1) {
      c.compute_seconds("work", 10e-6);  // cut at 5 us: rank 1 never gets past it
      ran_past = true;
      c.send(view_of(x), 0);
    } else if (c.rank() == 0) {
      c.recv(view_of(x), 1);
    } else if (c.rank() == 2) {
      c.recv(view_of(x), 0);  // rank 0 stops on the error and never sends
    }
  }, &trace);
  EXPECT_FALSE(ran_past);
  EXPECT_NE(report.find("rank 1 failed at t = 5.00 us; how every rank ended:"), std::string::npos) << report;
  EXPECT_NE(report.find("  rank 0: recv(from=1, tag=0): rank 1 failed at t = 5.00 us\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  rank 1: failed at t = 5.00 us\n"), std::string::npos) << report;
  EXPECT_NE(report.find("  rank 2: recv(from=0, tag=0)\n"), std::string::npos) << report;  // rank 0 never sends
  EXPECT_NE(report.find("  rank 3: finished\n"), std::string::npos) << report;
  // The trace: a "failed" instant on rank 1 at 5 us and no compute span; rank 0's
  // receive ends then, with the error and no arrow.
  const std::vector<TraceEvent>& failed = trace.tracks()[1].events;
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].kind, TraceEvent::Kind::fault);
  EXPECT_DOUBLE_EQ(failed[0].start, 5e-6);
  const std::vector<TraceEvent> recv = test::recvs_of(trace, 0);
  ASSERT_EQ(recv.size(), 1u);
  EXPECT_DOUBLE_EQ(recv[0].end, 5e-6);
  EXPECT_EQ(recv[0].flow, 0u);
  ASSERT_EQ(recv[0].args.size(), 1u);
  EXPECT_EQ(recv[0].args[0].second, "rank 0: recv(from=1, tag=0): rank 1 failed at t = 5.00 us");
  std::ostringstream json;
  trace.write_chrome_json(json, "sim");
  EXPECT_NE(json.str().find(R"("cat":"fault","name":"failed","ph":"i")"), std::string::npos) << json.str();
}

TEST(SimFaults, CollectivesAndLaterCallsFailButWhatWasDeliveredStands) {
  // A collective the failed rank never joins, and one it joined that ends after it failed.
  for (const bool joins : {false, true}) {
    const std::string report = failure_of(3, 2, 1e-6, [&](Comm& c) {
      std::vector<float> x(joins ? 1 << 20 : 4);  // 4 MiB take longer than 1 us
      if (joins ? c.rank() != 2 : c.rank() == 2) c.compute_seconds("late", joins ? 0.5e-6 : 2e-6);
      try {
        c.all_reduce(view_of(x), ReduceOp::sum);
      } catch (const RankFailedError&) {
        EXPECT_DOUBLE_EQ(c.now(), 1e-6) << "rank " << c.rank() << " learned of the failure late";
        throw;
      }
    });
    EXPECT_NE(report.find("  rank 0: all_reduce(group=0): rank 2 failed at t = 1.00 us\n"), std::string::npos) << report;
    EXPECT_NE(report.find("  rank 1: all_reduce(group=0): rank 2 failed at t = 1.00 us\n"), std::string::npos) << report;
  }
  const std::string report = failure_of(2, 1, 5e-6, [](Comm& c) {
    std::vector<int> x(4);
    if (c.rank() == 1) {
      c.send(view_of(x), 0);  // delivered at about 1 us, before the failure
      return c.compute_seconds("work", 10e-6);
    }
    Request r = c.irecv(view_of(x), 1);
    c.compute_seconds("work", 10e-6);
    r.wait();
    c.send(view_of(x), 1);  // posted after rank 1 failed
  });
  EXPECT_NE(report.find("  rank 0: send(to=1, tag=0, 16 bytes): rank 1 failed at t = 5.00 us\n"), std::string::npos)
      << report;
  EXPECT_EQ(failure_of(2, 1, 1.0, [](Comm& c) { c.barrier(); }), "no failure");  // it finished first
}

TEST(SimP2P, AMovedRequestIsWaitedOnceThroughItsNewHandle) {
  static_assert(!std::is_copy_constructible_v<Request> && std::is_nothrow_move_constructible_v<Request>);
  simulate(2, [](Comm& c) {
    std::vector<float> mine(4, float(c.rank())), theirs(4, -1.0f);
    Request send = c.isend(view_of(mine), 1 - c.rank());
    Request recv = c.irecv(view_of(theirs), 1 - c.rank());
    Request moved = std::move(recv);
    recv.wait();  // moved from: waits for nothing
    EXPECT_EQ(theirs[0], -1.0f);
    moved.wait();
    send.wait();
    EXPECT_EQ(theirs[0], float(1 - c.rank()));
    moved.wait();  // completed: a second wait is a no-op
  });
}

TEST(SimFaults, ARankStoppedByTheErrorTakesItsOpenRequestsWithIt) {
  const std::string report = failure_of(3, 2, 1e-6, [](Comm& c) {
    std::vector<int> x(4);
    if (c.rank() == 2) return c.compute_seconds("work", 2e-6);
    if (c.rank() == 1) {
      Request from_0 = c.irecv(view_of(x), 0);  // never waited: rank 1 stops at the next line
      c.recv(view_of(x), 2);
      from_0.wait();
    }
    c.compute_seconds("work", 3e-6);
    c.send(view_of(x), 1);  // no receive to match: rank 1's buffer is gone
  });
  EXPECT_NE(report.find("  rank 0: send(to=1, tag=0, 16 bytes)\n"), std::string::npos) << report;
  // A message under way from a rank that stops on the failure never arrives, and its receiver is told.
  const std::string orphaned = failure_of(3, 2, 1e-6, [](Comm& c) {
    std::vector<float> x(1 << 20);  // 4 MiB: still on the wire when rank 1 stops
    if (c.rank() == 2) return c.compute_seconds("work", 2e-6);
    if (c.rank() == 0) return c.recv(view_of(x), 1);
    Request to_0 = c.isend(view_of(x), 0);
    c.recv(view_of(x), 2);
    to_0.wait();
  });
  EXPECT_NE(orphaned.find("  rank 0: recv(from=1, tag=0): rank 1 stopped on the failure of rank 2 at t = 1.00 us\n"),
            std::string::npos) << orphaned;
}

// ---- non-blocking collectives: in flight on the rank's communication stream ------

namespace {
// How long one all_reduce of `bytes` takes on 8 ranks with `algo`, alone.
double all_reduce_alone(const std::string& algo, std::size_t bytes) {
  return simulate(8, [&](Comm& c) {
           std::vector<float> g(bytes / 4, 1.0f);
           use_algorithm(c, Collective::all_reduce, algo);
           c.all_reduce(view_of(g), ReduceOp::sum);
         }).elapsed;
}
}  // namespace

TEST(SimOverlap, ComputeBesideAnAllReduceInFlightTakesTheLongerOfTheTwo) {
  const std::size_t bytes = 1 << 20;
  for (const std::string algo : {"native", "ring"}) {
    const double a = all_reduce_alone(algo, bytes);
    for (double c : {a / 2, 2 * a}) {
      auto step = [&](bool overlap) {
        return simulate(8, [&](Comm& comm) {
                 std::vector<float> g(bytes / 4, float(comm.rank()));
                 use_algorithm(comm, Collective::all_reduce, algo);
                 if (overlap) {
                   Request r = comm.i_all_reduce(view_of(g), ReduceOp::sum);
                   comm.compute_seconds("backward", c);
                   r.wait();
                 } else {
                   comm.all_reduce(view_of(g), ReduceOp::sum);
                   comm.compute_seconds("backward", c);
                 }
                 EXPECT_EQ(g[0], 28.0f);  // 0 + 1 + ... + 7
               }).elapsed;
      };
      // The model: the allreduce costs A whether or not the rank computes meanwhile.
      EXPECT_NEAR(step(true), std::max(a, c), 1e-12) << algo << " C = " << c << " A = " << a;
      EXPECT_NEAR(step(false), a + c, 1e-12) << algo;
    }
  }
}

TEST(SimOverlap, CollectivesStartedOnOneGroupRunOneAfterAnother) {
  const std::size_t bytes = 1 << 20;
  for (const std::string algo : {"native", "ring"}) {
    const double a = all_reduce_alone(algo, bytes);
    const double both = simulate(8, [&](Comm& c) {
                          std::vector<float> x(bytes / 4, 1.0f), y(bytes / 4, 2.0f);
                          use_algorithm(c, Collective::all_reduce, algo);
                          Request first = c.i_all_reduce(view_of(x), ReduceOp::sum);
                          Request second = c.i_all_reduce(view_of(y), ReduceOp::avg);
                          EXPECT_FALSE(second.test());  // nothing is done at once
                          second.wait();
                          EXPECT_TRUE(first.test());  // it ran first
                          first.wait();               // a no-op now
                          EXPECT_EQ(x[0], 8.0f);
                          EXPECT_EQ(y[0], 2.0f);
                        }).elapsed;
    EXPECT_NEAR(both, 2 * a, 1e-9) << algo;
  }
}

// DDP's pattern: a bucket is posted while the one before is still running on
// the stream (here a labkit algorithm, which blocks the stream mid-call), so
// the rank's queue grows under the running call, and each must still finish
// on its own buffers.
TEST(SimOverlap, CallsPostedWhileOneRunsLeaveItIntact) {
  const int buckets = 33;
  simulate(8, [&](Comm& c) {
    use_algorithm(c, Collective::all_reduce, "ring");
    std::vector<std::vector<float>> grads;
    for (int i = 0; i < buckets; ++i) grads.emplace_back(1024, float(c.rank() + i));
    std::vector<Request> in_flight;
    for (std::vector<float>& g : grads) {
      in_flight.push_back(c.i_all_reduce(view_of(g), ReduceOp::avg));
      c.compute_seconds("backward", 1e-7);  // the stream starts the call and blocks in it
    }
    for (Request& r : in_flight) r.wait();
    for (int i = 0; i < buckets; ++i) EXPECT_EQ(grads[i][0], 3.5f + float(i)) << "bucket " << i;  // mean of rank + i
  });
}

TEST(SimOverlap, TheStreamIsDrawnOnItsOwnTrackUnderTheRank) {
  for (const std::string algo : {"native", "ring"}) {
    auto run = simulate(2, [&](Comm& c) {
      std::vector<float> g(1024, 1.0f);
      use_algorithm(c, Collective::all_reduce, algo);
      Request r = c.i_all_reduce(view_of(g), ReduceOp::sum);
      c.compute_seconds("backward", 1e-3);
      r.wait();
    });
    int on_stream = 0;
    for (const TraceEvent& e : run.trace->tracks()[1].events) {
      EXPECT_EQ(e.on_stream, e.kind != TraceEvent::Kind::compute) << algo << " " << e.name;
      if (e.kind == TraceEvent::Kind::collective) {
        EXPECT_EQ(e.start, 0.0) << algo;  // in flight from the start, under the compute region
        EXPECT_LT(e.end, 1e-3) << algo;
      }
      on_stream += e.on_stream;
    }
    EXPECT_EQ(on_stream, algo == "native" ? 1 : 5) << algo;  // and the ring's two steps: a send and a receive each
    std::ostringstream json;
    run.trace->write_chrome_json(json, "sim");
    EXPECT_NE(json.str().find("\"rank 1 / comm\""), std::string::npos);
  }
}

TEST(SimOverlap, MisuseIsNamedNotHidden) {
  for (const std::string algo : {"native", "ring"}) {
    // A rank that returns before its collective is done would leave it writing into freed buffers.
    EXPECT_THAT(error_of(2, [&](Comm& c) {
                  static std::vector<float> g(16);
                  use_algorithm(c, Collective::all_reduce, algo);
                  (void)c.i_all_reduce(view_of(g), ReduceOp::sum);
                }),
                testing::HasSubstr("returned with")) << algo;
    // A peer that never joins: the deadlock report names the stream and what it waits in.
    const std::string deadlock = error_of(2, [&](Comm& c) {
      std::vector<float> g(16);
      use_algorithm(c, Collective::all_reduce, algo);
      if (c.rank() == 0) c.i_all_reduce(view_of(g), ReduceOp::sum).wait();
    });
    EXPECT_THAT(deadlock, testing::HasSubstr("deadlock")) << algo;
    EXPECT_THAT(deadlock, testing::HasSubstr(algo == "native" ? "all_reduce(group=0) waiting for rank 1"
                                                              : "rank 0 / comm: send(to=1")) << deadlock;
    // Arguments are checked when the collective starts.
    EXPECT_THAT(error_of(2, [&](Comm& c) {
                  std::vector<float> x(4), y(3);
                  use_algorithm(c, Collective::all_gather, algo == "native" ? algo : "ring");
                  c.i_all_gather(view_of(x), view_of(y)).wait();
                }),
                testing::HasSubstr("rank 0: all_gather: recv count 3 is not divisible by 2 ranks")) << algo;
  }
}

TEST(SimOverlap, APeerThatFailsEndsTheWaitWithItsName) {
  for (const std::string algo : {"native", "ring"}) {
    std::vector<std::string> errors(4);
    sim::Engine engine({.ranks = 4, .topology = kH100, .fail_rank = 2, .fail_at = 1e-3});
    EXPECT_THROW(engine.run([&](Comm& c) {
                   std::vector<float> g(1 << 16, 1.0f);
                   use_algorithm(c, Collective::all_reduce, algo);
                   if (c.rank() == 2) c.compute_seconds("slow", 1.0);
                   Request r = c.i_all_reduce(view_of(g), ReduceOp::sum);
                   try {
                     r.wait();
                   } catch (const RankFailedError& e) {
                     errors[c.rank()] = e.what();
                     throw;
                   }
                 }),
                 RankFailedError) << algo;
    // Natively every rank waits on the group; in the ring, rank 1 sends to rank 2 and rank 3 receives from it.
    for (int r : algo == "native" ? std::vector{0, 1, 3} : std::vector{1, 3})
      EXPECT_THAT(errors[r], testing::HasSubstr("rank 2 failed at t = 1")) << algo << " rank " << r;
  }
}

// gather_object: a struct of results travels whole to rank 0, in rank order,
// untimed; a rank may send none or several (gather_objects).
TEST(SimInstrument, GatherObjectBringsEveryRanksStructToRankZero) {
  struct Result {
    int rank;
    double loss;
    bool agrees;
  };
  std::vector<Result> at_zero;
  std::vector<std::vector<Result>> lists;
  const auto run = simulate(3, [&](Comm& c) {
    const std::vector<Result> results = c.gather_object(Result{c.rank(), 0.5 * c.rank(), c.rank() != 1});
    std::vector<Result> several(std::size_t(c.rank()), Result{c.rank(), 1.0, true});  // rank r sends r results
    const auto gathered = c.gather_objects(several);
    if (c.rank() == 0) {
      at_zero = results, lists = gathered;
    } else {
      EXPECT_TRUE(results.empty());
      EXPECT_TRUE(gathered.empty());
    }
  });
  ASSERT_EQ(at_zero.size(), 3u);
  for (int r = 0; r < 3; ++r) {
    EXPECT_EQ(at_zero[std::size_t(r)].rank, r);
    EXPECT_EQ(at_zero[std::size_t(r)].loss, 0.5 * r);
    EXPECT_EQ(at_zero[std::size_t(r)].agrees, r != 1);
    ASSERT_EQ(lists[std::size_t(r)].size(), std::size_t(r));
  }
  EXPECT_EQ(run.elapsed, 0.0);  // an instrument: no virtual time
  EXPECT_EQ(run.messages, 0u);
}
