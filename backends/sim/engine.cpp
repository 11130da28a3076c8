#include "engine.h"

#include <algorithm>
#include <set>

#include <fmt/format.h>

#include "labkit/cost_model.h"
#include "labkit/device.h"
#include "labkit/scratch.h"
#include "labkit/units.h"
#include "native_collectives.h"
#include "sim_comm.h"

namespace labkit::sim {

namespace ctx = boost::context;

// 256 KiB per rank with a guard page (stack_pool.h): a learner's runaway
// recursion faults cleanly instead of corrupting a neighbour; 4096 ranks reserve
// 1 GiB of address space and touch only what they use.
constexpr std::size_t kStackBytes = 256 * 1024;

// The ready queue's entry for the failure (Options::fail_rank): it sorts before
// every rank at its time, so nothing happens at fail_at before the failure.
constexpr int kFailure = -1;

Engine::Engine(Options options)
    : options_(std::move(options)), stacks_(kStackBytes), ranks_(options_.ranks), asan_(options_.ranks) {
  if (options_.ranks < 1) throw Error(fmt::format("sim: ranks={} must be at least 1", options_.ranks));
  if (options_.fail_rank >= options_.ranks || options_.fail_at < 0)
    throw Error(fmt::format("sim: fail_rank={} at {} s: the rank must be below {} and the time 0 or more",
                            options_.fail_rank, options_.fail_at, options_.ranks));
  if (options_.speed.empty()) options_.speed.assign(options_.ranks, 1.0);
  computed_.assign(options_.ranks, false);
  const Topology& t = options_.topology;
  // Ports 2r and 2r + 1: rank r's device out and in; then each node's NICs, out and in.
  const int nodes = (options_.ranks + t.devices_per_node - 1) / t.devices_per_node;
  ports_.resize(2 * std::size_t(options_.ranks) + 2 * std::size_t(nodes) * t.nics_per_node);
  port_queues_.resize(ports_.size());
  for (std::size_t p = 0; p < ports_.size(); ++p)
    ports_[p].bandwidth = p < 2 * std::size_t(options_.ranks) ? t.intra.bandwidth : t.inter.bandwidth;
  for (int r = 0; r < options_.ranks; ++r) {
    ranks_[r].endpoint = r;
    actors_.push_back(&ranks_[r]);
  }
  std::vector<int> world(options_.ranks);
  for (int r = 0; r < options_.ranks; ++r) world[r] = r;
  groups_.push_back(std::make_shared<const std::vector<int>>(std::move(world)));
  open_comms_.push_back(options_.ranks);
}

Engine::~Engine() = default;

double Engine::elapsed() const {
  double t = 0;
  for (const RankState& r : ranks_) t = std::max(t, r.now);  // a stream's work ends before its rank's wait
  return t;
}

// ---- scheduling ----------------------------------------------------------------

void Engine::run(const std::function<void(Comm&)>& rank_fn) {
  observe_host_copies(&Engine::host_copied, this);
  struct StopObserving {
    ~StopObserving() { observe_host_copies(nullptr, nullptr); }
  } stop_observing;
  for (int r = 0; r < options_.ranks; ++r) {
    actor(r).fiber = ctx::fiber(std::allocator_arg, asan_.allocator(r, stacks_),
                                 [this, r, &rank_fn](ctx::fiber&& scheduler) {
                                   const AsanFibers::InRank in_rank(asan_, r);
                                   actor(r).scheduler = std::move(scheduler);
                                   try {
                                     SimComm comm(*this, 0, r, groups_[0],
                                                  options_.trace ? options_.trace->track(r) : nullptr);
                                     rank_fn(comm);
                                     if (const std::string left = unfinished_work(r); !left.empty()) throw Error(left);
                                   } catch (const RankFailedError& e) {
                                     actor(r).ended_by = e.what();  // the run goes on to the report
                                     abandon(r);
                                   } catch (const Error& e) {
                                     if (!failed_) error_ = e.what();
                                     failed_ = true;
                                   } catch (const std::exception& e) {
                                     if (!failed_) error_ = fmt::format("rank {}: an exception escaped: {}", r, e.what());
                                     failed_ = true;
                                   }
                                   actor(r).state = RankState::State::done;
                                   return std::move(actor(r).scheduler);
                                 });
    ready_.push({0.0, r});
  }
  if (options_.fail_rank >= 0) ready_.push({options_.fail_at, kFailure});
  constexpr double kNever = std::numeric_limits<double>::infinity();
  while (!failed_ && next_event() < kNever && next_event() <= options_.stop_at) {
    if (!flow_events_.empty() && (ready_.empty() || flow_events_.top().at <= ready_.top().first)) {
      run_flow_events();  // before any actor at the same time: it sees what was delivered by then
      continue;
    }
    const int r = ready_.top().second;
    ready_.pop();
    if (r == kFailure) {
      inject_failure();
      continue;
    }
    RankState& next = actor(r);
    if (next.stream && !next.fiber) next.fiber = stream_fiber(*next.stream);
    next.state = RankState::State::ready;
    running_ = r;
    set_issuing_rank(next.stream ? next.stream->owner : r);  // a rank's own stream on a GPU, as a process has
    const AsanFibers::Jump jump = asan_.to_rank(r);
    next.fiber = std::move(next.fiber).resume();
    running_ = -1;
    set_issuing_rank(-1);
  }
  std::string report;
  const bool stopped = next_event() < kNever && next_event() > options_.stop_at;
  const bool a_rank_failed = options_.fail_rank >= 0 && failed(options_.fail_rank);
  if (!failed_ && !stopped && std::any_of(ranks_.begin(), ranks_.end(),  // an idle stream counts as done
                              [](const RankState& s) { return s.state != RankState::State::done; }))
    report = a_rank_failed ? failure_report() : deadlock_report();
  // Unwinds the stacks of ranks that did not finish.
  for (int a = 0; a < actors(); ++a) asan_.destroy(actor(a).fiber, a);
  if (failed_) throw Error(error_);
  if (report.empty()) return;
  if (a_rank_failed) throw RankFailedError(report);
  throw DeadlockError(report);
}

// A rank's copy between the host and its device's memory (labkit/device.h): an
// instant on its trace at its clock (a compute region charges its time when it
// ends, so a copy inside one, such as the loss read back, is drawn at its start).
void Engine::host_copied(std::size_t bytes, bool to_host, void* engine) {
  Engine& e = *static_cast<Engine*>(engine);
  const int running = e.running_;
  if (!e.options_.trace || running < 0) return;
  const RankState& a = e.actor(running);
  const int rank = a.stream ? a.stream->owner : running;
  e.options_.trace->track(rank)->events.push_back(host_copy_event(a.now, bytes, to_host));
}

void Engine::interrupt(std::function<void()> then) {
  interrupt_ = std::move(then);
  interrupt_state_.store(1, std::memory_order_release);
}

bool Engine::cancel_interrupt() {
  int pending = 1;
  return interrupt_state_.compare_exchange_strong(pending, 0);
}

// Keeps the invariant that the running rank is the earliest ready one: a rank
// whose clock ran ahead (a wait, a compute region) lets the others catch up
// before it touches shared state. Every call from a rank comes here first, so a
// pending interrupt() runs here.
void Engine::sync(int rank) {
  if (int pending = 1; interrupt_state_.load(std::memory_order_acquire) == 1 &&
                       interrupt_state_.compare_exchange_strong(pending, 2))
    interrupt_();
  const bool others_first = (!ready_.empty() && std::pair(actor(rank).now, rank) > ready_.top()) ||
                            (!flow_events_.empty() && flow_events_.top().at <= actor(rank).now);
  if (!others_first && actor(rank).now <= options_.stop_at) return;
  ready_.push({actor(rank).now, rank});
  const AsanFibers::Jump jump = asan_.to_scheduler();
  actor(rank).scheduler = std::move(actor(rank).scheduler).resume();
}

void Engine::block(int rank) {
  RankState& s = actor(rank);
  s.state = RankState::State::blocked;
  s.blocked_at = s.now;
  {
    const AsanFibers::Jump jump = asan_.to_scheduler();
    s.scheduler = std::move(s.scheduler).resume();
  }
  s.waiting_op = -1;
  s.waiting_rv = nullptr;
  if (!s.fault.empty()) throw RankFailedError(std::exchange(s.fault, {}));
}

void Engine::make_ready(int rank, double at) {
  RankState& s = actor(rank);
  s.now = std::max(s.now, at);
  s.state = RankState::State::ready;
  ready_.push({s.now, rank});
}

void Engine::advance(int rank, double seconds) {
  if (seconds > 0) computed_[actor(rank).endpoint] = true;
  actor(rank).now += seconds / options_.speed[actor(rank).endpoint];
  sync(rank);
}

double Engine::seconds_for_flops(int rank, double flops) const {
  (void)rank;
  return flops / (options_.topology.device.peak_flops * options_.efficiency);
}

// ---- point-to-point ------------------------------------------------------------

std::int64_t Engine::post(bool is_send, int rank, int peer, int tag, int comm_id, View buf) {
  sync(rank);
  const int me = actor(rank).endpoint;
  if (failed(peer)) throw RankFailedError(failure(me, describe(P2P{is_send, me, peer, tag, comm_id, rank, buf})));
  std::int64_t id;
  if (free_ops_.empty()) {
    id = std::int64_t(ops_.size());
    ops_.emplace_back();
  } else {
    id = free_ops_.back();
    free_ops_.pop_back();
  }
  ops_[id] = P2P{is_send, me, peer, tag, comm_id, rank, buf, actor(rank).now};
  actor(rank).last = {is_send ? "send" : "recv", peer, tag, buf.bytes(), actor(rank).now};
  if (options_.on_post) options_.on_post(me, is_send, peer, buf);
  // A send looks for a posted receive at its destination; a receive looks for an
  // unexpected send at itself. The first in post order matches (non-overtaking).
  std::vector<std::int64_t>& queue = is_send ? ranks_[peer].posted_recvs : ranks_[me].unexpected_sends;
  for (auto it = queue.begin(); it != queue.end(); ++it) {
    const P2P& other = ops_[*it];
    if (other.owner == peer && other.peer == me && other.tag == tag && other.comm_id == comm_id) {
      const std::int64_t other_id = *it;
      queue.erase(it);
      is_send ? match(id, other_id) : match(other_id, id);
      return id;
    }
  }
  (is_send ? ranks_[peer].unexpected_sends : ranks_[me].posted_recvs).push_back(id);
  return id;
}

void Engine::match(std::int64_t send_id, std::int64_t recv_id) {
  P2P &s = ops_[send_id], &r = ops_[recv_id];
  if (s.buf.bytes() != r.buf.bytes()) {
      throw Error(fmt::format("rank {}: recv(from={}, tag={}): the message is {} bytes but the receive buffer "
                            "holds {} bytes (rank {} sent {} x {})",
                            r.owner, s.owner, s.tag, s.buf.bytes(), r.buf.bytes(), s.owner, s.buf.count,
                            name_of(s.buf.dtype)));
  }
  const Link& link = options_.topology.link(s.owner, r.owner);
  const auto [out, in] = ports(s.owner, r.owner);
  s.partner = recv_id;
  r.partner = send_id;
  if ((++messages_ & ((1u << 20) - 1)) == 0 && options_.progress) options_.progress(messages_);
  // Both ends are posted now: the message pays its latency, then moves its bytes.
  const double posted = std::max(s.posted, r.posted);
  if (options_.network == Network::serial) {
    const double start = std::max({posted, port_queues_[out].free, port_queues_[in].free});
    const double wire = double(s.buf.bytes()) / link.bandwidth;
    port_queues_[out].free = port_queues_[in].free = start + wire;
    delivered_at(send_id, recv_id, start + link.alpha + wire);
    return;
  }
  int f;
  if (free_flows_.empty()) {
    f = int(flows_.size());
    flows_.emplace_back();
  } else {
    f = free_flows_.back();
    free_flows_.pop_back();
  }
  Flow& flow = flows_[f];
  flow.send = send_id;
  flow.recv = recv_id;
  flow.out = out;
  flow.in = in;
  flow.remaining = double(s.buf.bytes());
  flow.rate = 0;
  const double starts = posted + link.alpha;
  PortQueue &from = port_queues_[out], &to = port_queues_[in];
  if (flow.remaining > 0 && ports_[out].flows.empty() && ports_[in].flows.empty() && from.pending == 0 &&
      to.pending == 0) {
    // Both ports idle, none about to start on them: it starts alone. Any flow
    // matched on them from now on starts after it (the same alpha, a later
    // post), so it joins as an active flow; its end is known now.
    start_alone(f, starts);
    return;
  }
  ++from.pending;
  ++to.pending;
  schedule(f, starts, 0);
}

void Engine::delivered_at(std::int64_t send_id, std::int64_t recv_id, double at) {
  for (const std::int64_t id : {send_id, recv_id}) {
    P2P& op = ops_[id];
    op.done = true;
    op.complete = at;
    if (actor(op.actor).waiting_op == id && !failed(actor(op.actor).endpoint)) make_ready(op.actor, at);
  }
}

// ---- flows: messages sharing the ports (fair_sharing.h) --------------------------

std::pair<int, int> Engine::ports(int from, int to) const {
  const Topology& t = options_.topology;
  if (t.node_of(from) == t.node_of(to)) return {2 * from, 2 * to + 1};
  const auto nic = [&](int rank) { return 2 * (options_.ranks + t.node_of(rank) * t.nics_per_node + t.nic_of(rank)); };
  return {nic(from), nic(to) + 1};
}

// A flow alone on both its ports from `at`: their full bandwidth, its end known.
void Engine::start_alone(int f, double at) {
  Flow& flow = flows_[f];
  flow.since = at;
  flow.rate = std::min(ports_[flow.out].bandwidth, ports_[flow.in].bandwidth);
  join(f);
  schedule(f, at + flow.remaining / flow.rate, ++flow.version);
}

void Engine::join(int f) {
  const Flow& flow = flows_[f];
  ports_[flow.out].flows.push_back({f, flow.in});
  ports_[flow.in].flows.push_back({f, flow.out});
}

void Engine::schedule(int flow, double at, std::uint64_t version) {
  flow_events_.push({at, flow_event_order_++, flow, version});
}

double Engine::next_event() const {
  double next = std::numeric_limits<double>::infinity();
  if (!ready_.empty()) next = ready_.top().first;
  if (!flow_events_.empty()) next = std::min(next, flow_events_.top().at);
  return next;
}

// Every flow event at the earliest time: flows whose latency is paid join their
// ports, flows whose bytes are done leave them and deliver; then the rates of
// everything they touched are solved once.
void Engine::run_flow_events() {
  const double at = flow_events_.top().at;
  while (!flow_events_.empty() && flow_events_.top().at == at) {
    const FlowEvent e = flow_events_.top();
    flow_events_.pop();
    Flow& f = flows_[e.flow];
    if (e.version == 0) {
      --port_queues_[f.out].pending;
      --port_queues_[f.in].pending;
    }
    if (e.version == 0 && f.remaining > 0) {
      if (ports_[f.out].flows.empty() && ports_[f.in].flows.empty()) {
        start_alone(e.flow, at);  // no solve needed
        continue;
      }
      f.since = at;
      join(e.flow);
      touched_ports_.push_back(f.out);
      touched_ports_.push_back(f.in);
    } else if (e.version == 0 || e.version == f.version) {
      if (e.version != 0) {
        for (const int p : {f.out, f.in}) {
          std::vector<SharedPort::Flow>& on = ports_[p].flows;
          on.erase(std::find_if(on.begin(), on.end(), [&](const SharedPort::Flow& o) { return o.id == e.flow; }));
          if (!on.empty()) touched_ports_.push_back(p);  // the flows left there may speed up
        }
      }
      delivered_at(f.send, f.recv, at);
      free_flows_.push_back(e.flow);
    }
  }
  share_bandwidth(at);
}

// The flows' new rates (fair_sharing.h): each flow whose rate changes has moved
// its bytes at the old rate until now and is rescheduled to end at the new one;
// a flow whose rate stays keeps its scheduled end.
void Engine::share_bandwidth(double at) {
  for (const FairSharing::Rate& answer : fair_sharing_.solve(ports_, touched_ports_)) {
    Flow& flow = flows_[answer.flow];
    if (answer.bytes_per_second == flow.rate) continue;
    flow.remaining = std::max(0.0, flow.remaining - flow.rate * (at - flow.since));
    flow.since = at;
    flow.rate = answer.bytes_per_second;
    schedule(answer.flow, at + flow.remaining / flow.rate, ++flow.version);
  }
  touched_ports_.clear();
}

// The bytes land when the message is delivered: whichever end first sees the
// operation complete copies them, before either side can touch its buffer again.
// (A run stopped at time t therefore shows exactly the messages delivered by t.)
// The copy is the device's that holds either buffer (copy_local): ranks that
// share a GPU send from its memory to its memory, as NCCL's P2P does.
void Engine::deliver(std::int64_t id) {
  P2P& op = ops_[id];
  if (op.delivered) return;
  P2P& other = ops_[op.partner];
  const P2P &s = op.is_send ? op : other, &r = op.is_send ? other : op;
  if (options_.payload) copy_local(r.buf, s.buf);
  op.delivered = other.delivered = true;
}

void Engine::wait(int rank, std::int64_t id) {
  if (!ops_[id].done) {
    if (failed(ops_[id].peer)) throw RankFailedError(failure(actor(rank).endpoint, describe(ops_[id])));  // never to be matched
    actor(rank).waiting_op = id;
    block(rank);  // throws if the peer fails first
  }
  actor(rank).now = std::max(actor(rank).now, ops_[id].complete);
  sync(rank);  // the delivery happens at its time, not before
  check_delivery(rank, id);
  deliver(id);
  free_ops_.push_back(id);
}

bool Engine::test(int rank, std::int64_t id) {
  sync(rank);
  check_delivery(rank, id);
  if (ops_[id].done && ops_[id].complete <= actor(rank).now) {
    deliver(id);
    free_ops_.push_back(id);
    return true;
  }
  // A poll costs a little time, so a loop that only polls still moves forward.
  actor(rank).now += 1e-7;
  return false;
}

// ---- collectives ---------------------------------------------------------------

namespace {
// all_to_allv: what this rank sends each rank that has checked in must be what
// that rank receives from it, and the other way round. The counts of the ranks
// before it are still there: none can finish the collective without this one.
void check_counts(std::vector<CollectiveCall>& calls, const CollectiveCall& c, int me, std::size_t ranks,
                          const std::string& who) {
  calls.resize(ranks);
  for (std::size_t j = 0; j < ranks; ++j) {
    const CollectiveCall& other = calls[j];
    if (other.send_counts.empty()) continue;  // not checked in yet
    if (c.send_counts[j] != other.recv_counts[me])
      fail(who, "all_to_allv", "send_counts[{}]={} but rank {} expects recv_counts[{}]={} from this rank", j,
           c.send_counts[j], j, me, other.recv_counts[me]);
    if (c.recv_counts[j] != other.send_counts[me])
      fail(who, "all_to_allv", "recv_counts[{}]={} but rank {} sends send_counts[{}]={} to this rank", j,
           c.recv_counts[j], j, me, other.send_counts[me]);
  }
  calls[me] = c;
}
}  // namespace

void Engine::check_collective(int rank, int comm_id, std::uint64_t seq, const CollectiveCall& c,
                              const std::string& who) {
  const std::vector<int>& group = *groups_[comm_id];
  const int me = int(std::find(group.begin(), group.end(), actor(rank).endpoint) - group.begin());
  const auto it = first_call_.try_emplace({comm_id, seq}, FirstCall{c, me, 0}).first;
  const CollectiveCall& f = it->second.call;
  const int other = it->second.rank;
  const std::string_view op = name_of(c.op);
  if (c.op != f.op) fail(who, op, "rank {} called {} at this point; every rank must call the same collective", other, name_of(f.op));
  if (has_root(c.op) && c.root != f.root) fail(who, op, "root={} but rank {} passed root={}", c.root, other, f.root);
  if (has_reduce_op(c.op) && c.reduce_op != f.reduce_op)
    fail(who, op, "op={} but rank {} passed op={}", name_of(c.reduce_op), other, name_of(f.reduce_op));
  const View &mine = agreed_buffer(c), &theirs = agreed_buffer(f);
  if (c.op != Collective::barrier && mine.dtype != theirs.dtype)
    fail(who, op, "dtype={} but rank {} passed dtype={}", name_of(mine.dtype), other, name_of(theirs.dtype));
  if (has_agreed_count(c.op) && mine.count != theirs.count)
    fail(who, op, "count={} but rank {} passed count={}; every rank must pass the same count", mine.count, other,
         theirs.count);
  if (info(c.op).counts == Counts::per_peer) check_counts(it->second.per_peer, c, me, group.size(), who);
  // Forget the call once the whole group has checked in.
  if (++it->second.seen == int(group.size())) first_call_.erase(it);
}

// Every rank of the group joins with its slot filled by `fill`; the last to
// arrive runs `complete` (which wakes the others), and each rank takes its
// result with `read` before leaving.
template <class Result>
Result Engine::meet(int rank, const RendezvousKey& key, std::string_view what,
                    const std::function<void(Rendezvous::Slot&)>& fill, const std::function<void(Rendezvous&)>& complete,
                    const std::function<Result(const Rendezvous&, int me)>& read) {
  sync(rank);
  actor(rank).last = {what, -1, 0, 0, actor(rank).now};
  const int comm_id = std::get<0>(key);
  if (has_failed_member(comm_id))
    throw RankFailedError(failure(actor(rank).endpoint, fmt::format("{}(group={})", what, comm_id)));
  const Members members = groups_[comm_id];  // held: complete() may add groups
  const int me = int(std::find(members->begin(), members->end(), actor(rank).endpoint) - members->begin());
  auto [it, first] = rendezvous_.try_emplace(key);
  Rendezvous& rv = it->second;
  if (first) {
    rv.slots.resize(members->size());
    rv.what = what;
  }
  rv.slots[me].present = true;
  rv.slots[me].actor = rank;
  fill(rv.slots[me]);
  rv.latest = std::max(rv.latest, actor(rank).now);
  if (++rv.arrived < int(members->size())) {
    actor(rank).waiting_rv = &it->first;
    block(rank);  // throws if a member fails before the release
  } else {
    const double arrived = actor(rank).now;
    complete(rv);
    if (options_.fail_rank >= 0 && actor(rank).now > options_.fail_at) {
      // Leave at the release as the others do, so that a failure before it cuts this rank short too.
      RankState& s = actor(rank);
      s.waiting_rv = &it->first;
      s.blocked_at = arrived;
      sync(rank);
      s.waiting_rv = nullptr;
      if (!s.fault.empty()) throw RankFailedError(std::exchange(s.fault, {}));
    }
  }
  Result result = read(rv, me);
  if (++rv.left == int(rv.slots.size())) rendezvous_.erase(it);
  return result;
}

// A native collective is a rendezvous that nobody blocks in: each rank leaves
// its call and goes on; the last to arrive computes the result and the time
// it ends, and wakes whoever already waits for it.
void Engine::start_native(int rank, int comm_id, std::uint64_t seq, const CollectiveCall& call) {
  sync(rank);
  RankState& self = actor(rank);
  self.last = {name_of(call.op), -1, 0, 0, self.now};
  if (has_failed_member(comm_id))
    throw RankFailedError(failure(self.endpoint, fmt::format("{}(group={})", name_of(call.op), comm_id)));
  const std::vector<int>& members = *groups_[comm_id];
  const int me = int(std::find(members.begin(), members.end(), self.endpoint) - members.begin());
  auto [it, first] = rendezvous_.try_emplace({comm_id, Channel::collective, seq});
  Rendezvous& rv = it->second;
  if (first) {
    rv.slots.resize(members.size());
    rv.what = name_of(call.op);
  }
  Rendezvous::Slot& slot = rv.slots[me];
  slot.present = true;
  slot.actor = rank;
  slot.posted = self.now;
  slot.call = call;
  ++self.natives_started;
  if (++rv.arrived == int(members.size())) finish_native(rv, comm_id);
}

// The black-box library: compute the result directly from every rank's buffers,
// then charge the cost model's time for the algorithm NCCL would choose. It
// begins once every rank has called it and each one's stream is free.
void Engine::finish_native(Rendezvous& rv, int comm_id) {
  const std::vector<int>& group = *groups_[comm_id];
  std::vector<CollectiveCall> calls;
  for (const Rendezvous::Slot& slot : rv.slots) calls.push_back(slot.call);
  if (options_.payload) compute_native(calls);
  // nccl-tests' "size": the larger buffer, over the slowest link the group uses.
  std::size_t bytes = 0;
  for (const CollectiveCall& c : calls) bytes = std::max({bytes, c.send.bytes(), c.recv.bytes()});
  const Topology& t = options_.topology;
  std::vector<int> nodes;
  for (int g : group) nodes.push_back(t.node_of(g));
  std::sort(nodes.begin(), nodes.end());
  const int spanned = int(std::unique(nodes.begin(), nodes.end()) - nodes.begin());
  const CostEstimate cost = native_cost(calls[0].op, bytes, int(group.size()), spanned, t);
  if (stream_free_.size() <= std::size_t(comm_id)) stream_free_.resize(comm_id + 1);
  std::vector<double>& stream_free = stream_free_[comm_id];
  stream_free.resize(group.size(), 0.0);
  rv.began.resize(group.size());
  for (std::size_t i = 0; i < group.size(); ++i) {
    rv.began[i] = std::max(rv.slots[i].posted, stream_free[i]);
    rv.latest = std::max(rv.latest, rv.began[i]);
  }
  rv.ends = rv.latest + cost.seconds;
  std::fill(stream_free.begin(), stream_free.end(), rv.ends);
  rv.native_algo = cost.algorithm;
  rv.done = true;
  release(rv, rv.ends);
}

Comm::NativeDone Engine::wait_native(int rank, int comm_id, std::uint64_t seq) {
  const auto it = rendezvous_.find({comm_id, Channel::collective, seq});
  Rendezvous& rv = it->second;
  RankState& self = actor(rank);
  const int me = int(std::find(groups_[comm_id]->begin(), groups_[comm_id]->end(), self.endpoint) - groups_[comm_id]->begin());
  --self.natives_started;
  if (!rv.done) {
    if (has_failed_member(comm_id))
      throw RankFailedError(failure(self.endpoint, fmt::format("{}(group={})", rv.what, comm_id)));
    self.waiting_rv = &it->first;
    block(rank);  // until the last rank starts it (finish_native wakes this one), or a member fails
  } else if (options_.fail_rank >= 0 && rv.ends > options_.fail_at) {
    // Leave at its end as the blocked ones do, so that a failure before it cuts this rank short too.
    self.waiting_rv = &it->first;
    self.blocked_at = self.now;
    self.now = std::max(self.now, rv.ends);
    sync(rank);
    self.waiting_rv = nullptr;
    if (!self.fault.empty()) throw RankFailedError(std::exchange(self.fault, {}));
  } else {
    self.now = std::max(self.now, rv.ends);
    sync(rank);
  }
  const Comm::NativeDone done{rv.began[me], rv.ends, rv.native_algo};
  if (++rv.left == int(rv.slots.size())) rendezvous_.erase(it);
  return done;
}

bool Engine::test_native(int rank, int comm_id, std::uint64_t seq) {
  sync(rank);
  const Rendezvous& rv = rendezvous_.at({comm_id, Channel::collective, seq});
  if (rv.done && rv.ends <= actor(rank).now) return true;
  actor(rank).now += 1e-7;  // as a poll of a message costs
  return false;
}

// Everyone in a rendezvous leaves at `at`: those blocked in it wake, the one
// running (the last to arrive) just moves its clock, and those gone on (a
// non-blocking collective's ranks) find it done when they wait.
void Engine::release(const Rendezvous& rv, double at) {
  for (const Rendezvous::Slot& slot : rv.slots) {
    RankState& s = actor(slot.actor);
    if (s.state == RankState::State::blocked) {
      if (s.waiting_rv && &rendezvous_.find(*s.waiting_rv)->second == &rv) make_ready(slot.actor, at);
    } else if (!rv.done && slot.actor == running_) {
      s.now = at;
    }
  }
}

std::vector<std::vector<std::byte>> Engine::gather_untimed(int rank, int comm_id, std::uint64_t seq, View buf) {
  using Gathered = std::vector<std::vector<std::byte>>;
  return meet<Gathered>(
      rank, {comm_id, Channel::gather_object, seq}, "gather_object",
      [&](Rendezvous::Slot& s) {
        if (buf.data) s.bytes.assign(static_cast<const std::byte*>(buf.data), static_cast<const std::byte*>(buf.data) + buf.bytes());
      },
      [&](Rendezvous& rv) { release(rv, rv.latest); },  // no cost: the ranks only line up
      [](const Rendezvous& rv, int me) {
        Gathered all;
        if (me == 0)
          for (const Rendezvous::Slot& s : rv.slots) all.push_back(s.bytes);
        return all;
      });
}

Engine::Membership Engine::split(int rank, int comm_id, std::uint64_t seq, int color, int key) {
  return meet<Membership>(
      rank, {comm_id, Channel::split, seq}, "split",
      [&](Rendezvous::Slot& s) {
        s.color = color;
        s.key = key;
      },
      [&](Rendezvous& rv) {
        // New groups in ascending color; members by (key, old rank), as MPI_Comm_split.
        const Members parent = groups_[comm_id];
        std::set<int> colors;
        for (const Rendezvous::Slot& s : rv.slots)
          if (s.color >= 0) colors.insert(s.color);
        for (int c : colors) {
          std::vector<std::pair<int, int>> order;  // (key, rank in the parent)
          for (int i = 0; i < int(rv.slots.size()); ++i)
            if (rv.slots[i].color == c) order.push_back({rv.slots[i].key, i});
          std::sort(order.begin(), order.end());
          auto created = std::make_shared<std::vector<int>>();
          for (auto [k, i] : order) created->push_back((*parent)[i]);
          for (int j = 0; j < int(order.size()); ++j)
            rv.slots[order[j].second].membership = {int(groups_.size()), j, created};
          open_comms_.push_back(int(created->size()));
          groups_.push_back(std::move(created));
        }
        release(rv, rv.latest);
      },
      [](const Rendezvous& rv, int me) { return rv.slots[me].membership; });
}

// ---- communication streams -------------------------------------------------------

Engine::Stream& Engine::stream(int rank, int comm_id, TraceTrack* track) {
  const int endpoint = actor(rank).endpoint;
  auto [it, created] = streams_.try_emplace({endpoint, comm_id});
  Stream& st = it->second;
  if (!created) return st;
  // The group's streams talk in a context of their own, made once per group
  // (the first rank to start one names it for all: the engine runs one rank at a time).
  auto [context, fresh] = stream_context_.try_emplace(comm_id, int(groups_.size()));
  if (fresh) {
    groups_.push_back(groups_[comm_id]);
    open_comms_.push_back(int(groups_[comm_id]->size()));  // one stream Comm per member, kept in streams_
  }
  const Members& members = groups_[comm_id];
  const int me = int(std::find(members->begin(), members->end(), endpoint) - members->begin());
  st.owner = rank;
  st.actor = actors();
  actors_.push_back(&stream_actors_.emplace_back());
  actors_.back()->endpoint = endpoint;
  actors_.back()->state = RankState::State::done;  // idle until a call is queued
  asan_.add();
  st.comm = std::make_unique<SimComm>(*this, context->second, me, members, track, st.actor);
  actors_.back()->stream = &st;  // its fiber is made when it first runs (stream_fiber)
  return st;
}

// Made on the scheduler's stack, as the ranks' fibers are: Boost enters a new
// fiber once as it makes it, and ASan keeps the frames of that first entry on
// the stack that made it, which for a rank's stack ends with the rank.
ctx::fiber Engine::stream_fiber(Stream& st) {
  return ctx::fiber(std::allocator_arg, asan_.allocator(st.actor, stacks_), [this, &st](ctx::fiber&& scheduler) {
    const AsanFibers::InRank in_rank(asan_, st.actor);
    actor(st.actor).scheduler = std::move(scheduler);
    run_stream(st);
    return std::move(actor(st.actor).scheduler);
  });
}

// The stream's actor: runs each call as it comes, then idles (as a finished
// actor, which no deadlock waits on) until the rank starts another. A failure
// stops the stream; the rank hears of it when it waits.
void Engine::run_stream(Stream& st) {
  RankState& self = actor(st.actor);
  for (;;) {
    while (st.next < st.calls.size() && st.error.empty()) {
      Stream::Call& c = st.calls[st.next];
      self.now = std::max(self.now, c.posted);
      try {
        sync(st.actor);
        st.comm->set_algorithm(c.call.op, c.algorithm);
        st.comm->run(c.call);
        c.ended = self.now;
        ++st.next;
      } catch (const RankFailedError& e) {
        st.error = e.what();
      } catch (const Error& e) {
        if (!failed_) error_ = e.what();
        failed_ = true;
      } catch (const std::exception& e) {
        if (!failed_) error_ = fmt::format("rank {}: an exception escaped: {}", self.endpoint, e.what());
        failed_ = true;
      }
      RankState& owner = actor(st.owner);
      if (owner.state == RankState::State::blocked && owner.waiting_stream == &st &&
          (owner.waiting_call < std::int64_t(st.next) || !st.error.empty()))
        make_ready(st.owner, self.now);
    }
    self.state = RankState::State::done;
    const AsanFibers::Jump jump = asan_.to_scheduler();
    self.scheduler = std::move(self.scheduler).resume();
  }
}

std::int64_t Engine::start_on_stream(int rank, int comm_id, const CollectiveCall& call, const Algorithm* algorithm,
                                     TraceTrack* track) {
  sync(rank);
  Stream& st = stream(rank, comm_id, track);
  if (!st.error.empty()) throw RankFailedError(st.error);
  const double now = actor(rank).now;
  actor(rank).last = {name_of(call.op), -1, 0, 0, now};
  st.calls.push_back({call, algorithm, now});
  RankState& stream_actor = actor(st.actor);
  if (stream_actor.state == RankState::State::done) make_ready(st.actor, now);
  return std::int64_t(st.calls.size()) - 1;
}

void Engine::wait_stream(int rank, int comm_id, std::int64_t id) {
  Stream& st = streams_.at({actor(rank).endpoint, comm_id});
  RankState& self = actor(rank);
  if (std::size_t(id) >= st.next && st.error.empty()) {
    self.waiting_stream = &st;
    self.waiting_call = id;
    block(rank);
    self.waiting_stream = nullptr;
  }
  if (std::size_t(id) >= st.next) throw RankFailedError(st.error);
  self.now = std::max(self.now, st.calls[id].ended);
  sync(rank);
}

bool Engine::test_stream(int rank, int comm_id, std::int64_t id) {
  sync(rank);
  const Stream& st = streams_.at({actor(rank).endpoint, comm_id});
  if (!st.error.empty() || (std::size_t(id) < st.next && st.calls[id].ended <= actor(rank).now)) return true;
  actor(rank).now += 1e-7;
  return false;
}

// A rank that returns while a collective it started is still in flight leaves
// buffers that are gone to the collective: an error, not a silent corruption.
std::string Engine::unfinished_work(int rank) const {
  std::string out;
  if (actor(rank).natives_started > 0)
    out = fmt::format("rank {} returned with {} native collective(s) started and never waited", rank,
                      actor(rank).natives_started);
  for (const auto& [key, st] : streams_) {
    if (key.first != rank || st.next == st.calls.size()) continue;
    out += fmt::format("{}rank {} returned with {}({}) and {} more in flight on its communication stream of group {}",
                       out.empty() ? "" : "; ", rank, name_of(st.calls[st.next].call.op),
                       st.calls[st.next].algorithm->name, st.calls.size() - st.next - 1, key.second);
  }
  if (!out.empty()) out += ": wait on every Request before the buffers go";
  return out;
}

std::string Engine::actor_name(int actor) const {
  if (actor < options_.ranks) return fmt::format("rank {}", actor);
  for (const auto& [key, st] : streams_)
    if (st.actor == actor) return fmt::format("rank {} / comm{}", key.first, key.second ? fmt::format(" (group {})", key.second) : "");
  return fmt::format("actor {}", actor);
}

// A group lives while any member holds a Comm of it: a rank still in one of its
// collectives holds it, so the reports never meet a closed group. The world
// lives as long as the engine.
void Engine::close_group(int comm_id) {
  if (comm_id != 0 && --open_comms_[comm_id] == 0) groups_[comm_id].reset();
}

int Engine::live_groups() const {
  return int(std::count_if(groups_.begin(), groups_.end(), [](const Members& m) { return m != nullptr; }));
}

// ---- deadlock report -----------------------------------------------------------

int Engine::waits_for(int rank) const {
  const RankState& s = actor(rank);
  if (s.waiting_op >= 0) return ops_[s.waiting_op].peer;
  if (s.waiting_stream) return s.waiting_stream->actor;
  if (s.waiting_rv) {
    const std::vector<int>& group = *groups_[std::get<0>(*s.waiting_rv)];
    const Rendezvous& rv = rendezvous_.at(*s.waiting_rv);
    for (std::size_t i = 0; i < group.size(); ++i)
      if (!rv.slots[i].present) return group[i];
  }
  return -1;
}

std::string Engine::describe(const P2P& op) {
  const std::string group = op.comm_id ? fmt::format(", group={}", op.comm_id) : "";
  return op.is_send ? fmt::format("send(to={}, tag={}, {} bytes{})", op.peer, op.tag, op.buf.bytes(), group)
                    : fmt::format("recv(from={}, tag={}{})", op.peer, op.tag, group);
}

std::string Engine::pending(int rank) const {
  const RankState& s = actor(rank);
  if (s.waiting_op >= 0) return describe(ops_[s.waiting_op]);
  if (s.waiting_stream) {
    const Stream::Call& c = s.waiting_stream->calls[s.waiting_call];
    return fmt::format("wait for {}({}) on its comm stream", name_of(c.call.op), c.algorithm->name);
  }
  return fmt::format("{}(group={})", rendezvous_.at(*s.waiting_rv).what, std::get<0>(*s.waiting_rv));
}

std::string Engine::rank_state(int r) const {
  const RankState& s = actor(r);
  if (!s.ended_by.empty()) return s.ended_by;  // "rank r: OP: rank R failed at t = T"
  std::string state;
  if (s.state == RankState::State::done) {
    state = r < options_.ranks ? "finished" : "idle";
  } else if (s.state == RankState::State::failed) {
    state = fmt::format("failed at t = {}", format_seconds(options_.fail_at));
  } else if (r == running()) {
    state = "running its own code: it has not come back to the simulator";
  } else if (s.waiting_op >= 0 || s.waiting_stream) {
    state = pending(r);
  } else if (s.waiting_rv) {
    state = fmt::format("{} waiting for rank {}", pending(r), waits_for(r));
  } else {
    state = "ready to run (its turn has not come)";
  }
  return fmt::format("{}: {}", actor_name(r), state);
}

std::string Engine::rank_states() const {
  std::string out;
  for (int r = 0; r < actors(); ++r) {
    out += "  " + rank_state(r);
    const RankState::LastCall& last = actor(r).last;
    if (actor(r).state != RankState::State::done && !last.what.empty()) {
      const std::string peer = last.peer < 0 ? "" : fmt::format(" {} rank {}", last.what == "send" ? "to" : "from", last.peer);
      out += fmt::format(" (last call: {}{} at t = {})", last.what, peer, format_seconds(last.at));
    }
    out += "\n";
  }
  return out;
}

std::string Engine::deadlock_report() const {
  std::string out = fmt::format("deadlock: every live rank is blocked (at t = {})\n", format_seconds(elapsed()));
  for (int r = 0; r < actors(); ++r) out += "  " + rank_state(r) + "\n";
  // Follow "waits for" edges from each blocked rank until a rank repeats.
  for (int start = 0; start < actors(); ++start) {
    std::vector<int> path;
    std::vector<char> seen(actors(), 0);
    int r = start;
    while (r >= 0 && actor(r).state == RankState::State::blocked && !seen[r]) {
      seen[r] = 1;
      path.push_back(r);
      r = waits_for(r);
    }
    if (r >= 0 && seen[r]) {
      const auto from = std::find(path.begin(), path.end(), r);
      std::string cycle;
      for (auto it = from; it != path.end(); ++it) cycle += actor_name(*it) + " -> ";
      return out + fmt::format("  wait-for cycle: {}{}\n", cycle, actor_name(r));
    }
  }
  return out + "  no wait-for cycle: a rank waits for one that has finished\n";
}

// ---- faults --------------------------------------------------------------------

bool Engine::has_failed_member(int comm_id) const {
  if (options_.fail_rank < 0 || !failed(options_.fail_rank)) return false;
  const std::vector<int>& group = *groups_[comm_id];
  return std::find(group.begin(), group.end(), options_.fail_rank) != group.end();
}

// A message to or from the failed rank that was not delivered by the failure never will be.
bool Engine::lost(const P2P& op) const {
  return failed(op.peer) && (!op.done || op.complete > options_.fail_at);
}

// Whether what a suspended rank waits on needs the failed rank: a message not
// delivered by then, or a rendezvous of its group not yet released.
bool Engine::cut_short(int rank) const {
  const RankState& s = actor(rank);
  if (s.waiting_op >= 0) return lost(ops_[s.waiting_op]);
  if (!s.waiting_rv || !has_failed_member(std::get<0>(*s.waiting_rv))) return false;
  return s.state == RankState::State::blocked || s.now > options_.fail_at;
}

std::string Engine::failure(int rank, std::string_view op) const {
  return fmt::format("rank {}: {}: rank {} failed at t = {}", rank, op, options_.fail_rank,
                     format_seconds(options_.fail_at));
}

// A message is gone if the failed rank was to send or receive it and had not by
// then, or if the rank at its other end stopped on the failure first.
void Engine::check_delivery(int rank, std::int64_t id) const {
  const P2P& op = ops_[id];
  if (lost(op)) throw RankFailedError(failure(rank, describe(op)));
  if (op.orphaned)
    throw RankFailedError(fmt::format("rank {}: {}: rank {} stopped on the failure of rank {} at t = {}", rank,
                                      describe(op), op.peer, options_.fail_rank, format_seconds(options_.fail_at)));
}

// Rank fail_rank stops at fail_at: it never runs again, and every rank whose wait
// it cuts short wakes now (instead of when it would have) to throw the error.
void Engine::inject_failure() {
  const int failing = options_.fail_rank;
  const double at = options_.fail_at;
  RankState& f = actor(failing);
  if (f.state == RankState::State::done) return;  // it finished in time
  f.state = RankState::State::failed;
  f.now = at;
  if (options_.trace) options_.trace->track(failing)->events.push_back({TraceEvent::Kind::fault, "failed", at, at});
  std::vector<std::pair<double, int>> queue;
  for (; !ready_.empty(); ready_.pop()) queue.push_back(ready_.top());
  for (const auto& [time, r] : queue)  // the failed rank's wake-ups go (its streams' too), and those replaced below
    if (actor(r).endpoint != failing && !cut_short(r)) ready_.push({time, r});
  for (int r = 0; r < actors(); ++r) {
    RankState& s = actor(r);
    if (s.endpoint == failing && s.state != RankState::State::done) s.state = RankState::State::failed;
    if (s.endpoint == failing || s.state == RankState::State::done || !cut_short(r)) continue;
    s.fault = failure(s.endpoint, pending(r));
    s.now = std::max(s.blocked_at, at);
    s.state = RankState::State::ready;
    ready_.push({s.now, r});
  }
}

// A rank that stopped on a failure leaves requests behind, over buffers its
// stack no longer holds: none may match again, no bytes move to or from them,
// and a rank that waits on the other end of a matched one is told.
void Engine::abandon(int rank) {
  for (std::int64_t id = 0; id < std::int64_t(ops_.size()); ++id) {
    P2P& op = ops_[id];
    if (op.owner != rank || op.delivered) continue;
    if (op.partner >= 0) {  // matched: delivered, or its bytes in flight
      ops_[op.partner].orphaned = true;
    } else {
      std::vector<std::int64_t>& queue = op.is_send ? actor(op.peer).unexpected_sends : actor(rank).posted_recvs;
      queue.erase(std::find(queue.begin(), queue.end(), id));
    }
    op.delivered = true;
  }
}

std::string Engine::failure_report() const {
  std::string out = fmt::format("rank {} failed at t = {}; how every rank ended:\n", options_.fail_rank,
                                format_seconds(options_.fail_at));
  for (int r = 0; r < actors(); ++r) out += "  " + rank_state(r) + "\n";
  return out;
}

}  // namespace labkit::sim
