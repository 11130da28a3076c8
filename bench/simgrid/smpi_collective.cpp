// The algorithms of labkit's solutions/collectives/, written again as a plain MPI program,
// for SimGrid's SMPI to time on the platform that stands for a labkit topology
// (./labkit simgrid). Only the messages matter here: sizes, peers and order are
// those of the labkit versions; no data is reduced (SMPI is told to charge no
// compute, as labkit's simulator charges none for reduce_local).
//
//   smpi_collective ALGORITHM BYTES
//   ALGORITHM: ring | recursive_halving_doubling | naive  (allreduce), pairwise (all-to-all)
//
// Prints the collective's simulated time in seconds: from the earliest rank's
// start to the latest rank's end. Needs a power-of-two rank count for
// recursive_halving_doubling and a BYTES that every chunk divides.
#include <mpi.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

// A rank's bytes: only the messages' sizes matter, so every buffer is SMPI's
// shared memory (SMPI_SHARED_MALLOC, all ranks on the same few pages), which
// SMPI neither allocates per rank nor copies from one rank to another. Copying
// 16 ranks' 16 MiB buffers took most of a run's time, and none of its result.
class Buffer {
 public:
  explicit Buffer(std::size_t size) : bytes_(static_cast<char*>(SMPI_SHARED_MALLOC(size))), size_(size) {}
  ~Buffer() { SMPI_SHARED_FREE(bytes_); }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  char* data() { return bytes_; }
  std::size_t size() const { return size_; }

 private:
  char* bytes_;
  std::size_t size_;
};

void exchange(Buffer& buf, long send_at, int to, long recv_at, int from, long bytes) {
  MPI_Sendrecv(buf.data() + send_at, int(bytes), MPI_BYTE, to, 0, buf.data() + recv_at, int(bytes), MPI_BYTE, from,
               0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
}

// solutions/collectives/ring_all_reduce.cpp: P-1 reduce-scatter steps, then P-1 all-gather steps, a chunk each.
void ring(Buffer& buf, int p, int rank) {
  const long chunk = long(buf.size()) / p;
  const int right = (rank + 1) % p, left = (rank - 1 + p) % p;
  Buffer incoming(chunk);
  const auto at = [&](int i) { return long((i % p + p) % p) * chunk; };
  for (int s = 0; s < p - 1; ++s)
    MPI_Sendrecv(buf.data() + at(rank - s), int(chunk), MPI_BYTE, right, 0, incoming.data(), int(chunk), MPI_BYTE,
                 left, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int s = 0; s < p - 1; ++s) exchange(buf, at(rank + 1 - s), right, at(rank - s), left, chunk);
}

// solutions/collectives/recursive_halving_doubling_all_reduce.cpp, P a power of two: halve the
// window at distances P/2 .. 1, then double it back at distances 1 .. P/2.
void recursive_halving_doubling(Buffer& buf, int p, int rank) {
  const long chunk = long(buf.size()) / p;
  Buffer incoming(buf.size());
  int lo = 0, hi = p;
  for (int distance = p / 2; distance >= 1; distance /= 2) {
    const int partner = rank ^ distance, mid = (lo + hi) / 2;
    const bool keep_low = (rank & distance) == 0;
    const int give_lo = keep_low ? mid : lo, give_hi = keep_low ? hi : mid;
    MPI_Sendrecv(buf.data() + give_lo * chunk, int((give_hi - give_lo) * chunk), MPI_BYTE, partner, 0,
                 incoming.data(), int((give_hi - give_lo) * chunk), MPI_BYTE, partner, 0, MPI_COMM_WORLD,
                 MPI_STATUS_IGNORE);
    (keep_low ? hi : lo) = mid;
  }
  for (int distance = 1; distance < p; distance *= 2) {
    const int partner = rank ^ distance, size = hi - lo;
    const int partner_lo = (rank & distance) == 0 ? hi : lo - size;
    exchange(buf, lo * chunk, partner, partner_lo * chunk, partner, size * chunk);
    lo = std::min(lo, partner_lo);
    hi = lo + 2 * size;
  }
}

// solutions/collectives/naive_all_reduce.cpp: everyone sends to rank 0, which receives in rank
// order and then sends the result to each in rank order.
void naive(Buffer& buf, int p, int rank) {
  const int bytes = int(buf.size());
  if (rank != 0) {
    MPI_Send(buf.data(), bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD);
    MPI_Recv(buf.data(), bytes, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    return;
  }
  Buffer incoming(buf.size());
  for (int from = 1; from < p; ++from)
    MPI_Recv(incoming.data(), bytes, MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  for (int to = 1; to < p; ++to) MPI_Send(buf.data(), bytes, MPI_BYTE, to, 0, MPI_COMM_WORLD);
}

// solutions/collectives/pairwise_all_to_all.cpp: in round s send block rank + s, receive block rank - s.
void pairwise(Buffer& buf, int p, int rank) {
  const long block = long(buf.size()) / p;
  Buffer recv(buf.size());
  for (int s = 1; s < p; ++s) {
    const int to = (rank + s) % p, from = (rank - s + p) % p;
    MPI_Sendrecv(buf.data() + to * block, int(block), MPI_BYTE, to, 0, recv.data() + from * block, int(block),
                 MPI_BYTE, from, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
  }
}

}  // namespace

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int p = 0, rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &p);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (argc != 3) {
    if (rank == 0) std::fprintf(stderr, "usage: smpi_collective ring|recursive_halving_doubling|naive|pairwise BYTES\n");
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const char* algorithm = argv[1];
  Buffer buf(std::strtoul(argv[2], nullptr, 10));
  const double start = MPI_Wtime();
  if (std::strcmp(algorithm, "ring") == 0) {
    ring(buf, p, rank);
  } else if (std::strcmp(algorithm, "recursive_halving_doubling") == 0) {
    recursive_halving_doubling(buf, p, rank);
  } else if (std::strcmp(algorithm, "naive") == 0) {
    naive(buf, p, rank);
  } else if (std::strcmp(algorithm, "pairwise") == 0) {
    pairwise(buf, p, rank);
  } else {
    if (rank == 0) std::fprintf(stderr, "smpi_collective: unknown algorithm %s\n", algorithm);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const double end = MPI_Wtime();
  double first_start = 0, last_end = 0;
  MPI_Reduce(&start, &first_start, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD);
  MPI_Reduce(&end, &last_end, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
  if (rank == 0) std::printf("%.12g\n", last_end - first_start);
  MPI_Finalize();
  return 0;
}
