#include "nccl/nccl_comm.h"

#include <chrono>
#include <memory>
#include <thread>

#include <fmt/format.h>

#include "labkit/device.h"
#include "labkit/error.h"

namespace labkit::nccl {

namespace {
void check(cudaError_t e, const std::string& who, std::string_view what) {
  if (e != cudaSuccess) fail(who, what, "CUDA: {}", cudaGetErrorString(e));
}
void check(ncclResult_t r, const std::string& who, std::string_view what) {
  if (r != ncclSuccess) fail(who, what, "NCCL: {}", ncclGetErrorString(r));
}

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32: return ncclFloat32;
    case DType::f64: return ncclFloat64;
    case DType::i32: return ncclInt32;
    case DType::i64: return ncclInt64;
    case DType::u8: return ncclUint8;
    case DType::bf16: return ncclBfloat16;
  }
  return ncclFloat32;
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::sum: case ReduceOp::avg: return ncclSum;  // Comm divides after an avg
    case ReduceOp::prod: return ncclProd;
    case ReduceOp::min: return ncclMin;
    case ReduceOp::max: return ncclMax;
  }
  return ncclSum;
}

// A buffer as NCCL needs it, in device memory: the caller's own if it is there
// already, else a device copy (made on construction when `in`, copied back by
// `out()` after the stream is done).
class OnDevice {
 public:
  OnDevice(View v, bool in) : user_(v) {
    if (!v.data || !v.bytes() || device_of(v.data).kind == DeviceKind::cuda) {
      data_ = v.data;
      return;
    }
    const Device& gpu = device(DeviceKind::cuda);
    staged_ = std::shared_ptr<void>(gpu.allocate(v.bytes()), gpu.release);
    data_ = staged_.get();
    if (in) gpu.copy_from_host(data_, v.data, v.bytes());
  }
  void* data() const { return data_; }
  void out() const {
    if (staged_) device(DeviceKind::cuda).copy_to_host(user_.data, data_, user_.bytes());
  }

 private:
  View user_;
  void* data_ = nullptr;
  std::shared_ptr<void> staged_;
};
}  // namespace

NcclComm::NcclComm(MPI_Comm comm, int comm_id, Members members, TraceTrack* track, mpi::Context& context,
                   ncclComm_t nccl)
    : MpiComm(comm, comm_id, std::move(members), track, context), nccl_(nccl) {
  if (!nccl_) {
    // One GPU per process on each host, by its rank among the host's processes.
    MPI_Comm host;
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank(), MPI_INFO_NULL, &host);
    int local = 0, local_ranks = 1, gpus = 0;
    MPI_Comm_rank(host, &local);
    MPI_Comm_size(host, &local_ranks);
    MPI_Comm_free(&host);
    if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
    // Every rank of a host without GPUs enough finds so: the first of them
    // says it, and the others wait for its MPI_Abort, so that it is said once.
    int first_short = local_ranks > gpus ? rank() : size();
    MPI_Allreduce(MPI_IN_PLACE, &first_short, 1, MPI_INT, MPI_MIN, comm);
    if (first_short < size() && rank() != first_short) MPI_Barrier(comm);  // never completes: stopped by the abort
    if (gpus == 0)
      fail(who(), "nccl", "{} rank{} on this host but no GPU: NCCL needs a GPU of its own for every rank (--backend "
           "mpi runs the lab on processes alone)", local_ranks, local_ranks == 1 ? "" : "s");
    if (local_ranks > gpus)
      fail(who(), "nccl", "{} ranks on this host but {} GPU{}: NCCL needs a GPU of its own for every rank (use -np {} "
           "or fewer per host)", local_ranks, gpus, gpus == 1 ? "" : "s", gpus);
    check(cudaSetDevice(local), who(), "cudaSetDevice");
    ncclUniqueId id;
    if (rank() == 0) check(ncclGetUniqueId(&id), who(), "ncclGetUniqueId");
    MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, comm);  // the id travels over MPI
    check(ncclCommInitRank(&nccl_, size(), id, rank()), who(), "ncclCommInitRank");
  }
  check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), who(), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&inputs_ready_, cudaEventDisableTiming), who(), "cudaEventCreate");
}

NcclComm::~NcclComm() {
  ncclCommDestroy(nccl_);
  cudaEventDestroy(inputs_ready_);
  cudaStreamDestroy(stream_);
}

std::int64_t NcclComm::post_send(View buf, int to, int) {
  posted_.push_back({true, buf, to});
  return next_id_++;
}

std::int64_t NcclComm::post_recv(View buf, int from, int) {
  posted_.push_back({false, buf, from});
  return next_id_++;
}

void NcclComm::wait_request(std::int64_t id) {
  if (id >= launched_) launch();
}

bool NcclComm::test_request(std::int64_t id) {
  wait_request(id);
  return true;
}

void NcclComm::launch() {
  std::vector<OnDevice> buffers;
  buffers.reserve(posted_.size());
  for (const Posted& p : posted_) buffers.emplace_back(p.buf, p.is_send);
  after_compute();
  check(ncclGroupStart(), who(), "ncclGroupStart");
  for (std::size_t i = 0; i < posted_.size(); ++i) {
    const Posted& p = posted_[i];
    const std::size_t bytes = p.buf.bytes();
    if (p.is_send)
      check(ncclSend(buffers[i].data(), bytes, ncclChar, p.peer, nccl_, stream_), who(), "ncclSend");
    else
      check(ncclRecv(buffers[i].data(), bytes, ncclChar, p.peer, nccl_, stream_), who(), "ncclRecv");
  }
  check(ncclGroupEnd(), who(), "ncclGroupEnd");
  synchronize(posted_.front().is_send ? "send" : "recv");
  for (std::size_t i = 0; i < posted_.size(); ++i)
    if (!posted_[i].is_send) buffers[i].out();
  posted_.clear();
  launched_ = next_id_;
}

// NCCL's stream starts after the work queued on the compute stream so far: a
// send or a collective reads what a kernel wrote, as PyTorch's process groups
// order their NCCL streams. (The compute after it waits on the host, which
// synchronizes with the stream before it hands a buffer back.)
void NcclComm::after_compute() {
  check(cudaEventRecord(inputs_ready_, cudaStreamLegacy), who(), "cudaEventRecord");
  check(cudaStreamWaitEvent(stream_, inputs_ready_, 0), who(), "cudaStreamWaitEvent");
}

// Polls rather than blocking, so that a send nobody receives stops the run with
// a message instead of hanging it (NCCL itself waits forever).
void NcclComm::synchronize(std::string_view what, cudaEvent_t event) const {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(context().deadlock_timeout);
  for (;;) {
    const cudaError_t e = event ? cudaEventQuery(event) : cudaStreamQuery(stream_);
    if (e == cudaSuccess) return;
    if (e != cudaErrorNotReady) check(e, who(), what);
    if (std::chrono::steady_clock::now() > deadline)
      fail(who(), what, "no progress on the GPU in {} s: a deadlock? (a send no rank receives, or ranks calling "
           "collectives in different orders)", context().deadlock_timeout);
    std::this_thread::yield();
  }
}

std::string_view NcclComm::run_native(const CollectiveCall& c) { return wait_native(start_native(c)).algorithm; }

std::int64_t NcclComm::start_native(const CollectiveCall& c) {
  NativePending pending{c.op, now(), nullptr, [] {}};
  after_compute();
  const Counts counts = info(c.op).counts;
  const bool has_send = counts != Counts::in_place && counts != Counts::none;
  const OnDevice send(has_send ? c.send : View{}, true), recv(c.recv, true);
  const ncclDataType_t t = nccl_type(c.recv.dtype);
  const ncclRedOp_t op = nccl_op(c.reduce_op);
  const std::size_t n = c.recv.count, element = size_of(c.recv.dtype);
  auto at = [&](const OnDevice& b, std::size_t offset) { return static_cast<std::byte*>(b.data()) + offset * element; };
  switch (c.op) {
    case Collective::broadcast:
      check(ncclBroadcast(recv.data(), recv.data(), n, t, c.root, nccl_, stream_), who(), "ncclBroadcast");
      break;
    case Collective::reduce:
      check(ncclReduce(recv.data(), recv.data(), n, t, op, c.root, nccl_, stream_), who(), "ncclReduce");
      break;
    case Collective::all_reduce:
      check(ncclAllReduce(recv.data(), recv.data(), n, t, op, nccl_, stream_), who(), "ncclAllReduce");
      break;
    case Collective::all_gather:
      check(ncclAllGather(send.data(), recv.data(), c.send.count, t, nccl_, stream_), who(), "ncclAllGather");
      break;
    case Collective::reduce_scatter:
      check(ncclReduceScatter(send.data(), recv.data(), n, t, op, nccl_, stream_), who(), "ncclReduceScatter");
      break;
    // NCCL has no gather, scatter or all-to-all: grouped sends and receives, as its own docs build them.
    case Collective::gather: {  // every rank sends its block to the root, which receives them all
      const std::size_t block = c.send.count;
      check(ncclGroupStart(), who(), "ncclGroupStart");
      check(ncclSend(send.data(), block, t, c.root, nccl_, stream_), who(), "ncclSend");
      for (int peer = 0; rank() == c.root && peer < size(); ++peer)
        check(ncclRecv(at(recv, peer * block), block, t, peer, nccl_, stream_), who(), "ncclRecv");
      check(ncclGroupEnd(), who(), "ncclGroupEnd");
      break;
    }
    case Collective::scatter: {  // the root sends each rank its block
      check(ncclGroupStart(), who(), "ncclGroupStart");
      for (int peer = 0; rank() == c.root && peer < size(); ++peer)
        check(ncclSend(at(send, peer * n), n, t, peer, nccl_, stream_), who(), "ncclSend");
      check(ncclRecv(recv.data(), n, t, c.root, nccl_, stream_), who(), "ncclRecv");
      check(ncclGroupEnd(), who(), "ncclGroupEnd");
      break;
    }
    case Collective::all_to_all: {  // block p of every rank goes to rank p
      const std::size_t block = n / size();
      check(ncclGroupStart(), who(), "ncclGroupStart");
      for (int peer = 0; peer < size(); ++peer) {
        check(ncclSend(at(send, peer * block), block, t, peer, nccl_, stream_), who(), "ncclSend");
        check(ncclRecv(at(recv, peer * block), block, t, peer, nccl_, stream_), who(), "ncclRecv");
      }
      check(ncclGroupEnd(), who(), "ncclGroupEnd");
      break;
    }
    case Collective::all_to_allv: {  // the same, with each block where the counts before it end
      std::size_t sent = 0, received = 0;
      check(ncclGroupStart(), who(), "ncclGroupStart");
      for (int peer = 0; peer < size(); ++peer) {
        check(ncclSend(at(send, sent), c.send_counts[peer], t, peer, nccl_, stream_), who(), "ncclSend");
        check(ncclRecv(at(recv, received), c.recv_counts[peer], t, peer, nccl_, stream_), who(), "ncclRecv");
        sent += c.send_counts[peer], received += c.recv_counts[peer];
      }
      check(ncclGroupEnd(), who(), "ncclGroupEnd");
      break;
    }
    case Collective::barrier:  // NCCL has none: the stream drains, then MPI's
      synchronize("barrier");
      MPI_Barrier(mpi_comm());
      natives_.emplace(next_native_, std::move(pending));
      return next_native_++;
  }
  check(cudaEventCreateWithFlags(&pending.done, cudaEventDisableTiming), who(), "cudaEventCreate");
  check(cudaEventRecord(pending.done, stream_), who(), "cudaEventRecord");
  pending.copy_out = [send, recv] {  // holds a staged send buffer until the stream is done with it
    (void)send;
    recv.out();
  };
  natives_.emplace(next_native_, std::move(pending));
  return next_native_++;
}

Comm::NativeDone NcclComm::wait_native(std::int64_t id) {
  auto node = natives_.extract(id);
  NativePending& p = node.mapped();
  if (p.done) {
    synchronize(name_of(p.op), p.done);
    cudaEventDestroy(p.done);
  }
  p.copy_out();
  return {p.started, now(), p.op == Collective::barrier ? "mpi" : "nccl"};  // ended: when the host saw it done
}

bool NcclComm::test_native(std::int64_t id) {
  const NativePending& p = natives_.at(id);
  return !p.done || cudaEventQuery(p.done) != cudaErrorNotReady;
}

std::unique_ptr<Comm> NcclComm::split_group(int color, int key) {
  Split s = split_mpi(color, key);
  ncclComm_t sub = nullptr;
  check(ncclCommSplit(nccl_, color < 0 ? NCCL_SPLIT_NOCOLOR : color, key, &sub, nullptr), who(), "ncclCommSplit");
  if (s.comm == MPI_COMM_NULL) return nullptr;
  return std::make_unique<NcclComm>(s.comm, s.comm_id, s.members, track(), context(), sub);
}

std::unique_ptr<Comm> make_comm(MPI_Comm comm, Members members, TraceTrack* track, mpi::Context& context) {
  return std::make_unique<NcclComm>(comm, 0, std::move(members), track, context);
}

}  // namespace labkit::nccl
