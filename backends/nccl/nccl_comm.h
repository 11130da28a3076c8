// labkit::Comm on NCCL: one rank per GPU, the processes under mpirun. MPI
// carries the control (the NCCL unique id, argument checks, inspect, the
// trace's merge); NCCL carries the data, on one CUDA stream per rank, timed
// with CUDA events. Native collectives are NCCL's. labkit's algorithms run over
// ncclSend/ncclRecv: the sends and receives a rank posts wait, and go out
// together in one ncclGroupStart/ncclGroupEnd at the rank's next wait, which
// is what lets a ring's send and receive proceed instead of deadlocking. Their
// reductions run on the GPU (reduce_local finds the buffers there). A buffer in
// host memory (a lab's std::vector) is staged through device memory.
#pragma once

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

  double now() const override;  // seconds since the group's start, by CUDA events on its stream

 protected:
  std::int64_t post_send(View buf, int to, int tag) override;
  std::int64_t post_recv(View buf, int from, int tag) override;
  void wait_request(std::int64_t id) override;
  bool test_request(std::int64_t id) override;
  std::string_view run_native(const CollectiveCall& call) override;
  std::unique_ptr<Comm> split_group(int color, int key) override;

 private:
  struct Posted {
    bool is_send;
    View buf;
    int peer;
  };
  void launch();                      // the posted sends and receives, as one group
  void synchronize(std::string_view what) const;  // wait for the stream, or fail after the deadlock timeout

  ncclComm_t nccl_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr, mark_ = nullptr;
  std::vector<Posted> posted_;
  std::int64_t next_id_ = 0, launched_ = 0;  // ids below launched_ are complete
};

// Makes the run's NcclComm (for mpi::run).
std::unique_ptr<Comm> make_comm(MPI_Comm comm, Members members, TraceTrack* track, mpi::Context& context);

}  // namespace labkit::nccl
