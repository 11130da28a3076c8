// The simulated backend's discrete-event engine (in the style of SimGrid's
// EngineImpl). Every rank is a fiber; every blocking call yields to the engine,
// which always resumes the ready rank with the earliest virtual time (ties go to
// the lower rank), so a run is deterministic whatever the machine's load.
//
// Network: a device has one port out and one port in (inside a node;
// NVSwitch-like), a node has NICs out and in (between nodes). A message, once
// both ends are posted, pays its link's alpha and then moves its bytes as a
// flow through two ports: the sender's out and the receiver's in. Flows that
// share a port share its bandwidth max-min fairly (SimGrid's model, checked
// against SMPI by `./labkit simgrid`; solved in fair_sharing.h): the rates are
// solved again whenever a flow starts or ends, over the flows linked to it
// through shared ports, so a flow speeds up when another leaves. Alone on its ports, a message costs
// alpha + n / bandwidth. Network::serial is the older model, kept to compare:
// each port carries one message's bytes at a time, in the order they start.
// A blocking send completes when the message is delivered (rendezvous), and
// the bytes land in the receive buffer at that moment.
//
// Non-blocking collectives run on a rank's communication stream, one per group
// (as NCCL runs each communicator's work on a CUDA stream): a native one is a
// rendezvous that starts when every rank's stream is free and its call posted,
// and ends the cost model's time later, whatever the ranks do meanwhile; a
// labkit algorithm runs on an actor of its own, a fiber with its own clock that
// sends and receives as the rank while the rank computes.
//
// Faults: a rank can be failed at a virtual time (Options::fail_rank). It stops
// there, and every rank whose operation needs it gets a RankFailedError at that
// time, or later when it posts one; the run then ends with a report of every rank.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <limits>
#include <deque>
#include <map>
#include <memory>
#include <queue>
#include <string>
#include <tuple>
#include <vector>

#include <boost/context/fiber.hpp>

#include "asan_fibers.h"
#include "fair_sharing.h"
#include "labkit/collective.h"
#include "labkit/comm.h"
#include "labkit/error.h"
#include "labkit/topology.h"
#include "labkit/trace.h"

namespace labkit::sim {

// How messages that meet on a port share it (see the comment above).
enum class Network { fair, serial };

struct Options {
  int ranks = 4;
  Topology topology;
  bool payload = true;       // false: sizes only, for what-if runs at scale
  double efficiency = 0.5;   // achieved fraction of the device's peak FLOP/s
  std::vector<double> speed = {};  // per rank; 0.5 = a straggler at half speed (empty: all 1)
  Trace* trace = nullptr;    // null: not tracing
  // Stop the run once the next event is later than this (seconds): what every
  // buffer holds at that instant. A deterministic run replays exactly up to it.
  double stop_at = std::numeric_limits<double>::infinity();
  // Called every 2^20 messages with the count so far, for a progress line.
  std::function<void(std::uint64_t messages)> progress = nullptr;
  // Sees every send and receive as it is posted, buffer included: the grader
  // names which chunk of a rank's buffer went where from it.
  std::function<void(int rank, bool is_send, int peer, View buf)> on_post = nullptr;
  // Fault injection: this rank stops at virtual time fail_at (seconds), unless it
  // has finished by then. -1: no rank fails.
  int fail_rank = -1;
  double fail_at = 0;
  Network network = Network::fair;
};

// Thrown when every live rank is blocked; what() lists each pending operation.
struct DeadlockError : Error {
  using Error::Error;
};

class Engine {
 public:
  explicit Engine(Options options);
  ~Engine();

  // Runs rank_fn once per rank until all return (or until options.stop_at).
  // Throws the first rank's error (in virtual-time order), a DeadlockError, or
  // after a failure a RankFailedError whose what() says how every rank ended.
  void run(const std::function<void(Comm&)>& rank_fn);

  double elapsed() const;  // the latest rank's virtual time, seconds
  // Options::fail_rank's clock: when it failed, or when it finished first (it then never failed).
  double failing_rank_time() const { return ranks_.at(options_.fail_rank).now; }
  std::uint64_t messages() const { return messages_; }
  // Whether each rank computed for any time (advance): --straggler and
  // --efficiency change nothing in a run where no rank does.
  const std::vector<bool>& computed() const { return computed_; }
  const Options& options() const { return options_; }

  // The rank whose own code runs at this moment (-1: the engine). While a rank
  // runs, the others are parked, so a watchdog thread or a crash handler may
  // read these two to say where a run is stuck or faulted.
  int running() const { return running_.load(std::memory_order_relaxed); }
  // From another thread (a watchdog): the next time a rank calls into the
  // engine, it runs `then` there, where the engine's state holds still to be
  // read. cancel_interrupt() takes it back, unless it has started (false).
  void interrupt(std::function<void()> then);
  bool cancel_interrupt();
  // One line per rank: running, finished, failed (or stopped by a failure), or
  // the operation it waits in, with the last call each made (the deadlock and
  // failure reports' lines).
  std::string rank_states() const;

  // ---- what SimComm calls. `rank` is an actor: a global rank (its own code),
  // or a rank's communication stream, which sends and receives as that rank.
  double now(int rank) const { return actor(rank).now; }
  void advance(int rank, double seconds);
  double seconds_for_flops(int rank, double flops) const;
  std::int64_t post(bool is_send, int rank, int peer, int tag, int comm_id, View buf);
  void wait(int rank, std::int64_t op);
  bool test(int rank, std::int64_t op);
  void check_collective(int rank, int comm_id, std::uint64_t seq, const CollectiveCall& call, const std::string& who);
  // A native collective, the seq-th of its group, started on this rank's stream;
  // wait_native returns when it started there and the algorithm the cost model chose.
  void start_native(int rank, int comm_id, std::uint64_t seq, const CollectiveCall& call);
  Comm::NativeDone wait_native(int rank, int comm_id, std::uint64_t seq);
  bool test_native(int rank, int comm_id, std::uint64_t seq);
  // A labkit algorithm started non-blocking: `call` runs with `algorithm` on the
  // rank's stream for the group; the id counts the calls started there.
  std::int64_t start_on_stream(int rank, int comm_id, const CollectiveCall& call, const Algorithm* algorithm,
                               TraceTrack* track);
  void wait_stream(int rank, int comm_id, std::int64_t id);
  bool test_stream(int rank, int comm_id, std::int64_t id);
  std::vector<std::vector<std::byte>> gather_untimed(int rank, int comm_id, std::uint64_t seq, View buf);
  struct Membership {
    int comm_id;
    int rank;
    Members members;  // global ranks
  };
  Membership split(int rank, int comm_id, std::uint64_t seq, int color, int key);
  // A member's Comm of this group is gone (SimComm's destructor). Once every
  // member's is, the engine drops the group's record; its id is never reused.
  void close_group(int comm_id);
  // Groups whose record the engine still holds: the world, every split group
  // some member still has a Comm for, and the context of each group a
  // non-blocking collective ran on (its streams' Comms live as long as the engine).
  int live_groups() const;

 private:
  enum class Channel { collective, gather_object, split };
  using RendezvousKey = std::tuple<int, Channel, std::uint64_t>;
  // A posted send or receive.
  struct P2P {
    bool is_send = false;
    int owner = -1, peer = -1, tag = 0, comm_id = 0;  // owner and peer: global ranks
    int actor = -1;          // who posted it: the owner, or its communication stream
    View buf;
    double posted = 0;
    bool done = false;       // matched: its delivery time is known
    double complete = 0;     // virtual time the message is delivered
    std::int64_t partner = -1;  // the matching receive or send
    bool delivered = false;  // the bytes have been copied
    bool orphaned = false;   // the other end's rank stopped on a failure before they were
  };
  // Ranks meeting in a collective, a split or a gather_object.
  struct Rendezvous {
    struct Slot {
      bool present = false;
      int actor = -1;
      double posted = 0;  // when the call was made
      CollectiveCall call;
      int color = 0, key = 0;
      Membership membership{-1, -1, {}};
      std::vector<std::byte> bytes;  // gather_object: this rank's buffer
    };
    std::vector<Slot> slots;
    int arrived = 0, left = 0;
    double latest = 0;
    std::string what;
    std::string_view native_algo;
    bool done = false;          // a native collective: every rank has started it, its end is known
    double ends = 0;
    std::vector<double> began;  // when it began on each rank's stream
  };
  struct Stream;
  // An actor: a rank, or a rank's communication stream.
  struct RankState {
    int endpoint = -1;  // the global rank it sends and receives as
    Stream* stream = nullptr;  // the stream it runs, if it is one
    boost::context::fiber fiber;      // the rank's own context
    boost::context::fiber scheduler;  // where to go back to when it blocks
    double now = 0;
    enum class State { ready, blocked, done, failed } state = State::ready;
    std::int64_t waiting_op = -1;          // blocked in wait() on this op, or
    const RendezvousKey* waiting_rv = nullptr;  // blocked in this rendezvous, or
    const Stream* waiting_stream = nullptr;     // on this stream's call number waiting_call
    std::int64_t waiting_call = -1;
    int natives_started = 0;  // native collectives started and not yet waited
    double blocked_at = 0;   // its clock when it blocked
    std::string fault;       // set by a failure it waits on: thrown when it wakes
    std::string ended_by;    // the RankFailedError that ended its rank function
    // A rank's (an endpoint's) own: its matching queues in post order.
    std::vector<std::int64_t> posted_recvs, unexpected_sends;
    // The last operation the rank started, for status reports.
    struct LastCall {
      std::string_view what;  // "send", "recv", or the collective's name ("" before any)
      int peer = -1, tag = 0;
      std::uint64_t bytes = 0;
      double at = 0;
    } last;
  };

  void sync(int rank);
  static void host_copied(std::size_t bytes, bool to_host, void* engine);
  void block(int rank);
  void make_ready(int rank, double at);
  void match(std::int64_t send, std::int64_t recv);
  void delivered_at(std::int64_t send, std::int64_t recv, double at);
  void deliver(std::int64_t op);
  template <class Result>
  Result meet(int rank, const RendezvousKey& key, std::string_view what,
              const std::function<void(Rendezvous::Slot&)>& fill, const std::function<void(Rendezvous&)>& complete,
              const std::function<Result(const Rendezvous&, int me)>& read);
  // A rank's communication stream for a group: the labkit algorithms it started
  // non-blocking there, run in order by the stream's actor on a Comm of its own
  // (a message context apart from the group's, so they never match the rank's own messages).
  struct Stream {
    int actor = -1, owner = -1;
    std::unique_ptr<Comm> comm;
    struct Call {
      CollectiveCall call;
      const Algorithm* algorithm;
      double posted = 0, ended = 0;
    };
    std::deque<Call> calls;  // a deque: the running call stays put while the rank posts more
    std::size_t next = 0;  // calls before it have ended
    std::string error;     // a failure that stopped the stream (RankFailedError)
  };
  Stream& stream(int rank, int comm_id, TraceTrack* track);
  boost::context::fiber stream_fiber(Stream& stream);
  void run_stream(Stream& stream);
  std::string unfinished_work(int rank) const;  // what a rank left in flight when it returned
  std::string actor_name(int actor) const;      // "rank 3", "rank 3 / comm" (its stream), "rank 3 / comm (group 2)"
  void finish_native(Rendezvous& rv, int comm_id);
  void release(const Rendezvous& rv, double at);
  static std::string describe(const P2P& op);  // "recv(from=1, tag=0)", "send(to=1, tag=0, 16 bytes)"
  std::string pending(int rank) const;          // what a blocked rank waits in: an op, or "all_reduce(group=0)"
  std::string deadlock_report() const;
  std::string rank_state(int rank) const;
  int waits_for(int rank) const;
  // ---- faults
  void inject_failure();
  bool failed(int rank) const { return ranks_[rank].state == RankState::State::failed; }
  bool has_failed_member(int comm_id) const;
  bool lost(const P2P& op) const;
  bool cut_short(int rank) const;
  std::string failure(int rank, std::string_view op) const;  // "rank 0: OP: rank 1 failed at t = 10.0 us"
  void check_delivery(int rank, std::int64_t op) const;  // throws if the failure took the message
  void abandon(int rank);
  std::string failure_report() const;

  Options options_;
  StackPool stacks_;  // before the actors: their fibers give their stacks back to it
  // The actors: the ranks, then the streams as they start (a deque: references
  // stay valid as it grows), reached by number through actors_.
  std::vector<RankState> ranks_;
  std::deque<RankState> stream_actors_;
  std::vector<RankState*> actors_;
  RankState& actor(int a) { return *actors_[a]; }
  const RankState& actor(int a) const { return *actors_[a]; }
  int actors() const { return int(actors_.size()); }
  AsanFibers asan_;  // tells AddressSanitizer of every switch between the ranks' stacks
  std::vector<Members> groups_;  // comm_id -> global ranks; null once closed
  std::vector<int> open_comms_;  // comm_id -> members whose Comm of it is not yet destroyed
  std::vector<P2P> ops_;
  std::vector<std::int64_t> free_ops_;
  // ---- the network: ports, and the flows moving bytes through them
  // What a port has queued besides the flows it carries (fair_sharing.h's SharedPort).
  struct PortQueue {
    double free = 0;   // serial: when the message it carries ends its bytes
    int pending = 0;   // fair: flows matched on it that have not started (paying their alpha)
  };
  struct Flow {
    std::int64_t send = -1, recv = -1;
    int out = -1, in = -1;   // its ports
    double remaining = 0;    // bytes still to move at `since`
    double rate = 0;         // bytes per second since then
    double since = 0;
    std::uint64_t version = 0;  // of its end event: older ones are stale
  };
  // A flow starts (version 0, after its alpha) or ends (its version then).
  struct FlowEvent {
    double at;
    std::uint64_t order;  // ties go in the order the events were made
    int flow;
    std::uint64_t version;
    bool operator>(const FlowEvent& o) const { return std::tie(at, order) > std::tie(o.at, o.order); }
  };
  std::pair<int, int> ports(int from, int to) const;  // out of `from`, into `to`
  void schedule(int flow, double at, std::uint64_t version);
  void start_alone(int flow, double at);
  void join(int flow);  // its two ports carry it from now
  void run_flow_events();
  void share_bandwidth(double at);
  double next_event() const;  // the earliest flow event or ready actor (infinity: none)
  std::vector<SharedPort> ports_;     // the bandwidth of each and the flows through it (fair)
  std::vector<PortQueue> port_queues_;
  std::vector<Flow> flows_;
  std::vector<int> free_flows_;
  std::vector<int> touched_ports_;  // ports whose flows changed since the last solve
  FairSharing fair_sharing_;
  std::priority_queue<FlowEvent, std::vector<FlowEvent>, std::greater<>> flow_events_;
  std::uint64_t flow_event_order_ = 0;
  std::map<RendezvousKey, Rendezvous> rendezvous_;
  // Cross-rank check: the first call each (group, sequence number) saw, who made
  // it, and how many ranks have checked against it.
  struct FirstCall {
    CollectiveCall call;
    int rank;
    int seen;
    std::vector<CollectiveCall> per_peer = {};  // all_to_allv: each checked rank's call, for its counts
  };
  std::map<std::tuple<int, std::uint64_t>, FirstCall> first_call_;
  // (time, rank) to resume, earliest first; rank -1 is the failure (Options::fail_rank).
  std::priority_queue<std::pair<double, int>, std::vector<std::pair<double, int>>, std::greater<>> ready_;
  std::uint64_t messages_ = 0;
  std::vector<bool> computed_;  // by global rank
  std::atomic<int> running_ = -1;
  std::function<void()> interrupt_;
  std::atomic<int> interrupt_state_ = 0;  // 0: none, 1: pending, 2: running
  std::string error_;
  bool failed_ = false;
  std::vector<std::vector<double>> stream_free_;  // comm_id -> when each member's stream finishes its last native collective
  std::map<int, int> stream_context_;             // comm_id -> the comm_id its streams' Comms use
  std::map<std::pair<int, int>, Stream> streams_;  // (rank, comm_id); last, so its Comms go first
};

}  // namespace labkit::sim
