#include "labkit/comm.h"

#include <algorithm>

#include <cstring>
#include <numeric>

#include <fmt/format.h>

#include "labkit/cost_model.h"
#include "labkit/device.h"
#include "labkit/error.h"

namespace labkit {

Comm::Comm(int comm_id, int rank, Members global_ranks, TraceTrack* track)
    : comm_id_(comm_id), rank_(rank), size_(int(global_ranks->size())), global_ranks_(std::move(global_ranks)),
      track_(track) {}

std::string Comm::who() const {
  if (comm_id_ == 0) return fmt::format("rank {}", rank_);
  return fmt::format("rank {} of group {} (global rank {})", rank_, comm_id_, global_rank(rank_));
}

// ---- point-to-point ----------------------------------------------------------

void Comm::check_peer(std::string_view op, int peer, std::string_view arg) const {
  if (peer < 0 || peer >= size_) fail(who(), op, "{}={} is out of range for {} ranks", arg, peer, size_);
  if (peer == rank_) fail(who(), op, "{}={} is this rank itself; a rank cannot message itself", arg, peer);
}

Request Comm::isend(View buf, int to, int tag) {
  check_peer("send", to, "to");
  const double posted = now();
  return Request(this, post_send(buf, to, tag), Request::Kind::send, buf, to, tag, posted);
}

Request Comm::irecv(View buf, int from, int tag) {
  check_peer("recv", from, "from");
  const double posted = now();
  return Request(this, post_recv(buf, from, tag), Request::Kind::recv, buf, from, tag, posted);
}

void Comm::send(View buf, int to, int tag) { isend(buf, to, tag).wait(); }
void Comm::recv(View buf, int from, int tag) { irecv(buf, from, tag).wait(); }

void Comm::sendrecv(View send_buf, int to, View recv_buf, int from, int tag) {
  Request s = isend(send_buf, to, tag);
  Request r = irecv(recv_buf, from, tag);
  // One operation: its receive counts from when the pair was posted, so on a real
  // backend (where posting the send takes time) the send's span nests inside the
  // receive's in the trace instead of overlapping its start.
  r.posted_ = s.posted_;
  s.wait();
  r.wait();
}

void Request::wait() {
  if (comm_) comm_->complete(*this, true);
}

bool Request::test() { return !comm_ || comm_->complete(*this, false); }

bool Comm::complete(Request& r, bool block) {
  switch (r.kind_) {
    case Request::Kind::send: case Request::Kind::recv:
      try {
        if (block) {
          wait_request(r.id_);
        } else if (!test_request(r.id_)) {
          return false;
        }
      } catch (const RankFailedError& e) {
        finish(r, e.what());  // the trace shows the operation the failure cut short
        throw;
      }
      finish(r);
      return true;
    case Request::Kind::native: {
      if (!block && !test_native(r.id_)) return false;
      const auto node = in_flight_.extract(r.id_);
      const CollectiveCall& call = node.mapped().first;
      r.comm_ = nullptr;
      try {
        const NativeDone done = wait_native(r.id_);
        divide_if_avg(call);
        trace_collective(call, done.started, done.algorithm, {}, true, done.ended);
      } catch (const RankFailedError& e) {
        trace_collective(call, node.mapped().second, {}, e.what(), true);
        throw;
      }
      return true;
    }
    case Request::Kind::algorithm:
      if (!block && !test_algorithm(r.id_)) return false;
      r.comm_ = nullptr;
      wait_algorithm(r.id_);
      return true;
  }
  return true;
}

std::uint64_t Comm::flow_id(int src, int dst, int tag) {
  const std::uint64_t k = flow_counts_[{src, dst, tag}]++;
  // FNV-1a over (group, src, dst, tag, k), cut to 53 bits so JSON readers keep it exact.
  std::uint64_t h = 1469598103934665603ull;
  for (std::uint64_t x : {std::uint64_t(comm_id_), std::uint64_t(src), std::uint64_t(dst), std::uint64_t(tag), k}) {
    h ^= x;
    h *= 1099511628211ull;
  }
  return h & ((1ull << 53) - 1);
}

void Comm::finish(Request& r, std::string_view error) {
  if (track_) {
    const int me = global_rank(rank_), peer = global_rank(r.peer_);
    const bool is_send = r.kind_ == Request::Kind::send;
    TraceEvent e{is_send ? TraceEvent::Kind::send : TraceEvent::Kind::recv,
                 is_send ? "send" : "recv", r.posted_, now(), peer, r.tag_, r.buf_.bytes(), 0, {}};
    if (!error.empty()) {
      e.args.emplace_back("error", error);  // a lost message: no arrow
    } else {
      e.flow = is_send ? flow_id(me, peer, r.tag_) : flow_id(peer, me, r.tag_);
    }
    if (is_send && node_of(r.peer_) != node_of(rank_)) e.args.emplace_back("off_node_bytes", std::to_string(e.bytes));
    e.on_stream = worked_since(r.posted_);
    record(std::move(e));
  }
  r.comm_ = nullptr;  // a second wait is a no-op
}

// Whether this rank did other work than messaging (computed, ran a collective)
// since `posted`: a message pending meanwhile was in flight under that work, as
// the pipeline's sends are under its stages' compute, and is drawn on the
// rank's communication track (TraceEvent::on_stream), not around the work on
// its own. A blocking send, or sendrecv's pair, stays the rank's operation.
bool Comm::worked_since(double posted) const {
  for (auto e = track_->events.rbegin(); e != track_->events.rend() && e->end > posted; ++e)
    if (!e->on_stream && e->kind != TraceEvent::Kind::send && e->kind != TraceEvent::Kind::recv) return true;
  return false;
}

// ---- collectives -------------------------------------------------------------

void Comm::validate(const CollectiveCall& c) const {
  const std::string_view op = name_of(c.op);
  const int p = size_;
  if (has_root(c.op) && (c.root < 0 || c.root >= p))
    fail(who(), op, "root={} is out of range for {} ranks", c.root, p);
  const bool is_root = rank_ == c.root;
  auto same_dtype = [&] {
    if (c.send.dtype != c.recv.dtype)
      fail(who(), op, "send dtype {} differs from recv dtype {}", name_of(c.send.dtype), name_of(c.recv.dtype));
  };
  auto whole_blocks = [&](const View& big, std::string_view big_name, const View& small, std::string_view small_name) {
    same_dtype();
    if (big.count % p != 0)
      fail(who(), op, "{} count {} is not divisible by {} ranks", big_name, big.count, p);
    if (big.count != small.count * p)
      fail(who(), op, "{} count {} must be {} ranks x {} count {} = {}", big_name, big.count, p, small_name,
           small.count, small.count * p);
  };
  // A rooted collective's large buffer matters at its root only.
  if (has_root(c.op) && !is_root && info(c.op).counts != Counts::in_place) return;
  switch (info(c.op).counts) {
    case Counts::gathers: whole_blocks(c.recv, "recv", c.send, "send"); break;
    case Counts::scatters: whole_blocks(c.send, "send", c.recv, "recv"); break;
    case Counts::exchanges:
      same_dtype();
      if (c.send.count != c.recv.count)
        fail(who(), op, "send count {} differs from recv count {}", c.send.count, c.recv.count);
      if (c.send.count % p != 0) fail(who(), op, "send count {} is not divisible by {} ranks", c.send.count, p);
      break;
    case Counts::per_peer: {
      same_dtype();
      auto check_counts = [&](std::span<const std::size_t> counts, std::string_view name, const View& buf,
                              std::string_view buf_name) {
        if (int(counts.size()) != p) fail(who(), op, "{} has {} entries for {} ranks", name, counts.size(), p);
        const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t(0));
        if (total != buf.count)
          fail(who(), op, "{} count {} differs from the {} sum {}", buf_name, buf.count, name, total);
      };
      check_counts(c.send_counts, "send_counts", c.send, "send");
      check_counts(c.recv_counts, "recv_counts", c.recv, "recv");
      break;
    }
    case Counts::in_place: case Counts::none: break;
  }
}

void Comm::record(TraceEvent event) {
  event.on_stream = event.on_stream || on_stream_;
  track_->events.push_back(std::move(event));
}

void Comm::trace_collective(const CollectiveCall& c, double start, std::string_view native_algo,
                            std::string_view error, bool on_stream, double end) {
  if (!track_) return;
  std::string algo(algorithm(c.op));
  if (!native_algo.empty()) algo += fmt::format("/{}", native_algo);  // "native/ring"
  std::vector<std::pair<std::string, std::string>> args = {
      {"algo", algo}, {"dtype", std::string(name_of(c.recv.dtype))},
      {"send_count", std::to_string(c.send.count)}, {"recv_count", std::to_string(c.recv.count)}};
  if (has_reduce_op(c.op)) args.emplace_back("op", name_of(c.reduce_op));
  if (has_root(c.op)) args.emplace_back("root", std::to_string(c.root));
  if (!error.empty()) args.emplace_back("error", error);
  args.emplace_back("nodes", std::to_string(nodes_spanned()));
  // A labkit algorithm's messages carry their own; the library's are modelled.
  if (!native_algo.empty() && error.empty() && nodes_spanned() > 1)
    args.emplace_back("off_node_bytes", std::to_string(native_off_node_bytes(c, native_algo, rank_, nodes())));
  const std::uint64_t bytes = std::max(c.send.bytes(), c.recv.bytes());
  record({TraceEvent::Kind::collective, std::string(name_of(c.op)), start, end < 0 ? now() : end, -1, 0, bytes, 0,
          std::move(args), {}, on_stream});
}

const GroupNodes& Comm::nodes() const {
  if (!nodes_) {
    std::vector<int> node_of_rank;
    for (int r = 0; r < size_; ++r) node_of_rank.push_back(node_of(r));
    nodes_.emplace(std::move(node_of_rank));
  }
  return *nodes_;
}

int Comm::nodes_spanned() const { return nodes().count; }

void Comm::divide_if_avg(const CollectiveCall& call) {
  if (has_reduce_op(call.op) && call.reduce_op == ReduceOp::avg && (call.op != Collective::reduce || rank_ == call.root))
    divide_local(call.recv.dtype, call.recv.data, call.recv.count, size_);
}

// avg runs as sum followed by one division by the group size, as NCCL does.
namespace {
CollectiveCall summing(CollectiveCall call) {
  if (call.reduce_op == ReduceOp::avg) call.reduce_op = ReduceOp::sum;
  return call;
}
}  // namespace

void Comm::run(const CollectiveCall& call) {
  validate(call);
  check_collective(call);
  const double start = now();
  const CollectiveCall c = summing(call);
  const Algorithm* algo = algorithm_for(c.op);
  ++(*calls_)[{c.op, algorithm(c.op)}];
  std::string_view native_algo;
  try {
    if (!algo) {
      native_algo = run_native(c);
    } else {
      algo->run(*this, c);
    }
  } catch (const RankFailedError& e) {
    trace_collective(call, start, native_algo, e.what());
    throw;
  }
  divide_if_avg(call);
  trace_collective(call, start, native_algo);
}

Request Comm::start(const CollectiveCall& call) {
  validate(call);
  ++(*calls_)[{call.op, algorithm(call.op)}];
  if (algorithm_for(call.op)) return Request(this, start_algorithm(call), Request::Kind::algorithm, {}, -1, 0, 0);
  check_collective(call);
  const double start = now();
  const std::int64_t id = start_native(summing(call));
  in_flight_.emplace(id, std::pair(call, start));
  return Request(this, id, Request::Kind::native, {}, -1, 0, 0);
}

Request Comm::i_broadcast(View buf, int root) { return start({Collective::broadcast, {}, buf, ReduceOp::sum, root}); }
Request Comm::i_all_reduce(View buf, ReduceOp op) { return start({Collective::all_reduce, {}, buf, op, 0}); }
Request Comm::i_all_gather(View send, View recv) { return start({Collective::all_gather, send, recv, ReduceOp::sum, 0}); }
Request Comm::i_reduce_scatter(View send, View recv, ReduceOp op) {
  return start({Collective::reduce_scatter, send, recv, op, 0});
}
Request Comm::i_all_to_all(View send, View recv) { return start({Collective::all_to_all, send, recv, ReduceOp::sum, 0}); }
Request Comm::i_all_to_allv(View send, std::span<const std::size_t> send_counts, View recv,
                            std::span<const std::size_t> recv_counts) {
  return start({Collective::all_to_allv, send, recv, ReduceOp::sum, 0, send_counts, recv_counts});
}

void Comm::broadcast(View buf, int root) { run({Collective::broadcast, {}, buf, ReduceOp::sum, root}); }
void Comm::reduce(View buf, ReduceOp op, int root) { run({Collective::reduce, {}, buf, op, root}); }
void Comm::all_reduce(View buf, ReduceOp op) { run({Collective::all_reduce, {}, buf, op, 0}); }
void Comm::gather(View send, View recv, int root) { run({Collective::gather, send, recv, ReduceOp::sum, root}); }
void Comm::scatter(View send, View recv, int root) { run({Collective::scatter, send, recv, ReduceOp::sum, root}); }
void Comm::all_gather(View send, View recv) { run({Collective::all_gather, send, recv, ReduceOp::sum, 0}); }
void Comm::reduce_scatter(View send, View recv, ReduceOp op) { run({Collective::reduce_scatter, send, recv, op, 0}); }
void Comm::all_to_all(View send, View recv) { run({Collective::all_to_all, send, recv, ReduceOp::sum, 0}); }
void Comm::all_to_allv(View send, std::span<const std::size_t> send_counts, View recv,
                       std::span<const std::size_t> recv_counts) {
  run({Collective::all_to_allv, send, recv, ReduceOp::sum, 0, send_counts, recv_counts});
}

std::vector<std::size_t> Comm::exchange_counts(std::span<const std::size_t> send_counts) {
  if (int(send_counts.size()) != size_)
    fail(who(), "exchange_counts", "send_counts has {} entries for {} ranks", send_counts.size(), size_);
  std::vector<std::int64_t> out(send_counts.begin(), send_counts.end()), in(size_);
  all_to_all(view_of(out), view_of(in));
  return {in.begin(), in.end()};
}
void Comm::barrier() { run({Collective::barrier, {}, {}, ReduceOp::sum, 0}); }

void Comm::set_algorithm(Collective op, const Algorithm* algorithm) {
  if (algorithm && algorithm->op != op)
    fail(who(), name_of(op), "'{}' is a {} algorithm", algorithm->name, name_of(algorithm->op));
  algorithms_[std::size_t(op)] = algorithm;
}

std::string_view Comm::algorithm(Collective op) const {
  const Algorithm* a = algorithm_for(op);
  return a ? a->name : "native";
}

std::unique_ptr<Comm> Comm::split(int color, int key) {
  std::unique_ptr<Comm> group = split_group(color, key);
  if (group) {
    group->algorithms_ = algorithms_;
    group->memory_ = memory_;
    group->calls_ = calls_;
  }
  return group;
}

Comm& Comm::node_group() {
  if (!node_group_) node_group_ = split(node_of(rank_), rank_);
  return *node_group_;
}

Comm* Comm::node_leaders() {
  if (!node_leaders_) node_leaders_ = split(node_group().rank() == 0 ? 0 : -1, rank_);
  return node_leaders_->get();
}

// ---- compute regions and memory ----------------------------------------------

void Comm::compute_flops(std::string_view what, double flops) { compute_seconds(what, seconds_for_flops(flops)); }

void Comm::compute_seconds(std::string_view what, double seconds) {
  if (seconds < 0) fail(who(), "compute", "duration {} s is negative", seconds);
  const double start = now();
  advance(seconds);
  if (track_) record({TraceEvent::Kind::compute, std::string(what), start, now(), -1, 0, 0, 0, {}});
}

void Comm::record_compute(std::string_view what, double started, double flops) {
  if (clock_is_virtual()) return compute_flops(what, flops);
  finish_issued_ops();  // a GPU's compute ends when it has run, not when the host queued it
  if (track_) record({TraceEvent::Kind::compute, std::string(what), started, now(), -1, 0, 0, 0, {}});
}

void Comm::track_memory(MemoryUse use, std::int64_t bytes) {
  memory_->change(use, bytes);
  if (!track_) return;
  TraceEvent e{TraceEvent::Kind::memory, "memory", now(), now()};
  for (MemoryUse u : kMemoryUses) e.counters.emplace_back(name_of(u), double(memory_->current[std::size_t(u)]));
  record(std::move(e));
}

}  // namespace labkit
