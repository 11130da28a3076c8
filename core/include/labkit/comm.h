// labkit::Comm — the one API every lab is written against.
//
// A Comm is one rank's handle on a group of ranks (like an MPI communicator or an
// NCCL ncclComm_t). Point-to-point and the collectives are non-virtual: they check
// their arguments, record the trace, and hand the work to a few virtual hooks
// that each backend (sim, mpi, nccl) implements. A collective runs either as the
// backend's native implementation or as a labkit algorithm over point-to-point,
// chosen by name with set_algorithm (the labs' --algo flag).
#pragma once

#include <array>
#include <cstring>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "labkit/collective.h"
#include "labkit/cost_model.h"
#include "labkit/memory_tracker.h"
#include "labkit/trace.h"
#include "labkit/view.h"

namespace labkit {

class Comm;

// A labkit collective algorithm: a function over a Comm's point-to-point that
// does what `op` does, as the backend's native collective would.
// solutions/collectives/ defines them and algorithms.h lists them; Comm only
// runs the one it is given.
struct Algorithm {
  Collective op;
  std::string_view name;
  void (*run)(Comm& comm, const CollectiveCall& call);
};

// The global ranks of a group, shared by all its members' Comms (one copy per
// group, not per rank: 4096 ranks would otherwise hold 64 MB of copies).
using Members = std::shared_ptr<const std::vector<int>>;

// A pending operation: an isend, an irecv, or a collective started with i_*.
// wait() blocks until it completes; test() asks. Its buffers belong to it until
// then: do not touch them, and do not let them go (a rank that returns with a
// collective in flight is an error on the simulator).
// Move-only: one operation has one handle, so it cannot be waited on twice
// through copies (the backend recycles its id once it completes); a moved-from
// or completed Request waits for nothing.
class [[nodiscard]] Request {
 public:
  Request() = default;
  Request(Request&& other) noexcept { *this = std::move(other); }
  Request& operator=(Request&& other) noexcept {
    comm_ = std::exchange(other.comm_, nullptr);
    id_ = other.id_, kind_ = other.kind_, buf_ = other.buf_;
    peer_ = other.peer_, tag_ = other.tag_, posted_ = other.posted_;
    return *this;
  }
  Request(const Request&) = delete;
  Request& operator=(const Request&) = delete;
  void wait();
  bool test();

 private:
  friend class Comm;
  // A collective runs natively (the backend's library) or as a labkit algorithm
  // (on the backend's communication stream, or already done where it has none).
  enum class Kind { send, recv, native, algorithm };
  Request(Comm* comm, std::int64_t id, Kind kind, View buf, int peer, int tag, double posted)
      : comm_(comm), id_(id), kind_(kind), buf_(buf), peer_(peer), tag_(tag), posted_(posted) {}
  Comm* comm_ = nullptr;
  std::int64_t id_ = -1;
  Kind kind_ = Kind::send;
  View buf_;
  int peer_ = -1;
  int tag_ = 0;
  double posted_ = 0;
};

class Comm {
 public:
  virtual ~Comm() = default;

  int rank() const { return rank_; }
  int size() const { return size_; }
  // Global rank of a rank of this group (its trace track).
  int global_rank(int group_rank) const { return global_ranks_->at(group_rank); }
  // The node (host) a rank of this group runs on, for topology-aware algorithms.
  int node_of(int group_rank) const { return node_of_global(global_rank(group_rank)); }
  // How many nodes this group's ranks run on: its collectives cross the network when more than one.
  int nodes_spanned() const;
  const GroupNodes& nodes() const;  // node_of each rank of this group, counted once

  // ---- point-to-point. A blocking send returns once the message is delivered
  // (rendezvous, like MPI_Ssend), so two ranks that both send first deadlock:
  // exchange with sendrecv, or isend/irecv and wait.
  void send(View buf, int to, int tag = 0);
  void recv(View buf, int from, int tag = 0);
  void sendrecv(View send_buf, int to, View recv_buf, int from, int tag = 0);
  Request isend(View buf, int to, int tag = 0);
  Request irecv(View buf, int from, int tag = 0);

  // ---- collectives (count and root rules in collective.h)
  void broadcast(View buf, int root);
  void reduce(View buf, ReduceOp op, int root);
  void all_reduce(View buf, ReduceOp op);
  void gather(View send, View recv, int root);
  void scatter(View send, View recv, int root);
  void all_gather(View send, View recv);
  void reduce_scatter(View send, View recv, ReduceOp op);
  void all_to_all(View send, View recv);
  // Blocks of different sizes: send_counts[j] elements go to rank j and
  // recv_counts[j] come from it, each buffer's blocks packed in rank order (an
  // MoE layer's token dispatch). Rank j's send_counts[i] must equal rank i's
  // recv_counts[j]: where the receivers do not know them, exchange_counts first.
  void all_to_allv(View send, std::span<const std::size_t> send_counts, View recv,
                   std::span<const std::size_t> recv_counts);
  // What every rank sends this one, from what this one sends each rank: one
  // small all_to_all of the counts (as MoE dispatch sends its token counts first).
  std::vector<std::size_t> exchange_counts(std::span<const std::size_t> send_counts);
  void barrier();
  void run(const CollectiveCall& call);

  // ---- non-blocking collectives: the same operations, started on this rank's
  // communication stream for the group (as NCCL runs a collective on a CUDA
  // stream) and in flight while the rank computes; Request::wait ends them.
  // The collectives a rank starts on one group run one after another, in the
  // order it started them. A blocking collective does not queue behind them:
  // wait first where the order matters.
  Request i_broadcast(View buf, int root);
  Request i_all_reduce(View buf, ReduceOp op);
  Request i_all_gather(View send, View recv);
  Request i_reduce_scatter(View send, View recv, ReduceOp op);
  Request i_all_to_all(View send, View recv);
  Request i_all_to_allv(View send, std::span<const std::size_t> send_counts, View recv,
                        std::span<const std::size_t> recv_counts);  // the counts live until the wait
  Request start(const CollectiveCall& call);

  // Split into sub-groups, like MPI_Comm_split: ranks with the same color form a
  // group, ordered by key then by rank here. A negative color joins no group (null).
  std::unique_ptr<Comm> split(int color, int key);
  // The ranks of this group on this rank's node (by rank), and the group of each
  // node's first rank (null on the other ranks): for topology-aware algorithms.
  // Split on first use and kept while this Comm lives, so that an algorithm called
  // every step splits once; like split, every rank makes that first call together.
  Comm& node_group();
  Comm* node_leaders();

  // ---- compute regions: advance this rank's clock as real work would, by a
  // modeled amount of work. On the simulator `flops` cost flops / (device peak x
  // efficiency x speed factor); `seconds` is the duration itself.
  void compute_flops(std::string_view what, double flops);
  void compute_seconds(std::string_view what, double seconds);
  // Real work this rank has just done, since `started` (a now() reading): on a
  // real backend the span from then to now, as long as it really took (on a GPU,
  // until the ops this rank queued have run); on the simulator, whose clock
  // real work does not move, `flops` charged as compute_flops().
  void record_compute(std::string_view what, double started, double flops);

  // ---- memory: say what you allocate and free, by use; the trace draws it as a
  // counter per rank, and memory() keeps the current and peak bytes. A rank's
  // groups (split) share its tracker: memory is the rank's, whichever group tells it.
  void track_memory(MemoryUse use, std::int64_t bytes);
  const MemoryTracker& memory() const { return *memory_; }

  // What a backend's wait for a native collective returns: when it began and
  // ended on this rank's stream, and the algorithm the library chose.
  struct NativeDone {
    double started, ended;
    std::string_view algorithm;
  };

  // Seconds since the run started: virtual on sim, wall clock on real backends.
  virtual double now() const = 0;

  // Choose how a collective runs: the backend's own (null, "native") or a labkit
  // algorithm. The labs' --algo flag chooses by name: use_algorithm (algorithms.h).
  void set_algorithm(Collective op, const Algorithm* algorithm);
  std::string_view algorithm(Collective op) const;  // "native" or the algorithm's name
  const Algorithm* algorithm_for(Collective op) const { return algorithms_[std::size_t(op)]; }
  // The collectives called so far, by collective and by how each ran ("native" or
  // the algorithm's name): shared with the groups split from this Comm, so the
  // launcher can tell an --algo choice that no collective used (backends/run.cpp).
  using CollectiveCalls = std::map<std::pair<Collective, std::string_view>, std::uint64_t>;
  const CollectiveCalls& collective_calls() const { return *calls_; }

  std::string who() const;  // "rank 2", or "rank 1 of group 3 (global rank 6)": how errors name it

  // An instrument, not a collective (PyTorch's gather_object): every rank's
  // `values` on rank 0, a vector per rank in rank order, copied as bytes, so a
  // plain struct of results travels whole; nothing on the other ranks. Untraced,
  // and free of virtual time on the simulator.
  template <class T>
    requires std::is_trivially_copyable_v<T>
  std::vector<std::vector<T>> gather_objects(std::span<const T> values) {
    std::vector<std::vector<T>> all;
    const View bytes_view{const_cast<T*>(values.data()), values.size_bytes(), DType::u8};  // only read
    for (const std::vector<std::byte>& bytes : gather_untimed(bytes_view)) {
      std::vector<T>& from = all.emplace_back(bytes.size() / sizeof(T));
      if (!bytes.empty()) std::memcpy(from.data(), bytes.data(), bytes.size());
    }
    return all;
  }
  template <class T>
  std::vector<std::vector<T>> gather_objects(const std::vector<T>& values) {
    return gather_objects(std::span<const T>(values));
  }
  // One value a rank: rank 0 gets them in rank order.
  template <class T>
    requires std::is_trivially_copyable_v<T>
  std::vector<T> gather_object(const T& value) {
    std::vector<T> all;
    for (const std::vector<T>& one : gather_objects(std::span<const T>(&value, 1))) all.push_back(one.front());
    return all;
  }

 protected:
  // comm_id names the group uniquely in a run (0 = world); it keeps flow ids apart.
  Comm(int comm_id, int rank, Members global_ranks, TraceTrack* track);

  // What a backend implements.
  virtual std::int64_t post_send(View buf, int to, int tag) = 0;
  virtual std::int64_t post_recv(View buf, int from, int tag) = 0;
  virtual void wait_request(std::int64_t id) = 0;
  virtual bool test_request(std::int64_t id) = 0;
  virtual void check_collective(const CollectiveCall&) {}  // cross-rank argument check, if cheap
  // Runs the collective as the backend's own library would; returns that library's
  // algorithm ("ring", "tree") for the trace.
  virtual std::string_view run_native(const CollectiveCall& call) = 0;
  // The same, started on the communication stream: an id to wait on or test.
  virtual std::int64_t start_native(const CollectiveCall& call) = 0;
  virtual NativeDone wait_native(std::int64_t id) = 0;
  virtual bool test_native(std::int64_t id) = 0;
  // A labkit algorithm started non-blocking. A backend with a communication
  // stream for them runs `call` there (as a blocking run() of a Comm of its own)
  // and returns an id; by default it runs now, on this rank, and returns -1 (done).
  virtual std::int64_t start_algorithm(const CollectiveCall& call) {
    run(call);
    return -1;
  }
  virtual void wait_algorithm(std::int64_t) {}
  virtual bool test_algorithm(std::int64_t) { return true; }
  virtual std::unique_ptr<Comm> split_group(int color, int key) = 0;
  virtual void advance(double seconds) = 0;
  virtual bool clock_is_virtual() const { return false; }  // the simulator's: only advance() moves it
  virtual int node_of_global(int global_rank) const = 0;
  virtual double seconds_for_flops(double flops) const = 0;
  virtual std::vector<std::vector<std::byte>> gather_untimed(View buf) = 0;

  TraceTrack* track() const { return track_; }
  // This Comm runs a rank's communication stream: its events go on the rank's
  // "comm" track in the trace.
  void mark_as_stream() { on_stream_ = true; }

 private:
  friend class Request;
  bool complete(Request& r, bool block);  // wait (block) or test, then finish
  void finish(Request& r, std::string_view error = {});
  bool worked_since(double posted) const;  // computed or ran a collective since then: a message was in flight
  void check_peer(std::string_view op, int peer, std::string_view arg) const;
  void validate(const CollectiveCall& call) const;
  void trace_collective(const CollectiveCall& call, double start, std::string_view native_algo,
                        std::string_view error = {}, bool on_stream = false, double end = -1);  // end -1: now
  void record(TraceEvent event);
  void divide_if_avg(const CollectiveCall& call);

  int comm_id_;
  int rank_;
  int size_;
  mutable std::optional<GroupNodes> nodes_;  // counted on first use
  Members global_ranks_;
  TraceTrack* track_;  // null when not tracing
  std::array<const Algorithm*, kCollectives.size()> algorithms_{};  // null: native
  bool on_stream_ = false;
  // Native collectives in flight: the call as given (an avg divides at the end) and when it was started.
  std::map<std::int64_t, std::pair<CollectiveCall, double>> in_flight_;
  std::unique_ptr<Comm> node_group_;
  std::optional<std::unique_ptr<Comm>> node_leaders_;  // empty until split; null off the leaders
  std::shared_ptr<MemoryTracker> memory_ = std::make_shared<MemoryTracker>();
  std::shared_ptr<CollectiveCalls> calls_ = std::make_shared<CollectiveCalls>();
  // Flow-arrow ids: the k-th message from A to B with tag t is matched by B's k-th
  // receive from A with tag t (MPI's non-overtaking rule), so both ends can name it.
  std::map<std::tuple<int, int, int>, std::uint64_t> flow_counts_;
  std::uint64_t flow_id(int src, int dst, int tag);
};

}  // namespace labkit
