// EXERCISE 8.2
// What passes between pipeline stages: the residual stream, b x s x h values
// per micro-batch. A stage running layers [first, last) of the model takes
// its input in the output of layer first - 1 and hands on the output of
// layer last - 1; backward, the gradient of its output arrives in that
// output's gradient and it hands on the gradient of its input
// (Gpt::stream(l) is layer l's output, stream(-1) the embeddings'; stream_grad(l)
// their gradients, all in the activation set of the micro-batch in hand).
//
//   receive_activation   into stream(first - 1), from the stage before
//   send_activation      stream(last - 1), to the stage after
//   receive_gradient     into stream_grad(last - 1), from the stage after
//   send_gradient        stream_grad(first - 1), to the stage before
//
// A receive blocks until its message is in place: the forward or backward
// after it reads it. A send does not: the stage goes on computing while the
// message travels, and returns the Request that the executor waits on
// before it reuses the buffer.
//
// peer_of(s, a) is the stage at the other end, tag_of(s, a) the tag both ends
// use; view_of(span) a Comm view of a buffer; pp.recv(view, from, tag),
// pp.isend(view, to, tag). Grade it: ./labkit grade pipeline; run the lab on it: ./labkit mine pipeline
#include "labkit/error.h"
#include "labkit/parallel/pipeline_executor.h"

namespace labkit {

Request pipeline_exchange(Comm& pp, const Schedule& s, const PipeAction& a, Gpt& model, int first, int last) {
  // TODO: the buffer each of the four actions reads or fills, its peer and tag; a blocking
  //       receive (return an empty Request()) or a non-blocking send (return its Request).
  (void)pp, (void)s, (void)a, (void)model, (void)first, (void)last;
  return Request();
}

}  // namespace labkit
