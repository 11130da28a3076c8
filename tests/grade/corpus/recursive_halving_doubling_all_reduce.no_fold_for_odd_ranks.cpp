// Grader corpus: recursive_halving_doubling_all_reduce with a mistake learners make: leaves out the fold: ranks past the largest power of two are never reduced.
#include "labkit/algorithms.h"

namespace labkit {

void recursive_halving_doubling_all_reduce(Comm& comm, View buf, ReduceOp op) {
  const int p = comm.size(), rank = comm.rank();
  const int pow2 = std::bit_floor(unsigned(p)), rem = 0;
  if (rank >= pow2) return;
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
  // All-gather by recursive doubling: swap windows, which are neighbours.
  for (int distance = 1; distance < pow2; distance *= 2) {
    const int partner = me ^ distance, size = hi - lo;
    const int partner_lo = (me & distance) == 0 ? hi : lo - size;
    comm.sendrecv(window(lo, hi), real(partner), window(partner_lo, partner_lo + size), real(partner));
    lo = std::min(lo, partner_lo);
    hi = lo + 2 * size;
  }
  // Unfold: hand the result to the even partner that sat out.
  if (rank < 2 * rem) comm.send(buf, rank - 1);
}

}  // namespace labkit
