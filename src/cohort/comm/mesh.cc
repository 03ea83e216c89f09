#include "cohort/comm/mesh.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <thread>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/comm/exchange.h"
#include "cohort/comm/mesh_doorman.h"
#include "cohort/comm/mesh_lazy.h"
#include "cohort/comm/mesh_pairs.h"
#include "cohort/net/descriptors.h"

namespace cohort::comm {

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

namespace {

// Setup of one rank's connections: dial every lower rank, accept every higher one.
class Setup {
 public:
  Setup(store::Store& store, const CommConfig& o)
      : store_(store),
        o_(o),
        deadline_(Deadline::after(o.timeout)),
        me_(info_of(o)),
        links_(static_cast<size_t>(o.size)),
        connected_(static_cast<size_t>(o.size), false) {
    connected_[static_cast<size_t>(o.rank)] = true;
  }

  std::vector<PeerLink> run() {
    Doorman door(o_, me_, net::Listener::bind(o_.bind_host, 0, kListenBacklog));
    publish_address(store_, o_, door.port());
    for (int j = 0; j < o_.rank; ++j) dial(j);
    accept_all(door);
    return std::move(links_);
  }

  Deadline deadline() const { return deadline_; }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    std::vector<int> missing;
    for (int r = 0; r < o_.size; ++r) {
      if (!connected_[static_cast<size_t>(r)]) missing.push_back(r);
    }
    throw TimeoutError("communicator setup: rank " + std::to_string(o_.rank) + " of " +
                       std::to_string(o_.size) + " timed out after " +
                       std::to_string(o_.timeout.count()) +
                       " ms; ranks never connected: " + join_ranks(missing) + " (" + why + ")");
  }

  void dial(int j) {
    try {
      links_[static_cast<size_t>(j)] = dial_peer(store_, o_, me_, j, deadline_);
    } catch (const StallError& e) {
      fail(e.what());
    }
    connected_[static_cast<size_t>(j)] = true;
  }

  // p proved the token: it becomes the link to its rank if that rank is one this rank expects.
  std::string keep(const std::string& info, const net::SessionKey& session, net::Socket& sock) {
    auto peer = parse_info(info);
    if (!peer) return "malformed rank info '" + info + "'";
    if (std::string why = integrity_mismatch(o_, *peer); !why.empty()) {
      mismatch_ = why;
      return why;
    }
    if (peer->size != o_.size) {
      return "it belongs to a world of " + std::to_string(peer->size) + ", not " +
             std::to_string(o_.size);
    }
    if (peer->rank <= o_.rank || peer->rank >= o_.size) {
      return "rank " + std::to_string(peer->rank) + " should not dial rank " +
             std::to_string(o_.rank);
    }
    if (connected_[static_cast<size_t>(peer->rank)]) {
      return "rank " + std::to_string(peer->rank) + " is already connected";
    }
    links_[static_cast<size_t>(peer->rank)] = make_link(o_, std::move(sock), *peer, session);
    connected_[static_cast<size_t>(peer->rank)] = true;
    --waiting_;
    return "";
  }

  // Accepts every higher rank. There are slots for every rank still expected and as many again
  // for strangers (Doorman).
  void accept_all(Doorman& door) {
    waiting_ = o_.size - 1 - o_.rank;
    door.set_max_pending(static_cast<size_t>(2 * waiting_) + 32);
    const Doorman::OnPeer on_peer = [&](const std::string& info, const net::SessionKey& session,
                                        net::Socket& sock,
                                        const std::string&) { return keep(info, session, sock); };
    while (waiting_ > 0) {
      if (deadline_.expired()) fail("no connection from them before the deadline");
      door.poll_once(setup_slice(o_, deadline_), -1, on_peer);
      if (!mismatch_.empty()) throw ConfigError("communicator setup: " + mismatch_);
    }
    door.drop_all("setup finished before its handshake");
  }

  store::Store& store_;
  const CommConfig& o_;
  const Deadline deadline_;
  const std::string me_;
  std::vector<PeerLink> links_;
  std::vector<bool> connected_;
  int waiting_ = 0;
  std::string mismatch_;  // a peer that does not seal its frames as this rank does
};

}  // namespace

Mesh::Mesh() : ready_(std::make_unique<std::atomic<transport::Pair*>[]>(1)) {
  ready_[0] = nullptr;
  pairs_.resize(1);
  seals_.resize(1);
  stash_.resize(1);
}

Mesh::~Mesh() = default;

void Mesh::publish(int r, std::unique_ptr<transport::Pair> p, std::unique_ptr<FrameSeal> seal) {
  std::lock_guard lk(mu_);
  if (closed_) p->shutdown();
  seals_[static_cast<size_t>(r)] = std::move(seal);
  ready_[static_cast<size_t>(r)].store(p.get(), std::memory_order_release);
  pairs_[static_cast<size_t>(r)] = std::move(p);
}

void Mesh::shutdown_all() {
  std::lock_guard lk(mu_);
  closed_ = true;
  for (auto& p : pairs_) {
    if (p) p->shutdown();
  }
}

int Mesh::pairs_of(transport::Kind k) const {
  std::lock_guard lk(mu_);
  int n = 0;
  for (const auto& p : pairs_) n += p && p->kind() == k;
  return n;
}

Mesh::Mesh(int rank, const std::vector<int>& host_of)
    : rank_(rank),
      size_(static_cast<int>(host_of.size())),
      host_of_(host_of),
      ready_(std::make_unique<std::atomic<transport::Pair*>[]>(host_of.size())) {
  for (size_t r = 0; r < host_of.size(); ++r) ready_[r] = nullptr;
  if (rank < 0 || rank >= size_) {
    throw Error("a mesh of " + std::to_string(size_) + " ranks has no rank " + std::to_string(rank));
  }
  ranks_on_this_host_ = 0;
  hosts_ = 0;
  for (int h : host_of_) {
    if (h < 0 || h > hosts_) throw Error("hosts must be numbered in the order of their lowest rank");
    hosts_ = std::max(hosts_, h + 1);
    ranks_on_this_host_ += h == host_of_[static_cast<size_t>(rank)];
  }
}

transport::Pair& Mesh::connect_to(int r, Deadline deadline) {
  if (!lazy_) {
    throw Error("rank " + std::to_string(rank_) + " has no pair to rank " + std::to_string(r));
  }
  return lazy_->connect(r, deadline);
}

std::unique_ptr<Mesh> Mesh::connect(store::Store& store, const CommConfig& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    throw ConfigError("communicator: rank " + std::to_string(o.rank) + " is not in a world of " +
                      std::to_string(o.size));
  }
  if (o.host_id.size() > 128 ||
      std::any_of(o.host_id.begin(), o.host_id.end(),
                  [](unsigned char c) { return std::isspace(c) || !std::isprint(c); })) {
    throw ConfigError("communicator: host_id '" + o.host_id +
                      "' must be at most 128 printable characters without spaces");
  }
  auto m = std::make_unique<Mesh>();
  m->rank_ = o.rank;
  m->size_ = o.size;
  const auto n = static_cast<size_t>(o.size);
  m->pairs_.resize(n);
  m->seals_.resize(n);
  m->ready_ = std::make_unique<std::atomic<transport::Pair*>[]>(n);
  for (size_t r = 0; r < n; ++r) m->ready_[r] = nullptr;
  m->stash_.resize(n);
  m->stash_limit_ = o.p2p_stash_bytes;
  m->host_of_.assign(n, 0);
  m->hosts_ = 1;
  if (o.size == 1) return m;
  if (o.size > o.connect_all_up_to) {
    m->lazy_ = std::make_unique<Lazy>(*m, store, o);
    return m;
  }

  // A connection per peer, the listener, and a slot for every pending stranger.
  net::ensure_descriptors(static_cast<size_t>(3 * o.size) + 64,
                          "communicator setup (rank " + std::to_string(o.rank) + ")");
  Setup setup(store, o);
  std::vector<PeerLink> links = setup.run();
  std::vector<std::string> hosts(n);
  std::vector<int> cpus(n);
  m->shm_everywhere_ = o.transport != Transport::Tcp;
  for (size_t r = 0; r < n; ++r) {
    if (static_cast<int>(r) == o.rank) continue;
    hosts[r] = links[r].host;
    cpus[r] = links[r].cpus;
    m->shm_everywhere_ = m->shm_everywhere_ && links[r].shm;
  }
  hosts[static_cast<size_t>(o.rank)] = this_host(o);
  cpus[static_cast<size_t>(o.rank)] = usable_cpus(o);
  m->set_hosts(hosts);
  m->ranks_per_cpu_ = most_ranks_per_cpu(m->host_of_, cpus);
  auto pairs = make_pairs(o, links, setup.deadline());
  for (int r = 0; r < o.size; ++r) {
    if (r == o.rank) continue;
    m->publish(r, std::move(pairs[static_cast<size_t>(r)]),
               data_seal(o, links[static_cast<size_t>(r)]));
  }
  return m;
}

void Mesh::set_hosts(const std::vector<std::string>& hosts) {
  std::unordered_map<std::string, int> index;  // identity -> number, in order of lowest rank
  const std::string& here = hosts[static_cast<size_t>(rank_)];
  ranks_on_this_host_ = 0;
  for (int r = 0; r < size_; ++r) {
    const std::string& host = hosts[static_cast<size_t>(r)];
    host_of_[static_cast<size_t>(r)] =
        index.try_emplace(host, static_cast<int>(index.size())).first->second;
    ranks_on_this_host_ += host == here;
  }
  hosts_ = static_cast<int>(index.size());
}

}  // namespace cohort::comm
