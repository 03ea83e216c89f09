#include "cohort/comm/mesh.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>

#include "cohort/base/error.h"
#include "cohort/comm/mesh_pairs.h"
#include "cohort/comm/transport/host_identity.h"
#include "cohort/net/handshake.h"

namespace cohort::comm {
namespace {

// Connections accepted but not yet authenticated. Beyond this many, the oldest is dropped.
constexpr size_t kMaxPending = 32;

std::string info_of(int rank, int size, bool shm) {
  return "rank=" + std::to_string(rank) + " size=" + std::to_string(size) +
         " host=" + transport::host_identity() + " shm=" + (shm ? "1" : "0");
}

struct PeerInfo {
  int rank = -1;
  int size = -1;
  std::string host;
  bool shm = false;
};

// Parses "rank=R size=N host=H shm=B"; nullopt if malformed.
std::optional<PeerInfo> parse_info(const std::string& s) {
  PeerInfo p;
  int r = -1, n = -1, shm = -1, used = 0;
  char host[129] = {};
  if (std::sscanf(s.c_str(), "rank=%d size=%d host=%128s shm=%d%n", &r, &n, host, &shm, &used) !=
          4 ||
      used != static_cast<int>(s.size()) || (shm != 0 && shm != 1)) {
    return std::nullopt;
  }
  p.rank = r;
  p.size = n;
  p.host = host;
  p.shm = shm == 1;
  return p;
}

std::string join_ranks(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) s += (i ? ", " : "") + std::to_string(ranks[i]);
  return s;
}

struct Pending {
  net::Socket sock;
  Clock::time_point since;
  std::string from;
};

}  // namespace

void Mesh::shutdown_all() {
  for (auto& p : pairs_) {
    if (p) p->shutdown();
  }
}

int Mesh::pairs_of(transport::Kind k) const {
  int n = 0;
  for (const auto& p : pairs_) n += p && p->kind() == k;
  return n;
}

Mesh Mesh::connect(store::Store& store, const MeshOptions& o) {
  if (o.size < 1 || o.rank < 0 || o.rank >= o.size) {
    throw ConfigError("communicator: rank " + std::to_string(o.rank) + " is not in a world of " +
                      std::to_string(o.size));
  }
  Mesh m;
  m.rank_ = o.rank;
  m.size_ = o.size;
  m.pairs_.resize(static_cast<size_t>(o.size));
  m.stash_.resize(static_cast<size_t>(o.size));
  m.stash_limit_ = o.p2p_stash_bytes;
  if (o.size == 1) return m;

  const Deadline deadline = Deadline::after(o.timeout);
  const std::string me = info_of(o.rank, o.size, o.transport != Transport::Tcp);
  std::vector<PeerLink> links(static_cast<size_t>(o.size));
  std::vector<bool> connected(static_cast<size_t>(o.size), false);
  connected[static_cast<size_t>(o.rank)] = true;

  auto fail = [&](const std::string& why) -> void {
    std::vector<int> missing;
    for (int r = 0; r < o.size; ++r) {
      if (!connected[static_cast<size_t>(r)]) missing.push_back(r);
    }
    throw TimeoutError("communicator setup: rank " + std::to_string(o.rank) + " of " +
                       std::to_string(o.size) + " timed out after " +
                       std::to_string(o.timeout.count()) +
                       " ms; ranks never connected: " + join_ranks(missing) + " (" + why + ")");
  };

  net::Listener listener = net::Listener::bind(o.bind_host, 0);
  const std::string host = o.advertise_host.empty() ? o.bind_host : o.advertise_host;
  store.set(o.prefix + "/addr/" + std::to_string(o.rank),
            store::to_bytes(net::Endpoint{host, listener.port()}.str()));

  // Dial every lower rank.
  for (int j = 0; j < o.rank; ++j) {
    const std::string key = o.prefix + "/addr/" + std::to_string(j);
    net::Socket s;
    std::string info;
    try {
      store.wait({key}, deadline.remaining());
      auto ep = net::Endpoint::parse(store::to_string(store.get(key)));
      s = net::Socket::connect(ep, deadline);
      info = net::handshake_as_client(s, o.token, me, deadline);
    } catch (const TimeoutError& e) {
      fail("waiting for rank " + std::to_string(j) + ": " + e.what());
    } catch (const PeerLostError& e) {
      throw PeerLostError(j, "communicator setup: rank " + std::to_string(o.rank) +
                                 " lost its connection to rank " + std::to_string(j) +
                                 " during the handshake: " + e.what());
    } catch (const AuthError& e) {
      throw AuthError("communicator setup: rank " + std::to_string(o.rank) +
                      " could not authenticate with rank " + std::to_string(j) + ": " + e.what());
    }
    auto peer = parse_info(info);
    if (!peer || peer->rank != j || peer->size != o.size) {
      throw ProtocolError("communicator setup: rank " + std::to_string(o.rank) + " dialled rank " +
                          std::to_string(j) + " but the peer says '" + info +
                          "' (expected rank=" + std::to_string(j) +
                          " size=" + std::to_string(o.size) + " host=... shm=0|1)");
    }
    links[static_cast<size_t>(j)] = PeerLink{std::move(s), peer->host, peer->shm};
    connected[static_cast<size_t>(j)] = true;
  }

  // Accept every higher rank.
  int waiting = o.size - 1 - o.rank;
  std::deque<Pending> pending;
  auto drop = [&](Pending& p, const std::string& why) {
    spdlog::warn("communicator setup (rank {}): closed connection from {}: {}", o.rank, p.from,
                 why);
    p.sock.close();
  };
  while (waiting > 0) {
    if (deadline.expired()) fail("no connection from them before the deadline");
    std::vector<pollfd> fds;
    fds.push_back({listener.fd(), POLLIN, 0});
    Deadline wake = deadline;
    for (auto& p : pending) {
      fds.push_back({p.sock.fd(), POLLIN, 0});
      wake = wake.earlier(Deadline(p.since + o.handshake_timeout));
    }
    int rc = ::poll(fds.data(), fds.size(), wake.poll_timeout_ms());
    if (rc < 0 && errno != EINTR) throw SystemError("poll", errno);

    // Authenticate connections that have spoken (a real peer sends its hello at once).
    std::deque<Pending> still;
    for (size_t i = 0; i < pending.size(); ++i) {
      Pending& p = pending[i];
      if (rc > 0 && fds[i + 1].revents != 0) {
        try {
          Deadline hd = deadline.earlier(Deadline(p.since + o.handshake_timeout));
          std::string info = net::handshake_as_server(p.sock, o.token, me, hd);
          auto peer = parse_info(info);
          if (!peer) {
            drop(p, "malformed rank info '" + info + "'");
          } else if (peer->size != o.size) {
            drop(p, "it belongs to a world of " + std::to_string(peer->size) + ", not " +
                        std::to_string(o.size));
          } else if (peer->rank <= o.rank || peer->rank >= o.size) {
            drop(p, "rank " + std::to_string(peer->rank) + " should not dial rank " +
                        std::to_string(o.rank));
          } else if (connected[static_cast<size_t>(peer->rank)]) {
            drop(p, "rank " + std::to_string(peer->rank) + " is already connected");
          } else {
            links[static_cast<size_t>(peer->rank)] =
                PeerLink{std::move(p.sock), peer->host, peer->shm};
            connected[static_cast<size_t>(peer->rank)] = true;
            --waiting;
          }
        } catch (const std::exception& e) {
          drop(p, e.what());
        }
        continue;
      }
      if (Clock::now() >= p.since + o.handshake_timeout) {
        drop(p, "no handshake within " + std::to_string(o.handshake_timeout.count()) + " ms");
        continue;
      }
      still.push_back(std::move(p));
    }
    pending = std::move(still);

    if (rc > 0 && (fds[0].revents & POLLIN)) {
      for (;;) {
        int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
          if (errno == EINTR || errno == ECONNABORTED) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) break;
          // Out of descriptors and the like: back off instead of spinning.
          spdlog::warn("communicator setup (rank {}): accept failed: {}", o.rank,
                       std::strerror(errno));
          break;
        }
        net::Socket s(fd);
        if (pending.size() >= kMaxPending) {
          drop(pending.front(), "too many unauthenticated connections");
          pending.pop_front();
        }
        std::string from = s.peer_address();
        pending.push_back(Pending{std::move(s), Clock::now(), std::move(from)});
      }
    }
  }
  for (auto& p : pending) drop(p, "setup finished before its handshake");

  for (int r = 0; r < o.size; ++r) {
    if (r != o.rank && links[static_cast<size_t>(r)].host == transport::host_identity()) {
      ++m.ranks_on_this_host_;
    }
  }
  m.pairs_ = make_pairs(o, links, deadline);
  return m;
}

}  // namespace cohort::comm
