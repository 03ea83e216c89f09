// Hierarchical allreduce: within each host, then across hosts, then within each host again, as
// Horovod's hierarchical allreduce does, with every local rank working across hosts at once.
//
//   1. Reduce-scatter among the L ranks of each host (the ring's first n - 1 steps, over shared
//      memory where the host has it): local rank l then holds its host's sum of block (l + 1) mod L
//      of the buffer cut into L blocks.
//   2. Each piece of the buffer is allreduced among the ranks that hold it, one per host, with the
//      flat algorithm Auto picks for its size and the number of hosts. On hosts of equal size the
//      pieces are the L blocks and local rank l of every host works on the same one, so L
//      allreduces of S / L run across hosts at once, each over its own links.
//   3. Allgather among the ranks of each host (the ring's last n - 1 steps).
// Each host link then carries 2(H - 1)/H of the buffer each way (H hosts), against the flat ring's
// 2(n - 1)/n when its ranks are ordered host by host, and more when they are not.
//
// Hosts with different numbers of ranks cut the buffer differently. The pieces of step 2 are then
// the ranges between consecutive block boundaries of any host: each range lies in one block of
// every host, so it has one holder per host. Adjacent ranges with the same holders are merged. A
// rank holding several pieces allreduces them in the order of the buffer, as every other holder
// does, so no two ranks wait for each other in a cycle (the earliest piece still pending has all
// its holders at it). Avg sums throughout and divides once, after step 2. Every rank ends with
// the same bits: each piece is reduced once across hosts and copied everywhere else.
#include <algorithm>

#include "cohort/comm/algorithms.h"
#include "cohort/comm/reduce.h"

namespace cohort::comm {
namespace {

struct Piece {
  size_t off = 0;
  size_t len = 0;
  std::vector<int> holders;  // mesh ranks, one per host in host order
};

// The context's members grouped by host, hosts in the order of their first member.
std::vector<std::vector<int>> members_by_host(const OpContext& ctx) {
  std::vector<std::vector<int>> hosts;
  std::vector<int> slot(static_cast<size_t>(ctx.mesh.hosts()), -1);  // mesh host -> hosts[i]
  for (int i = 0; i < ctx.size(); ++i) {
    const int m = ctx.mesh_rank(i);
    int& h = slot[static_cast<size_t>(ctx.mesh.host_of(m))];
    if (h < 0) {
      h = static_cast<int>(hosts.size());
      hosts.emplace_back();
    }
    hosts[static_cast<size_t>(h)].push_back(m);
  }
  return hosts;
}

std::vector<Piece> pieces_of(size_t count, const std::vector<std::vector<int>>& hosts) {
  std::vector<size_t> cuts;
  for (const auto& h : hosts) {
    const Blocks b{count, h.size()};
    for (size_t i = 0; i <= h.size(); ++i) cuts.push_back(b.offset(i));
  }
  std::sort(cuts.begin(), cuts.end());
  cuts.erase(std::unique(cuts.begin(), cuts.end()), cuts.end());
  std::vector<Piece> pieces;
  for (size_t c = 0; c + 1 < cuts.size(); ++c) {
    Piece p{.off = cuts[c], .len = cuts[c + 1] - cuts[c]};
    for (const auto& h : hosts) {
      const size_t L = h.size();
      const Blocks b{count, L};
      // The block of this host that holds p.off, and the local rank that the reduce-scatter
      // leaves holding it.
      size_t block = 0;
      while (b.offset(block + 1) <= p.off) ++block;
      p.holders.push_back(h[(block + L - 1) % L]);
    }
    if (!pieces.empty() && pieces.back().holders == p.holders) {
      pieces.back().len += p.len;
    } else {
      pieces.push_back(std::move(p));
    }
  }
  return pieces;
}

}  // namespace

void allreduce_hierarchical(OpContext& ctx, Buffer buf, ReduceOp op) {
  const int n = ctx.size();
  if (n == 1 || buf.count == 0) return;
  const std::vector<std::vector<int>> hosts = members_by_host(ctx);
  const int me = ctx.mesh.rank();
  const auto mine = std::find_if(hosts.begin(), hosts.end(), [&](const std::vector<int>& h) {
    return std::find(h.begin(), h.end(), me) != h.end();
  });
  const std::vector<int>& local = *mine;
  const int L = static_cast<int>(local.size());
  const ReduceOp summing = op == ReduceOp::Avg ? ReduceOp::Sum : op;
  OpContext in_host = ctx.within(local);

  ring_steps(in_host, buf, summing, 0, L - 1);

  const size_t es = dtype_size(buf.dtype);
  if (hosts.size() > 1) {
    for (const Piece& p : pieces_of(buf.count, hosts)) {
      if (std::find(p.holders.begin(), p.holders.end(), me) == p.holders.end()) continue;
      OpContext across = ctx.within(p.holders);
      const Buffer piece{buf.dtype, buf.byte_ptr() + p.off * es, p.len};
      const int H = static_cast<int>(hosts.size());
      allreduce_flat(across, piece, summing,
                     choose_allreduce(piece.bytes(), WorldShape{.size = H, .hosts = H}));
    }
  }
  if (op == ReduceOp::Avg) {
    const Blocks blocks{buf.count, static_cast<size_t>(L)};
    const size_t held = static_cast<size_t>((in_host.rank() + 1) % L);
    ctx.divide(buf.dtype, buf.byte_ptr() + blocks.offset(held) * es, blocks.length(held), n);
  }

  ring_steps(in_host, buf, op, L - 1, L - 1);
}

}  // namespace cohort::comm
