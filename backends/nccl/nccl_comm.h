// labkit::Comm on NCCL: one rank per GPU, the processes under mpirun. MPI
// carries the control (the NCCL unique id, argument checks, gather_object, the
// trace's merge); NCCL carries the data, on one CUDA stream per group: its
// communication stream. Native collectives are NCCL's, enqueued there with an
// event recorded after each, so the host goes on at once and a wait polls the
// event (no host sync per call; time is the host's clock, as on MPI). labkit's algorithms run over
// ncclSend/ncclRecv: the sends and receives a rank posts wait, and go out
// together in one ncclGroupStart/ncclGroupEnd at the rank's next wait, which
// is what lets a ring's send and receive proceed instead of deadlocking. Their
// reductions run on the GPU (reduce_local finds the buffers there). A buffer in
// host memory (a lab's std::vector) is staged through device memory.
#pragma once

#include <functional>
#include <map>

#include <cuda_runtime.h>
#include <nccl.h>

#include "mpi/mpi_comm.h"

namespace labkit::nccl {

class NcclComm final : public mpi::MpiComm {
 public:
  // The run's group (comm_id 0) picks this process's GPU and makes the NCCL
  // communicator; a split group gets its communicator from ncclCommSplit.
  NcclComm(MPI_Comm comm, int comm_id, Members members, TraceTrack* track, mpi::Context& context,
           ncclComm_t nccl = nullptr);
  ~NcclComm() override;

 protected:
  std::int64_t post_send(View buf, int to, int tag) override;
  std::int64_t post_recv(View buf, int from, int tag) override;
  void wait_request(std::int64_t id) override;
  bool test_request(std::int64_t id) override;
  std::string_view run_native(const CollectiveCall& call) override;
  std::int64_t start_native(const CollectiveCall& call) override;
  NativeDone wait_native(std::int64_t id) override;
  bool test_native(std::int64_t id) override;
  std::unique_ptr<Comm> split_group(int color, int key) override;

 private:
  struct Posted {
    bool is_send;
    View buf;
    int peer;
  };
  // A native collective on the stream: the event recorded after it, and what
  // copies a host buffer's result back once it is done.
  struct NativePending {
    Collective op;
    double started;
    cudaEvent_t done;
    std::function<void()> copy_out;
  };
  void launch();                      // the posted sends and receives, as one group
  void after_compute();               // NCCL's stream waits for the compute stream's work so far
  // Wait for the stream (or only for `event` on it), or fail after the deadlock timeout.
  void synchronize(std::string_view what, cudaEvent_t event = nullptr) const;

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t inputs_ready_ = nullptr;  // recorded on the compute stream before each collective and send
  std::vector<Posted> posted_;
  std::map<std::int64_t, NativePending> natives_;
  std::int64_t next_native_ = 0;
  std::int64_t next_id_ = 0, launched_ = 0;  // ids below launched_ are complete
};

// Makes the run's NcclComm (for mpi::run).
std::unique_ptr<Comm> make_comm(MPI_Comm comm, Members members, TraceTrack* track, mpi::Context& context);

}  // namespace labkit::nccl
