#include "mpi_comm.h"

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <limits>
#include <numeric>
#include <thread>

#include <fmt/format.h>

#include "labkit/error.h"

namespace labkit::mpi {

namespace {
int rank_in(MPI_Comm comm) {
  int r = 0;
  MPI_Comm_rank(comm, &r);
  return r;
}
int size_of(MPI_Comm comm) {
  int n = 0;
  MPI_Comm_size(comm, &n);
  return n;
}
int bytes_arg(std::size_t bytes, const std::string& who, std::string_view op) {
  if (bytes > std::size_t(std::numeric_limits<int>::max()))
    fail(who, op, "{} bytes in one message: MPI counts are int, split the buffer below 2 GiB", bytes);
  return int(bytes);
}
}  // namespace

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return MPI_FLOAT;
    case DType::f64: return MPI_DOUBLE;
    case DType::i32: return MPI_INT32_T;
    case DType::i64: return MPI_INT64_T;
    case DType::u8: return MPI_UINT8_T;
    case DType::bf16: return MPI_UINT16_T;  // MPI has no bf16: 2-byte elements, reduced by bf16_op
  }
  return MPI_BYTE;
}

namespace {
// MPI's own operators would add bf16's bits as integers, so a bf16 reduction
// runs labkit's reduce_local (float math, rounded once) as a user-defined op.
template <ReduceOp op>
void reduce_bf16(void* in, void* inout, int* count, MPI_Datatype*) {
  reduce_local(op, DType::bf16, in, inout, std::size_t(*count));
}

MPI_Op bf16_op(ReduceOp op) {
  static const std::array<MPI_Op, 4> ops = [] {  // made on first use, after MPI_Init; freed by MPI_Finalize
    std::array<MPI_Op, 4> made{};
    const bool commutative = true;
    MPI_Op_create(&reduce_bf16<ReduceOp::sum>, commutative, &made[0]);
    MPI_Op_create(&reduce_bf16<ReduceOp::prod>, commutative, &made[1]);
    MPI_Op_create(&reduce_bf16<ReduceOp::min>, commutative, &made[2]);
    MPI_Op_create(&reduce_bf16<ReduceOp::max>, commutative, &made[3]);
    return made;
  }();
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: return ops[0];  // Comm divides after an avg
    case ReduceOp::prod: return ops[1];
    case ReduceOp::min: return ops[2];
    case ReduceOp::max: return ops[3];
  }
  return ops[0];
}
}  // namespace

MPI_Op mpi_op(ReduceOp op, DType dtype) {
  if (dtype == DType::bf16) return bf16_op(op);
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: return MPI_SUM;  // Comm divides after an avg
    case ReduceOp::prod: return MPI_PROD;
    case ReduceOp::min: return MPI_MIN;
    case ReduceOp::max: return MPI_MAX;
  }
  return MPI_SUM;
}

MpiComm::MpiComm(MPI_Comm comm, int comm_id, Members members, TraceTrack* track, Context& context)
    : Comm(comm_id, rank_in(comm), std::move(members), track), comm_(comm), comm_id_(comm_id), context_(context) {}

MpiComm::~MpiComm() {
  if (comm_id_ != 0) MPI_Comm_free(&comm_);
}

std::int64_t MpiComm::post_send(View buf, int to, int tag) {
  die_if_due();
  if (!buf.data && buf.count) fail(who(), "send", "a payload-free buffer: --payload-free runs on the simulator only");
  Pending& p = pending_[next_id_] = {MPI_REQUEST_NULL, true, to, tag, buf.bytes(), HostStaging(buf, true)};
  MPI_Issend(p.staged.data(), bytes_arg(buf.bytes(), who(), "send"), MPI_BYTE, to, tag, comm_, &p.request);
  ++context_.messages;
  return next_id_++;
}

std::int64_t MpiComm::post_recv(View buf, int from, int tag) {
  die_if_due();
  if (!buf.data && buf.count) fail(who(), "recv", "a payload-free buffer: --payload-free runs on the simulator only");
  Pending& p = pending_[next_id_] = {MPI_REQUEST_NULL, false, from, tag, buf.bytes(), HostStaging(buf, false)};
  MPI_Irecv(p.staged.data(), bytes_arg(buf.bytes(), who(), "recv"), MPI_BYTE, from, tag, comm_, &p.request);
  return next_id_++;
}

// Polls rather than blocking in MPI_Wait, so that a wait can notice a peer that
// died and a wait with no progress for the deadlock timeout, and say so instead
// of hanging the run. (mpirun, too, kills the rest of the job about a second
// after one of its processes dies; a rank that is waiting on it hears first.)
void MpiComm::poll(MPI_Request& request, MPI_Status* status, std::string_view op, int peer,
                   const std::function<void()>& stalled) {
  const double deadline = MPI_Wtime() + context_.deadlock_timeout;
  for (long polls = 0;; ++polls) {
    int done = 0;
    MPI_Test(&request, &done, status);
    if (done) return;
    if (polls % 4096 != 4095) continue;
    die_if_due();
    for (int r = std::max(peer, 0); r < (peer < 0 ? size() : peer + 1); ++r)
      if (r != rank()) check_alive(r, op);
    if (MPI_Wtime() > deadline) stalled();
  }
}

// A process that is gone (killed, crashed) is a failed rank. kill(pid, 0) asks
// the kernel without sending anything, so only a peer on this host can be asked;
// one on another host is caught by the deadlock timeout instead.
void MpiComm::check_alive(int peer, std::string_view op) const {
  const int g = global_rank(peer), me = global_rank(rank());
  if (context_.node_of_world.at(g) != context_.node_of_world.at(me)) return;
  if (kill(context_.pid_of_world.at(g), 0) != 0 && errno == ESRCH)
    throw RankFailedError(fmt::format("{}: {}: rank {} failed: its process is gone", who(), op, peer));
}

// --fail-rank: the process dies as a killed one does, by SIGKILL, with nothing
// flushed and nothing said; its peers find out by themselves.
void MpiComm::die_if_due() const {
  if (global_rank(rank()) == context_.fail_rank && now() >= context_.fail_at) std::raise(SIGKILL);
}

void MpiComm::wait_request(std::int64_t id) {
  Pending& p = pending_.at(id);
  const std::string op = p.is_send ? fmt::format("send(to={}, tag={}, {} bytes)", p.peer, p.tag, p.bytes)
                                   : fmt::format("recv(from={}, tag={})", p.peer, p.tag);
  MPI_Status status;
  poll(p.request, &status, op, p.peer, [&] {
    fail(who(), p.is_send ? "send" : "recv",
         "{} rank {} (tag {}, {} bytes) made no progress in {} s: a deadlock? (every rank sending first, or a "
         "receive that no rank sends to)",
         p.is_send ? "to" : "from", p.peer, p.tag, p.bytes, context_.deadlock_timeout);
  });
  if (!p.is_send) {
    int got = 0;
    MPI_Get_count(&status, MPI_BYTE, &got);
    if (std::size_t(got) != p.bytes)
      fail(who(), "recv", "{} bytes arrived from rank {} (tag {}) for a {}-byte buffer", got, p.peer, p.tag, p.bytes);
    p.staged.copy_out();
  }
  pending_.erase(id);
}

bool MpiComm::test_request(std::int64_t id) {
  int done = 0;
  Pending& p = pending_.at(id);
  MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
  if (!done) return false;
  if (!p.is_send) p.staged.copy_out();
  pending_.erase(id);
  return true;
}

// Every rank's (collective, root, op, dtype, count) against rank 0's: one small
// allgather per call, so mismatched arguments fail with a message, not a hang;
// polled, so a rank that never joins (its process died, or it skipped the call)
// does not hang the others either.
void MpiComm::check_collective(const CollectiveCall& c) {
  die_if_due();
  if (!context_.check_arguments) return;
  const View& agreed = agreed_buffer(c);
  const std::array<long long, 5> mine = {int(c.op), has_root(c.op) ? c.root : 0,
                                         has_reduce_op(c.op) ? int(c.reduce_op) : 0,
                                         c.op == Collective::barrier ? 0 : int(agreed.dtype),
                                         has_agreed_count(c.op) ? (long long)agreed.count : 0};
  std::vector<std::array<long long, 5>> all(size());
  const std::string_view op = name_of(c.op);
  MPI_Request request;
  MPI_Iallgather(mine.data(), 5, MPI_LONG_LONG, all.data(), 5, MPI_LONG_LONG, comm_, &request);
  poll(request, MPI_STATUS_IGNORE, op, -1, [&] {
    fail(who(), op, "not every rank joined in {} s: a deadlock? (a rank that skips the collective)",
         context_.deadlock_timeout);
  });
  for (int r = 0; r < size(); ++r) {
    const auto& f = all[r];
    if (f == mine) continue;
    if (f[0] != mine[0])
      fail(who(), op, "rank {} called {} at this point; every rank must call the same collective", r,
           name_of(Collective(f[0])));
    if (f[1] != mine[1]) fail(who(), op, "root={} but rank {} passed root={}", mine[1], r, f[1]);
    if (f[2] != mine[2])
      fail(who(), op, "op={} but rank {} passed op={}", name_of(c.reduce_op), r, name_of(ReduceOp(f[2])));
    if (f[3] != mine[3])
      fail(who(), op, "dtype={} but rank {} passed dtype={}", name_of(agreed.dtype), r, name_of(DType(f[3])));
    fail(who(), op, "count={} but rank {} passed count={}; every rank must pass the same count", mine[4], r, f[4]);
  }
  if (info(c.op).counts == Counts::per_peer) check_counts(c);
}

// all_to_allv: what each rank sends this one must be what this one receives
// from it, one all_to_all of the send counts away.
void MpiComm::check_counts(const CollectiveCall& c) {
  std::vector<unsigned long long> sent_to_me(size());
  const std::vector<unsigned long long> mine(c.send_counts.begin(), c.send_counts.end());
  MPI_Request request;
  MPI_Ialltoall(mine.data(), 1, MPI_UNSIGNED_LONG_LONG, sent_to_me.data(), 1, MPI_UNSIGNED_LONG_LONG, comm_, &request);
  poll(request, MPI_STATUS_IGNORE, "all_to_allv", -1, [&] {
    fail(who(), "all_to_allv", "not every rank joined in {} s: a deadlock?", context_.deadlock_timeout);
  });
  for (int r = 0; r < size(); ++r)
    if (sent_to_me[r] != c.recv_counts[r])
      fail(who(), "all_to_allv", "recv_counts[{}]={} but rank {} sends send_counts[{}]={} to this rank", r,
           c.recv_counts[r], r, rank(), sent_to_me[r]);
}

std::string_view MpiComm::run_native(const CollectiveCall& c) { return wait_native(start_native(c)).algorithm; }

std::int64_t MpiComm::start_native(const CollectiveCall& call) {
  die_if_due();
  // Device buffers go through host copies; the result, in place or not, comes back in wait_native.
  NativePending& p = natives_[next_id_] = {MPI_REQUEST_NULL, call.op, now(), {},
                                           HostStaging(call.send, true), HostStaging(call.recv, true)};
  CollectiveCall c = call;
  c.send.data = p.send.data(), c.recv.data = p.recv.data();
  const MPI_Datatype t = mpi_type(c.recv.dtype);
  const MPI_Op op = mpi_op(c.reduce_op, c.recv.dtype);
  const int n = int(c.recv.count);
  const bool root = rank() == c.root;
  MPI_Request* r = &p.request;
  switch (c.op) {
    case Collective::broadcast: MPI_Ibcast(c.recv.data, n, t, c.root, comm_, r); break;
    case Collective::reduce:
      MPI_Ireduce(root ? MPI_IN_PLACE : c.recv.data, root ? c.recv.data : nullptr, n, t, op, c.root, comm_, r);
      break;
    case Collective::all_reduce: MPI_Iallreduce(MPI_IN_PLACE, c.recv.data, n, t, op, comm_, r); break;
    case Collective::gather:
      MPI_Igather(c.send.data, int(c.send.count), mpi_type(c.send.dtype), c.recv.data, int(c.send.count), t, c.root,
                  comm_, r);
      break;
    case Collective::scatter: MPI_Iscatter(c.send.data, n, t, c.recv.data, n, t, c.root, comm_, r); break;
    case Collective::all_gather:
      MPI_Iallgather(c.send.data, int(c.send.count), t, c.recv.data, int(c.send.count), t, comm_, r);
      break;
    case Collective::reduce_scatter: MPI_Ireduce_scatter_block(c.send.data, c.recv.data, n, t, op, comm_, r); break;
    case Collective::all_to_all:
      MPI_Ialltoall(c.send.data, int(c.send.count) / size(), t, c.recv.data, int(c.send.count) / size(), t, comm_, r);
      break;
    case Collective::all_to_allv: {
      // MPI's counts and displacements, in elements and as ints: send's, then recv's.
      auto as_int = [&](std::size_t n) {
        if (n > std::size_t(std::numeric_limits<int>::max()))
          fail(who(), "all_to_allv", "an offset of {} elements: MPI counts are int, split the buffer", n);
        return int(n);
      };
      std::vector<int>& v = p.counts_and_displacements;
      v.assign(4 * std::size_t(size()), 0);
      int *send_counts = v.data(), *send_at = send_counts + size();
      int *recv_counts = send_at + size(), *recv_at = recv_counts + size();
      std::size_t sent = 0, received = 0;
      for (int j = 0; j < size(); ++j) {
        send_at[j] = as_int(sent), recv_at[j] = as_int(received);
        send_counts[j] = as_int(c.send_counts[j]), recv_counts[j] = as_int(c.recv_counts[j]);
        sent += c.send_counts[j], received += c.recv_counts[j];
      }
      MPI_Ialltoallv(c.send.data, send_counts, send_at, t, c.recv.data, recv_counts, recv_at, t, comm_, r);
      break;
    }
    case Collective::barrier: MPI_Ibarrier(comm_, r); break;
  }
  return next_id_++;
}

// Open MPI moves a non-blocking collective along inside MPI calls (it has no
// progress thread by default): a rank that computes without calling MPI leaves
// it where it was, and the wait does the rest.
Comm::NativeDone MpiComm::wait_native(std::int64_t id) {
  NativePending& p = natives_.at(id);
  const std::string_view op = name_of(p.op);
  poll(p.request, MPI_STATUS_IGNORE, op, -1, [&] {
    fail(who(), op, "made no progress in {} s: a deadlock? (a rank that skips the collective)",
         context_.deadlock_timeout);
  });
  // It ended, as far as this rank can tell, when the wait saw it done; Open MPI's
  // libnbc picks its own algorithm per size.
  p.recv.copy_out();
  const NativeDone done{p.started, now(), "open-mpi"};
  natives_.erase(id);
  return done;
}

bool MpiComm::test_native(std::int64_t id) {
  int done = 0;
  NativePending& p = natives_.at(id);
  MPI_Test(&p.request, &done, MPI_STATUS_IGNORE);
  if (done) p.recv.copy_out();
  return done;
}

MpiComm::Split MpiComm::split_mpi(int color, int key) {
  MPI_Comm sub = MPI_COMM_NULL;
  MPI_Comm_split(comm_, color < 0 ? MPI_UNDEFINED : color, key, &sub);
  // (parent, split, color) names the group: alike on its members, apart from its siblings.
  const int id = (comm_id_ * 131 + ++splits_) * 1009 + color + 1;
  if (sub == MPI_COMM_NULL) return {sub, id, nullptr};
  std::vector<int> members(size_of(sub));
  const int me = global_rank(rank());
  MPI_Allgather(&me, 1, MPI_INT, members.data(), 1, MPI_INT, sub);
  return {sub, id, std::make_shared<const std::vector<int>>(std::move(members))};
}

std::unique_ptr<Comm> MpiComm::split_group(int color, int key) {
  Split s = split_mpi(color, key);
  if (s.comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<MpiComm>(s.comm, s.comm_id, s.members, track(), context_);
}

// Comm::compute_seconds on a real machine: this rank is busy for that long (a
// sleep), so a lab's modeled work still shapes the timeline; --fail-rank cuts it short.
void MpiComm::advance(double seconds) {
  if (global_rank(rank()) == context_.fail_rank) seconds = std::clamp(context_.fail_at - now(), 0.0, seconds);
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  die_if_due();
}

// Buffers may differ in size by rank (a gather's root holds them all): sizes first.
std::vector<std::vector<std::byte>> MpiComm::gather_untimed(View buf) {
  const int bytes = bytes_arg(buf.bytes(), who(), "gather_object");
  std::vector<int> sizes(size()), offsets(size());
  MPI_Gather(&bytes, 1, MPI_INT, sizes.data(), 1, MPI_INT, 0, comm_);
  std::exclusive_scan(sizes.begin(), sizes.end(), offsets.begin(), 0);
  std::vector<std::byte> all(rank() == 0 ? std::size_t(offsets.back()) + sizes.back() : 0);
  MPI_Gatherv(buf.data, bytes, MPI_BYTE, all.data(), sizes.data(), offsets.data(), MPI_BYTE, 0, comm_);
  std::vector<std::vector<std::byte>> rows;
  for (int r = 0; rank() == 0 && r < size(); ++r)
    rows.emplace_back(all.begin() + offsets[r], all.begin() + offsets[r] + sizes[r]);
  return rows;
}

}  // namespace labkit::mpi
