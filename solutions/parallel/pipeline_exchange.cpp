// STUB: // EXERCISE 8.2
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
// STUB: //
// STUB: // peer_of(s, a) is the stage at the other end, tag_of(s, a) the tag both ends
// STUB: // use; view_of(span) a Comm view of a buffer; pp.recv(view, from, tag),
// STUB: // pp.isend(view, to, tag). Grade it: ./labkit grade pipeline; run the lab on it: ./labkit mine pipeline
#include "labkit/error.h"
#include "labkit/parallel/pipeline_executor.h"

namespace labkit {

Request pipeline_exchange(Comm& pp, const Schedule& s, const PipeAction& a, Gpt& model, int first, int last) {
  // BEGIN EXERCISE: the buffer each of the four actions reads or fills, its peer and tag; a blocking
  //       receive (return an empty Request()) or a non-blocking send (return its Request).
  // STUB: (void)pp, (void)s, (void)a, (void)model, (void)first, (void)last;
  // STUB: return Request();
  const int peer = peer_of(s, a), tag = tag_of(s, a);
  switch (a.op) {
    case PipeOp::receive_activation: pp.recv(view_of(model.stream(first - 1)), peer, tag); return Request();
    case PipeOp::receive_gradient: pp.recv(view_of(model.stream_grad(last - 1)), peer, tag); return Request();
    case PipeOp::send_activation: return pp.isend(view_of(model.stream(last - 1)), peer, tag);
    case PipeOp::send_gradient: return pp.isend(view_of(model.stream_grad(first - 1)), peer, tag);
    default: throw Error(fmt::format("{}: pipeline_exchange: {} is no send or receive", pp.who(), name_of(a.op)));
  }
  // END EXERCISE
}

}  // namespace labkit
