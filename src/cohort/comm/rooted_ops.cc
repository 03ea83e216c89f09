// The communicator's reduce, gather, scatter and all_to_all: their arguments checked on the
// caller's thread, then queued like every collective (the algorithms are in rooted.cc).
#include "cohort/comm/reduce.h"
#include "cohort/comm/tcp_communicator.h"

namespace cohort::comm {

namespace {

void check_root(const char* op, int root, int size) {
  if (root < 0 || root >= size) {
    throw ConfigError(std::string(op) + ": root " + std::to_string(root) +
                      " is not a rank of a world of " + std::to_string(size));
  }
}

// The root's `whole` must hold size blocks of `block`.
void check_root_buffer(const char* op, const char* name, Buffer whole, Buffer block, int size) {
  if (whole.dtype == block.dtype && whole.count == block.count * static_cast<size_t>(size)) return;
  throw ConfigError(std::string(op) + ": the root's " + name + " must hold " +
                    std::to_string(size) + " x " + std::to_string(block.count) + " " +
                    std::string(dtype_name(block.dtype)) + " elements, got " +
                    std::to_string(whole.count) + " " + std::string(dtype_name(whole.dtype)));
}

// Counts per rank (or equal blocks of `total`) as the layout of one direction.
void lay_out(const char* op, const char* side, const std::vector<size_t>& counts, size_t total,
             int size, std::vector<size_t>* out_counts, std::vector<size_t>* out_offsets) {
  const auto n = static_cast<size_t>(size);
  if (counts.empty()) {
    if (total % n != 0) {
      throw ConfigError(std::string(op) + ": " + side + " of " + std::to_string(total) +
                        " elements does not split into " + std::to_string(size) +
                        " equal blocks; give its counts");
    }
    out_counts->assign(n, total / n);
  } else if (counts.size() != n) {
    throw ConfigError(std::string(op) + ": " + std::to_string(counts.size()) + " " + side +
                      " counts for a world of " + std::to_string(size));
  } else {
    *out_counts = counts;
  }
  out_offsets->resize(n);
  size_t off = 0;
  for (size_t r = 0; r < n; ++r) {
    (*out_offsets)[r] = off;
    off += (*out_counts)[r];
  }
  if (off != total) {
    throw ConfigError(std::string(op) + ": the " + side + " counts add up to " +
                      std::to_string(off) + " elements, the buffer holds " + std::to_string(total));
  }
}

}  // namespace

std::shared_ptr<Work> TcpCommunicator::reduce(Buffer buf, const ReduceOptions& opts) {
  check_buffer("reduce", buf);
  check_root("reduce", opts.root, size());
  check_reduction(buf.dtype, opts.op, "reduce");
  const ReduceOp op = opts.op;
  const int root = opts.root;
  Op shape;
  shape.count = buf.count;
  shape.detail = (root << 8) | static_cast<int>(op);
  return enqueue(
      OpKind::Reduce, buf.dtype, buf.bytes(), opts.timeout,
      [buf, op, root](OpContext& ctx) { reduce_to_root(ctx, buf, op, root); }, 0, -1, "", &shape);
}

std::shared_ptr<Work> TcpCommunicator::gather(Buffer in, Buffer out, const RootedOptions& opts) {
  check_buffer("gather", in);
  check_root("gather", opts.root, size());
  if (rank() == opts.root) {
    check_buffer("gather", out);
    check_root_buffer("gather", "out", out, in, size());
  }
  const int root = opts.root;
  Op shape;
  shape.count = in.count;
  shape.detail = root;
  return enqueue(
      OpKind::Gather, in.dtype, in.bytes(), opts.timeout,
      [in, out, root](OpContext& ctx) { gather_to_root(ctx, in, out, root); }, 0, -1, "", &shape);
}

std::shared_ptr<Work> TcpCommunicator::scatter(Buffer in, Buffer out, const RootedOptions& opts) {
  check_buffer("scatter", out);
  check_root("scatter", opts.root, size());
  if (rank() == opts.root) {
    check_buffer("scatter", in);
    check_root_buffer("scatter", "in", in, out, size());
  }
  const int root = opts.root;
  Op shape;
  shape.count = out.count;
  shape.detail = root;
  return enqueue(
      OpKind::Scatter, out.dtype, out.bytes(), opts.timeout,
      [in, out, root](OpContext& ctx) { scatter_from_root(ctx, in, out, root); }, 0, -1, "",
      &shape);
}

std::shared_ptr<Work> TcpCommunicator::all_to_all(Buffer in, Buffer out,
                                                  const AllToAllOptions& opts) {
  check_buffer("all_to_all", in);
  check_buffer("all_to_all", out);
  if (in.dtype != out.dtype) {
    throw ConfigError("all_to_all: in is " + std::string(dtype_name(in.dtype)) + ", out " +
                      std::string(dtype_name(out.dtype)));
  }
  AllToAllLayout layout;
  lay_out("all_to_all", "in", opts.send_counts, in.count, size(), &layout.send_counts,
          &layout.send_offsets);
  lay_out("all_to_all", "out", opts.recv_counts, out.count, size(), &layout.recv_counts,
          &layout.recv_offsets);
  Op shape;
  shape.count = in.count;  // ranks may send different totals: compared only for equal blocks
  if (!opts.send_counts.empty() || !opts.recv_counts.empty()) shape.count = 0;
  return enqueue(
      OpKind::AllToAll, in.dtype, std::max(in.bytes(), out.bytes()), opts.timeout,
      [in, out, layout = std::move(layout)](OpContext& ctx) {
        comm::all_to_all(ctx, in, out, layout);
      },
      0, -1, "", &shape);
}

}  // namespace cohort::comm
