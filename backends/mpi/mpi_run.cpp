// The MPI launcher: turns the processes mpirun started into labkit ranks, runs
// the lab's rank function on each, and merges the ranks' traces on rank 0.
#include "mpi_run.h"

#include <cstdlib>
#include <map>
#include <numeric>

#include <unistd.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "labkit/device.h"
#include "labkit/error.h"

namespace labkit::mpi {

namespace {
int world_rank() {
  int r = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
int world_size() {
  int n = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

// MPI_Init on the first run of the process, MPI_Finalize when it exits.
void ensure_initialized() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (initialized) return;
  MPI_Init(nullptr, nullptr);
  std::atexit([] {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) MPI_Finalize();
  });
}

// Rank 0's clock minus this process's. A rank on rank 0's host reads the same
// clock (host_clock): zero. Elsewhere by Cristian's algorithm (1989): ask rank 0
// for the time, and take the answer as read halfway through the shortest of
// several round trips (the one least disturbed), which is within half that
// round trip; on a loaded host that can be milliseconds, hence no guess where
// the clock is shared. The group's ranks are the first world ranks.
double offset_to_rank0(MPI_Comm comm, const std::vector<int>& node_of_world) {
  constexpr int kRoundTrips = 20;
  int me = 0, n = 0;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &n);
  double offset = 0;
  for (int r = 1; r < n; ++r) {
    if ((me != 0 && me != r) || node_of_world[r] == node_of_world[0]) continue;
    double best = 1e30;
    for (int k = 0; k < kRoundTrips; ++k) {
      if (me == 0) {
        MPI_Recv(nullptr, 0, MPI_BYTE, r, 0, comm, MPI_STATUS_IGNORE);
        const double t = host_clock();
        MPI_Send(&t, 1, MPI_DOUBLE, r, 0, comm);
      } else {
        const double t0 = host_clock();
        double root_time = 0;
        MPI_Send(nullptr, 0, MPI_BYTE, 0, 0, comm);
        MPI_Recv(&root_time, 1, MPI_DOUBLE, 0, 0, comm, MPI_STATUS_IGNORE);
        const double t1 = host_clock();
        if (t1 - t0 < best) {
          best = t1 - t0;
          offset = root_time - (t0 + best / 2);
        }
      }
    }
  }
  return offset;
}

// The node of every world rank: ranks that share memory share a node, numbered
// in order of their lowest world rank.
std::vector<int> nodes_of_world() {
  MPI_Comm local;
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank(), MPI_INFO_NULL, &local);
  int leader = world_rank();
  MPI_Bcast(&leader, 1, MPI_INT, 0, local);  // the node's lowest world rank
  MPI_Comm_free(&local);
  std::vector<int> leaders(world_size()), node(leaders.size());
  MPI_Allgather(&leader, 1, MPI_INT, leaders.data(), 1, MPI_INT, MPI_COMM_WORLD);
  std::map<int, int> number;  // leader -> node
  for (std::size_t r = 0; r < leaders.size(); ++r) node[r] = number.try_emplace(leaders[r], int(number.size())).first->second;
  return node;
}

// While it lives, each copy between the host and the rank's device memory (a
// GPU's under NCCL, or host staging) is an instant on the rank's trace, as the
// simulator marks its ranks' (labkit/device.h).
class HostCopies {
 public:
  HostCopies(TraceTrack* track, const Comm& comm) : track_(track), comm_(comm) {
    if (track_) observe_host_copies(&HostCopies::copied, this);
  }
  ~HostCopies() {
    if (track_) observe_host_copies(nullptr, nullptr);
  }
  HostCopies(const HostCopies&) = delete;
  HostCopies& operator=(const HostCopies&) = delete;

 private:
  static void copied(std::size_t bytes, bool to_host, void* self) {
    const HostCopies& h = *static_cast<HostCopies*>(self);
    h.track_->events.push_back(host_copy_event(h.comm_.now(), bytes, to_host));
  }
  TraceTrack* track_;
  const Comm& comm_;
};

nlohmann::json to_json(const TraceTrack& t, double shift) {
  nlohmann::json events = nlohmann::json::array();
  for (const TraceEvent& e : t.events)
    events.push_back({{"kind", int(e.kind)}, {"name", e.name}, {"start", e.start + shift}, {"end", e.end + shift},
                      {"peer", e.peer}, {"tag", e.tag}, {"bytes", e.bytes}, {"flow", e.flow}, {"args", e.args},
                      {"counters", e.counters}, {"on_stream", e.on_stream}});
  return events;
}

void from_json(const nlohmann::json& events, TraceTrack& t) {
  for (const nlohmann::json& e : events)
    t.events.push_back({TraceEvent::Kind(e["kind"].get<int>()), e["name"], e["start"], e["end"], e["peer"], e["tag"],
                        e["bytes"], e["flow"], e["args"], e["counters"], e["on_stream"]});
}

// Every rank's events, on rank 0's clock, gathered into rank 0's trace.
void merge_traces(MPI_Comm comm, Trace& trace, int me, double shift) {
  const std::string mine = to_json(trace.tracks()[me], shift).dump();
  int n = 0;
  MPI_Comm_size(comm, &n);
  const int length = int(mine.size());
  std::vector<int> lengths(n), offsets(n);
  MPI_Gather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, 0, comm);
  std::exclusive_scan(lengths.begin(), lengths.end(), offsets.begin(), 0);
  std::string all(me == 0 ? std::size_t(offsets.back() + lengths.back()) : 0, '\0');
  MPI_Gatherv(mine.data(), length, MPI_CHAR, all.data(), lengths.data(), offsets.data(), MPI_CHAR, 0, comm);
  if (me != 0) return;
  for (int r = 1; r < n; ++r) from_json(nlohmann::json::parse(all.substr(offsets[r], lengths[r])), *trace.track(r));
  for (TraceEvent& e : trace.track(0)->events) {
    e.start += shift;
    e.end += shift;
  }
}
}  // namespace

RunResult run(const RunOptions& o, const std::function<void(Comm&)>& rank_fn, const MakeComm& make_comm) {
  ensure_initialized();
  const int world = world_size(), me = world_rank();
  const int ranks = o.ranks_given ? o.ranks : world;
  if (ranks > world)
    throw Error(fmt::format("--backend {}: --ranks {} but {} (mpirun -np sets the ranks)", o.backend, ranks,
                            world == 1 ? std::string("one process runs, started without mpirun or with -np 1")
                                       : fmt::format("mpirun started {} processes", world)));
  if (o.fail_rank >= ranks)
    throw Error(fmt::format("--fail-rank {0}: there is no rank {0} among {1} ranks", o.fail_rank, ranks));
  // The lab's ranks are the first `ranks` processes; any others wait at the end.
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_Comm_split(MPI_COMM_WORLD, me < ranks ? 0 : MPI_UNDEFINED, me, &comm);
  Context context{.node_of_world = nodes_of_world(),
                  .check_arguments = o.check_arguments,
                  .deadlock_timeout = o.deadlock_timeout,
                  .pid_of_world = std::vector<int>(world),
                  .fail_rank = o.fail_rank,
                  .fail_at = o.fail_at};
  const int pid = getpid();
  MPI_Allgather(&pid, 1, MPI_INT, context.pid_of_world.data(), 1, MPI_INT, MPI_COMM_WORLD);
  RunResult result;
  if (comm != MPI_COMM_NULL) {
    set_process_rank(me);  // what an error outside the Comm (host memory) names
    auto members = std::make_shared<std::vector<int>>(ranks);
    std::iota(members->begin(), members->end(), 0);
    const bool tracing = o.keep_trace || !o.trace.empty();
    std::shared_ptr<Trace> trace = tracing ? std::make_shared<Trace>(ranks) : nullptr;
    const double offset = offset_to_rank0(comm, context.node_of_world);
    MPI_Barrier(comm);
    context.start = host_clock();
    double elapsed = 0;
    try {
      TraceTrack* track = tracing ? trace->track(me) : nullptr;
      const std::unique_ptr<Comm> c =
          make_comm ? make_comm(comm, members, track, context) : std::make_unique<MpiComm>(comm, 0, members, track, context);
      const HostCopies copies(track, *c);
      rank_fn(*c);
      elapsed = c->now();
    } catch (const std::exception& e) {
      // The other ranks may be waiting on this one: stop them all.
      fmt::print(stderr, "error: {}\n", e.what());
      std::fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    // Every process is here, --fail-rank's too: it finished before --at, and never failed.
    double fail_rank_finished = elapsed;
    if (o.fail_rank >= 0) MPI_Bcast(&fail_rank_finished, 1, MPI_DOUBLE, o.fail_rank, comm);
    MPI_Allreduce(MPI_IN_PLACE, &elapsed, 1, MPI_DOUBLE, MPI_MAX, comm);
    MPI_Allreduce(MPI_IN_PLACE, &context.messages, 1, MPI_UINT64_T, MPI_SUM, comm);
    if (tracing) {
      // Time zero of the merged trace is rank 0's start, on rank 0's clock.
      double root_start = context.start;
      MPI_Bcast(&root_start, 1, MPI_DOUBLE, 0, comm);
      merge_traces(comm, *trace, me, context.start + offset - root_start);
      if (me == 0 && !o.trace.empty()) trace->write_chrome_json(o.trace, "mpi");
    }
    MPI_Comm_free(&comm);
    result = {elapsed, context.messages, me == 0 ? trace : nullptr, o.fail_rank >= 0 ? fail_rank_finished : -1};
  }
  MPI_Barrier(MPI_COMM_WORLD);
  return result;
}

}  // namespace labkit::mpi
