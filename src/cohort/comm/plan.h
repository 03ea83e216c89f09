// PlanSink: where an algorithm's exchanges go when they are to be planned rather than run.
//
// Every collective algorithm moves bytes only through OpContext::run and computes only through
// OpContext::reduce and ::divide (and an Encoding's calls, for the compressed ones). A context
// with a PlanSink hands each exchange's plans to the sink instead of to exchange() and tells it
// how much work each reduction would have been instead of doing it: the simulator (sim/) runs
// the very algorithms the communicator runs this way, rank by rank, over a mesh that carries
// nothing (Mesh's planning constructor), and so sees the exact schedule - peers, segments, their
// sizes and pipelining gates, and where each reduction falls - of any world it is asked about.
#pragma once

#include <cstddef>

#include "cohort/comm/exchange.h"

namespace cohort::comm {

// The kinds of local work an algorithm does on the bytes it moves.
enum class WorkKind : unsigned char {
  Reduce,     // an element-wise reduction kernel over `bytes` of output
  Divide,     // Avg's division
  Encode,     // a compact format's encoding of `bytes` of f32 input
  Decode,     // its decoding (or decoding into a sum) into `bytes` of f32
};

class PlanSink {
 public:
  virtual ~PlanSink() = default;
  // One exchange of the operation (either plan may be null), peers as mesh ranks. The plans and
  // what their functions capture live only during the call. A sink learns the segments' sizes
  // from segment(i) and must not read or write through the pointers it returns; it may call
  // on_segment(i), which then reports its work to work() instead of doing it.
  virtual void exchange(const SendPlan* send, const RecvPlan* recv) = 0;
  // Local work the algorithm would do now: `bytes` through a kernel of `kind`.
  virtual void work(WorkKind kind, size_t bytes) = 0;
};

}  // namespace cohort::comm
