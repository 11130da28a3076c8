// labkit::Comm on Open MPI: each rank is a process under mpirun. Point-to-point
// is MPI_Issend/MPI_Irecv on bytes (a synchronous send, so a blocking send
// completes on delivery as on the simulator, and a program that deadlocks there
// deadlocks here: a wait that makes no progress for the deadlock timeout stops
// the run and says which rank waits on whom; a wait on a peer whose process is
// gone throws a RankFailedError, as the simulator does). Native collectives are Open MPI's
// non-blocking ones (MPI-3's MPI_Iallreduce and kin: a blocking call starts one
// and waits); labkit algorithms run over the point-to-point above, and a labkit
// algorithm started non-blocking runs at once (MPI has no stream to put it on). Time is the host's
// monotonic clock, shifted onto rank 0's when the trace is merged (offset_to_rank0 in mpi_run.cpp).
#pragma once

#include <chrono>
#include <functional>
#include <map>

#include <mpi.h>

#include "host_staging.h"
#include "labkit/comm.h"

namespace labkit::mpi {

// Seconds on the host's monotonic clock (CLOCK_MONOTONIC), which every process
// on a host reads alike; MPI_Wtime may count from each process's MPI_Init.
inline double host_clock() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// What every Comm of one run shares (the world's and the groups split from it).
struct Context {
  double start = 0;               // host_clock() at the run's start
  std::vector<int> node_of_world;  // the node of each world rank
  bool check_arguments = true;    // cross-rank argument checks (one small allgather per collective)
  double deadlock_timeout = 60;   // seconds a wait may make no progress
  std::uint64_t messages = 0;     // point-to-point messages this rank sent
  std::vector<int> pid_of_world;  // each world rank's process, to see a peer on this host die
  int fail_rank = -1;             // --fail-rank: this world rank kills its process once now() passes fail_at
  double fail_at = 0;
};

class MpiComm : public Comm {
 public:
  // comm_id 0 is the run's group, which the launcher owns; split groups are freed here.
  MpiComm(MPI_Comm comm, int comm_id, Members members, TraceTrack* track, Context& context);
  ~MpiComm() override;

  double now() const override { return host_clock() - context_.start; }

 protected:
  std::int64_t post_send(View buf, int to, int tag) override;
  std::int64_t post_recv(View buf, int from, int tag) override;
  void wait_request(std::int64_t id) override;
  bool test_request(std::int64_t id) override;
  void check_collective(const CollectiveCall& call) override;
  void check_counts(const CollectiveCall& call);
  std::string_view run_native(const CollectiveCall& call) override;
  std::int64_t start_native(const CollectiveCall& call) override;
  NativeDone wait_native(std::int64_t id) override;
  bool test_native(std::int64_t id) override;
  std::unique_ptr<Comm> split_group(int color, int key) override;
  void advance(double seconds) override;
  int node_of_global(int global_rank) const override { return context_.node_of_world.at(global_rank); }
  double seconds_for_flops(double) const override { return 0; }  // real work takes its real time
  std::vector<std::vector<std::byte>> gather_untimed(View buf) override;

  // A sub-group as MPI_Comm_split makes it, named alike on its members and apart
  // from its siblings; comm is MPI_COMM_NULL for a negative color.
  struct Split {
    MPI_Comm comm;
    int comm_id;
    Members members;
  };
  Split split_mpi(int color, int key);
  MPI_Comm mpi_comm() const { return comm_; }
  Context& context() const { return context_; }

 private:
  struct Pending {
    MPI_Request request;
    bool is_send;
    int peer, tag;
    std::size_t bytes;
    HostStaging staged;  // a device buffer's host copy (host_staging.h)
  };
  // MPI_Test until `request` completes; now and then checks that `peer` (-1:
  // every rank of the group) is alive, and calls `stalled` past the deadlock timeout.
  void poll(MPI_Request& request, MPI_Status* status, std::string_view op, int peer,
            const std::function<void()>& stalled);
  void check_alive(int peer, std::string_view op) const;
  void die_if_due() const;
  MPI_Comm comm_;
  int comm_id_;
  Context& context_;
  std::map<std::int64_t, Pending> pending_;
  struct NativePending {
    MPI_Request request;
    Collective op;
    double started;
    std::vector<int> counts_and_displacements;  // all_to_allv's, which MPI reads until it completes
    HostStaging send, recv;                     // device buffers' host copies (host_staging.h)
  };
  std::map<std::int64_t, NativePending> natives_;
  std::int64_t next_id_ = 0;
  int splits_ = 0;
};

// MPI's datatype and operator for labkit's.
MPI_Datatype mpi_type(DType dtype);
MPI_Op mpi_op(ReduceOp op, DType dtype);

}  // namespace labkit::mpi
