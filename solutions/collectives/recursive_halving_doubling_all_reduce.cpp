// STUB: // EXERCISE 2.2
// Recursive halving-doubling allreduce (Rabenseifner 2004; Thakur, Rabenseifner
// & Gropp 2005, "Optimization of Collective Communication Operations in MPICH").
//
// Reduce-scatter by recursive halving: partners at distance P/2, P/4, ..., 1
// swap halves of their current window; each keeps the half its bit selects and
// reduces the partner's copy into it. After log2 P steps rank r owns chunk r.
// All-gather by recursive doubling: distances 1, 2, ..., P/2, windows double.
//
//   P = 8, halving         doubling
//   dist 4: 0↔4 1↔5 ...    dist 1: 0↔1 2↔3 ...
//   dist 2: 0↔2 1↔3 ...    dist 2: 0↔2 1↔3 ...
//   dist 1: 0↔1 2↔3 ...    dist 4: 0↔4 1↔5 ...
//
// P not a power of two: with P' the largest power of two below P and
// rem = P - P', the first 2 rem ranks fold in pairs (even sends its buffer to
// odd, which reduces), P' ranks run the algorithm, and the odd ranks hand the
// result back at the end.
// STUB: // The fold and unfold are written for you.
// Cost: 2 log2 P' alpha + 2 (P'-1)/P' n beta, plus 2 (alpha + n beta) if P != P'.
// STUB: // Grade it: ./labkit grade ring_allreduce; run the lab on it: ./labkit mine ring_allreduce
#include "labkit/algorithms.h"

namespace labkit {

void recursive_halving_doubling_all_reduce(Comm& comm, View buf, ReduceOp op) {
  const int p = comm.size(), rank = comm.rank();
  const int pow2 = std::bit_floor(unsigned(p)), rem = p - pow2;
  Scratch incoming(buf, buf.count);

  // Fold: ranks below 2 rem pair up; the even one hands its data to the odd one.
  if (rank < 2 * rem) {
    if (rank % 2 == 0) {
      comm.send(buf, rank + 1);
      comm.recv(buf, rank + 1);  // unfold: the result comes back at the end
      return;
    }
    comm.recv(incoming.view(), rank - 1);
    reduce_local(op, buf.dtype, incoming.view().data, buf.data, buf.count);
  }
  // Ranks among the P' that take part, and back again.
  const int me = rank < 2 * rem ? rank / 2 : rank - rem;
  auto real = [&](int v) { return v < rem ? 2 * v + 1 : v + rem; };
  // Elements of chunks [lo, hi) when the buffer is cut into P' chunks.
  auto window = [&](int lo, int hi) {
    const std::size_t begin = chunk_range(buf.count, pow2, lo).offset;
    const Chunk last = chunk_range(buf.count, pow2, hi - 1);
    return buf.slice(begin, last.offset + last.count - begin);
  };

  // Reduce-scatter by recursive halving.
  int lo = 0, hi = pow2;
  // BEGIN EXERCISE: for distance = P'/2 down to 1: partner = me ^ distance, mid = (lo + hi) / 2.
  //       Keep window(lo, mid) if your bit (me & distance) is 0, else window(mid, hi);
  //       sendrecv the other half to real(partner), receive its copy of your half into the
  //       first keep.count elements of incoming (incoming.view().slice(0, keep.count): a receive
  //       takes exactly the size sent, and the halves differ when P' does not divide the count),
  //       reduce it into your half, and shrink [lo, hi) to the half you kept.
  // STUB: (void)me, (void)real, (void)window;
  for (int distance = pow2 / 2; distance >= 1; distance /= 2) {
    const int partner = me ^ distance, mid = (lo + hi) / 2;
    const bool keep_low = (me & distance) == 0;
    const View keep = keep_low ? window(lo, mid) : window(mid, hi);
    const View give = keep_low ? window(mid, hi) : window(lo, mid);
    const View landing = incoming.view().slice(0, keep.count);
    comm.sendrecv(give, real(partner), landing, real(partner));
    reduce_local(op, buf.dtype, landing.data, keep.data, keep.count);
    (keep_low ? hi : lo) = mid;
  }
  // END EXERCISE
  // All-gather by recursive doubling: swap windows, which are neighbours.
  // BEGIN EXERCISE: for distance = 1 up to P'/2: send window(lo, hi) to real(partner) and receive
  //       the partner's window of the same number of chunks (just above yours if your
  //       bit is 0, just below if it is 1); then [lo, hi) covers both.
  // STUB: (void)lo, (void)hi;
  for (int distance = 1; distance < pow2; distance *= 2) {
    const int partner = me ^ distance, size = hi - lo;
    const int partner_lo = (me & distance) == 0 ? hi : lo - size;
    comm.sendrecv(window(lo, hi), real(partner), window(partner_lo, partner_lo + size), real(partner));
    lo = std::min(lo, partner_lo);
    hi = lo + 2 * size;
  }
  // END EXERCISE
  // Unfold: hand the result to the even partner that sat out.
  if (rank < 2 * rem) comm.send(buf, rank - 1);
}

}  // namespace labkit
