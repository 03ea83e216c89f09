#include "cohort/comm/mesh.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>
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
#include "cohort/comm/mesh_pairs.h"
#include "cohort/net/frame_stream.h"
#include "cohort/net/handshake.h"

namespace cohort::comm {
namespace {

std::string info_of(int rank, int size, const std::string& host, bool shm) {
  return "rank=" + std::to_string(rank) + " size=" + std::to_string(size) + " host=" + host +
         " shm=" + (shm ? "1" : "0");
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

// A connection accepted but not yet authenticated: the server side of the handshake, driven by
// whatever bytes have arrived, so that no connection ever blocks the others.
struct Pending {
  net::Socket sock;
  Clock::time_point since;
  std::string from;
  net::ServerHandshake hs;
  net::FrameReader reader;
  net::FrameWriter writer;
  bool challenged = false;  // the hello is answered
  bool accepted = false;    // the client proved the token; Accept is queued
};

// Raises this process's soft limit on open descriptors towards `needed` (at most to the hard
// limit), and warns when even that is not enough.
void ensure_descriptors(int rank, size_t needed) {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= needed) return;
  const rlim_t want =
      lim.rlim_max == RLIM_INFINITY ? needed : std::min<rlim_t>(needed, lim.rlim_max);
  if (want > lim.rlim_cur) {
    const rlim_t before = lim.rlim_cur;
    lim.rlim_cur = want;
    if (::setrlimit(RLIMIT_NOFILE, &lim) == 0) {
      spdlog::info("communicator setup (rank {}): raised the open-file limit from {} to {}", rank,
                   before, want);
    }
  }
  if (want < needed) {
    spdlog::warn(
        "communicator setup (rank {}): this process may open only {} files (hard limit) but its "
        "connections need about {}; raise it (ulimit -Hn, or LimitNOFILE= for a service)",
        rank, want, needed);
  }
}

// Setup of one rank's connections: dial every lower rank, accept every higher one.
class Setup {
 public:
  Setup(store::Store& store, const CommConfig& o)
      : store_(store),
        o_(o),
        deadline_(Deadline::after(o.timeout)),
        me_(info_of(o.rank, o.size, this_host(o), o.transport != Transport::Tcp)),
        links_(static_cast<size_t>(o.size)),
        connected_(static_cast<size_t>(o.size), false) {
    connected_[static_cast<size_t>(o.rank)] = true;
  }

  std::vector<PeerLink> run() {
    net::Listener listener = net::Listener::bind(o_.bind_host, 0, kBacklog);
    const std::string host = o_.advertise_host.empty() ? o_.bind_host : o_.advertise_host;
    store_.set(o_.store_prefix + "/addr/" + std::to_string(o_.rank),
               store::to_bytes(net::Endpoint{host, listener.port()}.str()));
    for (int j = 0; j < o_.rank; ++j) dial(j);
    accept_all(listener);
    return std::move(links_);
  }

  Deadline deadline() const { return deadline_; }

 private:
  // The listen backlog: a rank of a large world is dialled by many ranks at once.
  static constexpr int kBacklog = 4096;

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

  // Connects to rank j and authenticates. A connection that the other side closes during the
  // handshake (it was busy with too many others, or restarting its setup) is tried again until
  // the deadline; a wrong token is not.
  void dial(int j) {
    const std::string key = o_.store_prefix + "/addr/" + std::to_string(j);
    net::Socket s;
    std::string info;
    for (Millis backoff{10};; backoff = std::min(backoff * 2, Millis(500))) {
      try {
        store_.wait({key}, deadline_.remaining());
        auto ep = net::Endpoint::parse(store::to_string(store_.get(key)));
        s = net::Socket::connect(ep, deadline_);
        info = net::handshake_as_client(s, o_.token, me_, deadline_);
        break;
      } catch (const TimeoutError& e) {
        fail("waiting for rank " + std::to_string(j) + ": " + e.what());
      } catch (const PeerLostError& e) {
        if (deadline_.expired()) {
          throw PeerLostError(j, "communicator setup: rank " + std::to_string(o_.rank) +
                                     " lost its connection to rank " + std::to_string(j) +
                                     " during the handshake: " + e.what());
        }
        spdlog::debug("communicator setup (rank {}): rank {} closed the handshake ({}); again",
                      o_.rank, j, e.what());
        std::this_thread::sleep_for(std::min<Millis>(backoff, deadline_.remaining()));
      } catch (const AuthError& e) {
        throw AuthError("communicator setup: rank " + std::to_string(o_.rank) +
                        " could not authenticate with rank " + std::to_string(j) + ": " + e.what());
      }
    }
    auto peer = parse_info(info);
    if (!peer || peer->rank != j || peer->size != o_.size) {
      throw ProtocolError("communicator setup: rank " + std::to_string(o_.rank) + " dialled rank " +
                          std::to_string(j) + " but the peer says '" + info +
                          "' (expected rank=" + std::to_string(j) +
                          " size=" + std::to_string(o_.size) + " host=... shm=0|1)");
    }
    links_[static_cast<size_t>(j)] = PeerLink{std::move(s), peer->host, peer->shm};
    connected_[static_cast<size_t>(j)] = true;
  }

  void drop(Pending& p, const std::string& why) const {
    spdlog::warn("communicator setup (rank {}): closed connection from {}: {}", o_.rank, p.from,
                 why);
    p.sock.close();
  }

  // Moves p's handshake on with what has arrived; true once p is done with (kept or dropped).
  bool advance(Pending& p) {
    try {
      if (!p.writer.flush(p.sock)) return false;
      while (!p.accepted && p.reader.read(p.sock, net::kMaxHandshakeFrame)) {
        net::Frame f = p.reader.take();
        if (!p.challenged) {
          p.writer.push(net::MsgType::kChallenge, p.hs.on_hello(f));
          p.challenged = true;
        } else {
          try {
            p.hs.on_response(f);
          } catch (const AuthError&) {
            p.writer.push(net::MsgType::kReject, {});
            p.writer.flush(p.sock);  // best effort: tell the client before closing
            throw;
          }
          p.writer.push(net::MsgType::kAccept, {});
          p.accepted = true;
        }
        if (!p.writer.flush(p.sock)) return false;
      }
      if (!p.accepted || !p.writer.empty()) return false;
      keep(p);
    } catch (const std::exception& e) {
      drop(p, e.what());
    }
    return true;
  }

  // p proved the token: it becomes the link to its rank if that rank is one this rank expects.
  void keep(Pending& p) {
    const std::string info = p.hs.client_info();
    auto peer = parse_info(info);
    if (!peer) {
      drop(p, "malformed rank info '" + info + "'");
    } else if (peer->size != o_.size) {
      drop(p, "it belongs to a world of " + std::to_string(peer->size) + ", not " +
                  std::to_string(o_.size));
    } else if (peer->rank <= o_.rank || peer->rank >= o_.size) {
      drop(p, "rank " + std::to_string(peer->rank) + " should not dial rank " +
                  std::to_string(o_.rank));
    } else if (connected_[static_cast<size_t>(peer->rank)]) {
      drop(p, "rank " + std::to_string(peer->rank) + " is already connected");
    } else {
      links_[static_cast<size_t>(peer->rank)] = PeerLink{std::move(p.sock), peer->host, peer->shm};
      connected_[static_cast<size_t>(peer->rank)] = true;
      --waiting_;
    }
  }

  // Accepts every higher rank. Every pending connection's handshake advances as its bytes
  // arrive, each with its own deadline, so slow, idle or garbage connections cost only their
  // own slot. There are slots for every rank still expected and as many again for strangers;
  // beyond that the oldest stranger-or-peer is dropped (a real peer dials again).
  void accept_all(net::Listener& listener) {
    waiting_ = o_.size - 1 - o_.rank;
    const size_t max_pending = static_cast<size_t>(2 * waiting_) + 32;
    std::deque<Pending> pending;
    std::vector<pollfd> fds;
    while (waiting_ > 0) {
      if (deadline_.expired()) fail("no connection from them before the deadline");
      fds.assign(1, pollfd{listener.fd(), POLLIN, 0});
      Deadline wake = deadline_;
      for (auto& p : pending) {
        const short ev = static_cast<short>(POLLIN | (p.writer.empty() ? 0 : POLLOUT));
        fds.push_back({p.sock.fd(), ev, 0});
        wake = wake.earlier(Deadline(p.since + o_.handshake_timeout));
      }
      int rc = ::poll(fds.data(), fds.size(), wake.poll_timeout_ms());
      if (rc < 0 && errno != EINTR) throw SystemError("poll", errno);

      std::deque<Pending> still;
      for (size_t i = 0; i < pending.size(); ++i) {
        Pending& p = pending[i];
        if (rc > 0 && fds[i + 1].revents != 0 && advance(p)) continue;
        if (Clock::now() >= p.since + o_.handshake_timeout) {
          drop(p, "no handshake within " + std::to_string(o_.handshake_timeout.count()) + " ms");
          continue;
        }
        still.push_back(std::move(p));
      }
      pending = std::move(still);
      if (rc > 0 && (fds[0].revents & POLLIN)) accept_new(listener, pending, max_pending);
    }
    for (auto& p : pending) drop(p, "setup finished before its handshake");
  }

  void accept_new(net::Listener& listener, std::deque<Pending>& pending, size_t max_pending) {
    for (;;) {
      int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
      if (fd < 0) {
        if (errno == EINTR || errno == ECONNABORTED) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return;
        // Out of descriptors and the like: back off instead of spinning.
        spdlog::warn("communicator setup (rank {}): accept failed: {}", o_.rank,
                     std::strerror(errno));
        return;
      }
      net::Socket s(fd);
      if (pending.size() >= max_pending) {
        drop(pending.front(), "too many unauthenticated connections");
        pending.pop_front();
      }
      std::string from = s.peer_address();
      pending.push_back(Pending{.sock = std::move(s),
                                .since = Clock::now(),
                                .from = std::move(from),
                                .hs = net::ServerHandshake(o_.token, me_)});
    }
  }

  store::Store& store_;
  const CommConfig& o_;
  const Deadline deadline_;
  const std::string me_;
  std::vector<PeerLink> links_;
  std::vector<bool> connected_;
  int waiting_ = 0;
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

Mesh Mesh::connect(store::Store& store, const CommConfig& o) {
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
  if (o.host_id.size() > 128 ||
      std::any_of(o.host_id.begin(), o.host_id.end(),
                  [](unsigned char c) { return std::isspace(c) || !std::isprint(c); })) {
    throw ConfigError("communicator: host_id '" + o.host_id +
                      "' must be at most 128 printable characters without spaces");
  }
  m.host_of_.assign(static_cast<size_t>(o.size), 0);
  m.hosts_ = 1;
  if (o.size == 1) return m;

  // A connection per peer, the listener, and a slot for every pending stranger.
  ensure_descriptors(o.rank, static_cast<size_t>(3 * o.size) + 64);
  Setup setup(store, o);
  std::vector<PeerLink> links = setup.run();
  const std::string& here = this_host(o);
  std::unordered_map<std::string, int> hosts;  // identity -> number, in order of lowest rank
  for (int r = 0; r < o.size; ++r) {
    const std::string& host = r == o.rank ? here : links[static_cast<size_t>(r)].host;
    m.host_of_[static_cast<size_t>(r)] =
        hosts.try_emplace(host, static_cast<int>(hosts.size())).first->second;
    if (r != o.rank && host == here) ++m.ranks_on_this_host_;
  }
  m.hosts_ = static_cast<int>(hosts.size());
  m.pairs_ = make_pairs(o, links, setup.deadline());
  return m;
}

}  // namespace cohort::comm
