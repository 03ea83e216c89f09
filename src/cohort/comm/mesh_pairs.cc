#include "cohort/comm/mesh_pairs.h"

#include <spdlog/spdlog.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <thread>
#include <unordered_map>

#include "cohort/base/cpu_binding.h"
#include "cohort/base/error.h"
#include "cohort/comm/exchange.h"
#include "cohort/comm/transport/host_identity.h"
#include "cohort/comm/transport/shm_pair.h"
#include "cohort/comm/transport/tcp_pair.h"
#include "cohort/net/handshake.h"

namespace cohort::comm {
namespace {

using transport::ShmSegment;

constexpr size_t kMaxMessage = 512;
constexpr size_t kMinRing = 64 << 10;

}  // namespace

void send_setup_message(PeerLink& link, const std::string& text, Deadline deadline) {
  const auto n = static_cast<uint32_t>(text.size());
  FrameMac& mac = link.seal->send();
  mac.begin(&n, sizeof(n));
  mac.update(text.data(), text.size());
  const FrameTag tag = mac.finish();
  std::string message(reinterpret_cast<const char*>(&n), sizeof(n));
  message += text;
  message.append(reinterpret_cast<const char*>(tag.data()), mac.tag_bytes());
  link.sock.send_all(message.data(), message.size(), deadline);
}

std::string recv_setup_message(PeerLink& link, int peer, Deadline deadline) {
  uint32_t n = 0;
  link.sock.recv_all(&n, sizeof(n), deadline);
  if (n > kMaxMessage) {
    throw ProtocolError("communicator setup: rank " + std::to_string(peer) + " sent a " +
                        std::to_string(n) + "-byte transport message (at most " +
                        std::to_string(kMaxMessage) + ")");
  }
  std::string text(n, '\0');
  link.sock.recv_all(text.data(), n, deadline);
  FrameMac& mac = link.seal->recv();
  FrameTag tag{};
  link.sock.recv_all(tag.data(), mac.tag_bytes(), deadline);
  mac.begin(&n, sizeof(n));
  mac.update(text.data(), text.size());
  if (!tags_equal(tag, mac.finish())) {
    throw IntegrityError("communicator setup: a transport message from rank " +
                         std::to_string(peer) +
                         " failed its integrity check (changed on the way, or not sent by a "
                         "holder of the job's token)");
  }
  return text;
}

PeerLink make_link(const CommConfig& o, net::Socket sock, const PeerInfo& peer,
                   const net::SessionKey& session) {
  return PeerLink{std::move(sock), peer.host, peer.shm, peer.cpus,
                  std::make_unique<FrameSeal>(mac_for(o.integrity), session, o.rank, peer.rank)};
}

std::unique_ptr<FrameSeal> data_seal(const CommConfig& o, PeerLink& link) {
  if (o.integrity == Integrity::None) return nullptr;
  return std::move(link.seal);
}

std::string integrity_mismatch(const CommConfig& o, const PeerInfo& peer) {
  if (peer.integrity == o.integrity) return "";
  return "rank " + std::to_string(o.rank) + " uses integrity " +
         std::string(integrity_name(o.integrity)) + " but rank " + std::to_string(peer.rank) +
         " uses " + std::string(integrity_name(peer.integrity)) +
         " (comm.integrity must be the same on every rank)";
}

namespace {

bool starts_with(const std::string& s, const char* prefix) {
  return s.rfind(prefix, 0) == 0;
}

// A pair on this host and why it is not on shared memory (empty: it is).
struct Local {
  int peer;
  std::optional<ShmSegment> segment;
  std::string refused;
};

std::string pair_name(int a, int b) {
  return "ranks " + std::to_string(std::min(a, b)) + " and " + std::to_string(std::max(a, b));
}

// The creator's side: a segment for `peer`, or the reason there is none.
std::optional<ShmSegment> create_segment(const CommConfig& o, int peer, size_t ring,
                                         std::string* why) {
  try {
    return ShmSegment::create(ring, std::to_string(o.rank) + "-" + std::to_string(peer));
  } catch (const std::exception& e) {
    *why = e.what();
    return std::nullopt;
  }
}

// The opener's side: the segment an offer names, or the reason it cannot be used.
std::optional<ShmSegment> open_segment(const std::string& offer, int peer, std::string* why) {
  std::istringstream in(offer.substr(4));
  std::string name;
  uint64_t ring = 0;
  if (!(in >> name >> ring) || !in.eof()) {
    throw ProtocolError("communicator setup: rank " + std::to_string(peer) +
                        " sent a malformed shared-memory offer");
  }
  try {
    return ShmSegment::open(name, static_cast<size_t>(ring));
  } catch (const SystemError& e) {
    *why = e.what();
    return std::nullopt;
  }
}

// A TCP pair over the link's connection, with the socket buffers of a same-host or a cross-host
// connection (CommConfig::socket_buffer_bytes, remote_socket_buffer_bytes).
std::unique_ptr<transport::Pair> tcp_pair(const CommConfig& o, int peer, PeerLink& link);

}  // namespace

size_t shm_ring_bytes_for_pairs(const CommConfig& o, uint64_t pairs) {
  const size_t cap = std::max(o.shm_ring_bytes, kMinRing);
  if (pairs == 0) return cap;
  const uint64_t fit = o.shm_host_bytes / (2 * pairs);  // two rings per pair
  size_t ring = kMinRing;
  while (ring * 2 <= fit && ring * 2 <= cap) ring *= 2;
  return ring;
}

size_t shm_ring_bytes_for(const CommConfig& o, int local_ranks) {
  if (local_ranks < 2) return shm_ring_bytes_for_pairs(o, 0);
  return shm_ring_bytes_for_pairs(o, uint64_t(local_ranks) * uint64_t(local_ranks - 1) / 2);
}

int usable_cpus(const CommConfig& o) {
  return o.host_cpus > 0 ? o.host_cpus : allowed_cpu_count();
}

int most_ranks_per_cpu(const std::vector<int>& host_of, const std::vector<int>& cpus) {
  std::unordered_map<int, std::pair<int, int>> hosts;  // host -> ranks, fewest CPUs counted
  for (size_t r = 0; r < host_of.size(); ++r) {
    auto [it, fresh] = hosts.try_emplace(host_of[r], 0, cpus[r]);
    ++it->second.first;
    it->second.second = std::min(it->second.second, cpus[r]);
  }
  int most = 1;
  for (const auto& [host, h] : hosts) {
    const int shared = std::max(h.second, 1);
    most = std::max(most, (h.first + shared - 1) / shared);
  }
  return most;
}

std::string info_of(const CommConfig& o) {
  return "rank=" + std::to_string(o.rank) + " size=" + std::to_string(o.size) +
         " host=" + this_host(o) + " shm=" + (o.transport != Transport::Tcp ? "1" : "0") +
         " cpus=" + std::to_string(usable_cpus(o)) +
         " mac=" + std::to_string(static_cast<int>(o.integrity));
}

std::optional<PeerInfo> parse_info(const std::string& s) {
  PeerInfo p;
  int r = -1, n = -1, shm = -1, cpus = 0, mac = -1, used = 0;
  char host[129] = {};
  if (std::sscanf(s.c_str(), "rank=%d size=%d host=%128s shm=%d cpus=%d mac=%d%n", &r, &n, host,
                  &shm, &cpus, &mac, &used) != 6 ||
      used != static_cast<int>(s.size()) || (shm != 0 && shm != 1) || cpus < 1 || mac < 0 ||
      mac > static_cast<int>(Integrity::Gmac)) {
    return std::nullopt;
  }
  p.rank = r;
  p.size = n;
  p.host = host;
  p.shm = shm == 1;
  p.cpus = cpus;
  p.integrity = static_cast<Integrity>(mac);
  return p;
}

void publish_address(store::Store& store, const CommConfig& o, uint16_t port) {
  const std::string host = o.advertise_host.empty() ? o.bind_host : o.advertise_host;
  store.set(o.store_prefix + "/addr/" + std::to_string(o.rank),
            store::to_bytes(net::Endpoint{host, port}.str()));
}

Deadline setup_slice(const CommConfig& o, Deadline deadline) {
  if (!o.setup_cancelled) return deadline;
  if (o.setup_cancelled->load()) {
    throw AbortedError("communicator setup: rank " + std::to_string(o.rank) + " of " +
                       std::to_string(o.size) + " was told to give up");
  }
  return deadline.earlier(Deadline::after(Millis(250)));
}

namespace {

// Runs `attempt(slice)` in setup slices until it returns: a slice that times out is tried again
// (noticing a cancellation) until `deadline`, then its TimeoutError goes to the caller.
template <typename Attempt>
auto in_setup_slices(const CommConfig& o, Deadline deadline, Attempt attempt) {
  for (;;) {
    const Deadline slice = setup_slice(o, deadline);
    try {
      return attempt(slice);
    } catch (const TimeoutError&) {
      if (deadline.expired() || !o.setup_cancelled) throw;
    }
  }
}

}  // namespace

void wait_for_keys(store::Store& store, const CommConfig& o, const std::vector<std::string>& keys,
                   Deadline deadline) {
  in_setup_slices(o, deadline, [&](Deadline slice) { store.wait(keys, slice.remaining()); });
}

PeerLink dial_peer(store::Store& store, const CommConfig& o, const std::string& me, int j,
                   Deadline deadline) {
  const std::string key = o.store_prefix + "/addr/" + std::to_string(j);
  net::Socket s;
  std::string info;
  net::SessionKey session{};
  for (Millis backoff{10};; backoff = std::min(backoff * 2, Millis(500))) {
    try {
      wait_for_keys(store, o, {key}, deadline);
      auto ep = net::Endpoint::parse(store::to_string(store.get(key)));
      // A listener that is gone (its rank gave the setup up) refuses every try: dialled in
      // slices, so that a rank told to give up stops.
      s = in_setup_slices(o, deadline,
                          [&](Deadline slice) { return net::Socket::connect(ep, slice); });
      info = net::handshake_as_client(s, o.token, me, deadline, &session);
      break;
    } catch (const TimeoutError& e) {
      throw StallError(j, "connecting to rank " + std::to_string(j) + ": " + e.what());
    } catch (const PeerLostError& e) {
      if (deadline.expired()) {
        throw PeerLostError(j, "rank " + std::to_string(o.rank) + " lost its connection to rank " +
                                   std::to_string(j) + " during the handshake: " + e.what());
      }
      spdlog::debug("communicator (rank {}): rank {} closed the handshake ({}); again", o.rank, j,
                    e.what());
      std::this_thread::sleep_for(std::min<Millis>(backoff, deadline.remaining()));
    } catch (const AuthError& e) {
      throw AuthError("communicator: rank " + std::to_string(o.rank) +
                      " could not authenticate with rank " + std::to_string(j) + ": " + e.what());
    }
  }
  auto peer = parse_info(info);
  if (!peer || peer->rank != j || peer->size != o.size) {
    throw ProtocolError(
        "communicator: rank " + std::to_string(o.rank) + " dialled rank " + std::to_string(j) +
        " but the peer says '" + info + "' (expected rank=" + std::to_string(j) +
        " size=" + std::to_string(o.size) + " host=... shm=0|1 cpus=... mac=0|1|2)");
  }
  if (std::string why = integrity_mismatch(o, *peer); !why.empty()) {
    throw ConfigError("communicator: " + why);
  }
  return make_link(o, std::move(s), *peer, session);
}

std::unique_ptr<transport::Pair> make_pair(const CommConfig& o, int peer, PeerLink& link,
                                           uint64_t local_pairs, Deadline deadline) {
  const bool local = link.host == this_host(o);
  const bool want_shm = o.transport != Transport::Tcp;
  if (local && want_shm && !link.shm && o.transport == Transport::Shm) {
    throw ConfigError("communicator: rank " + std::to_string(o.rank) +
                      " requires shared memory (transport shm) but rank " + std::to_string(peer) +
                      ", on the same host, uses transport tcp");
  }
  if (local && want_shm && link.shm) {
    std::optional<ShmSegment> segment;
    std::string refused;
    if (peer < o.rank) {  // the creator
      segment = create_segment(o, peer, shm_ring_bytes_for_pairs(o, local_pairs), &refused);
      send_setup_message(
          link,
          segment ? "shm " + segment->name() + " " + std::to_string(segment->ring_bytes())
                  : "tcp " + refused,
          deadline);
      if (segment) {
        const std::string answer = recv_setup_message(link, peer, deadline);
        segment->unlink();
        if (answer != "ok") {
          if (!starts_with(answer, "tcp ")) {
            throw ProtocolError("communicator: rank " + std::to_string(peer) +
                                " sent an unknown transport answer");
          }
          refused = "rank " + std::to_string(peer) + ": " + answer.substr(4);
          segment.reset();
        }
      }
    } else {
      const std::string offer = recv_setup_message(link, peer, deadline);
      if (starts_with(offer, "shm ")) {
        segment = open_segment(offer, peer, &refused);
        send_setup_message(link, segment ? "ok" : "tcp " + refused, deadline);
      } else if (starts_with(offer, "tcp ")) {
        refused = "rank " + std::to_string(peer) + ": " + offer.substr(4);
      } else {
        throw ProtocolError("communicator: rank " + std::to_string(peer) +
                            " sent an unknown transport message");
      }
    }
    if (segment) {
      return std::make_unique<transport::ShmPair>(peer, std::move(link.sock), std::move(*segment),
                                                  /*creator=*/peer < o.rank,
                                                  o.shm_single_copy_bytes);
    }
    if (o.transport == Transport::Shm) {
      throw Error("communicator: no shared memory between " + pair_name(o.rank, peer) +
                  " (transport shm): " + refused);
    }
    spdlog::warn("communicator (rank {}): no shared memory with rank {} on this host ({}); TCP",
                 o.rank, peer, refused);
  }
  return tcp_pair(o, peer, link);
}

const std::string& this_host(const CommConfig& o) {
  return o.host_id.empty() ? transport::host_identity() : o.host_id;
}

namespace {

std::unique_ptr<transport::Pair> tcp_pair(const CommConfig& o, int peer, PeerLink& link) {
  const int buffer =
      link.host == this_host(o) ? o.socket_buffer_bytes : o.remote_socket_buffer_bytes;
  if (buffer > 0) link.sock.set_buffer_sizes(buffer);
  return std::make_unique<transport::TcpPair>(peer, std::move(link.sock));
}

}  // namespace

std::vector<std::unique_ptr<transport::Pair>> make_pairs(const CommConfig& o,
                                                         std::vector<PeerLink>& links,
                                                         Deadline deadline) {
  const bool want_shm = o.transport != Transport::Tcp;
  const std::string& here = this_host(o);
  std::vector<Local> local;
  int local_ranks = 1;
  for (int r = 0; r < o.size; ++r) {
    if (r == o.rank || links[static_cast<size_t>(r)].host != here) continue;
    ++local_ranks;
    const PeerLink& l = links[static_cast<size_t>(r)];
    if (!want_shm) continue;
    if (!l.shm) {
      if (o.transport == Transport::Shm) {
        throw ConfigError("communicator setup: rank " + std::to_string(o.rank) +
                          " requires shared memory (transport shm) but rank " + std::to_string(r) +
                          ", on the same host, uses transport tcp");
      }
      continue;
    }
    local.push_back(Local{r, std::nullopt, {}});
  }
  const size_t ring = shm_ring_bytes_for(o, local_ranks);

  // 1. Offers to the lower ranks of this host.
  for (Local& p : local) {
    if (p.peer > o.rank) continue;
    p.segment = create_segment(o, p.peer, ring, &p.refused);
    PeerLink& s = links[static_cast<size_t>(p.peer)];
    send_setup_message(
        s, p.segment ? "shm " + p.segment->name() + " " + std::to_string(ring) : "tcp " + p.refused,
        deadline);
  }
  // 2. Answers to the higher ranks' offers.
  for (Local& p : local) {
    if (p.peer < o.rank) continue;
    PeerLink& s = links[static_cast<size_t>(p.peer)];
    const std::string offer = recv_setup_message(s, p.peer, deadline);
    if (starts_with(offer, "shm ")) {
      p.segment = open_segment(offer, p.peer, &p.refused);
      send_setup_message(s, p.segment ? "ok" : "tcp " + p.refused, deadline);
    } else if (starts_with(offer, "tcp ")) {
      p.refused = "rank " + std::to_string(p.peer) + ": " + offer.substr(4);
    } else {
      throw ProtocolError("communicator setup: rank " + std::to_string(p.peer) +
                          " sent an unknown transport message");
    }
  }
  // 3. The lower ranks' answers.
  for (Local& p : local) {
    if (p.peer > o.rank || !p.segment) continue;
    const std::string answer =
        recv_setup_message(links[static_cast<size_t>(p.peer)], p.peer, deadline);
    p.segment->unlink();
    if (answer == "ok") continue;
    if (!starts_with(answer, "tcp ")) {
      throw ProtocolError("communicator setup: rank " + std::to_string(p.peer) +
                          " sent an unknown transport answer");
    }
    p.refused = "rank " + std::to_string(p.peer) + ": " + answer.substr(4);
    p.segment.reset();
  }

  std::vector<std::unique_ptr<transport::Pair>> pairs(static_cast<size_t>(o.size));
  std::vector<int> fell_back;
  std::string first_reason;
  for (Local& p : local) {
    if (p.segment) {
      pairs[static_cast<size_t>(p.peer)] = std::make_unique<transport::ShmPair>(
          p.peer, std::move(links[static_cast<size_t>(p.peer)].sock), std::move(*p.segment),
          /*creator=*/p.peer < o.rank, o.shm_single_copy_bytes);
      continue;
    }
    if (o.transport == Transport::Shm) {
      throw Error("communicator setup: no shared memory between " + pair_name(o.rank, p.peer) +
                  " (transport shm): " + p.refused);
    }
    fell_back.push_back(p.peer);
    if (first_reason.empty()) first_reason = p.refused;
  }
  if (!fell_back.empty()) {
    std::string ranks;
    for (size_t i = 0; i < fell_back.size(); ++i) {
      ranks += (i ? ", " : "") + std::to_string(fell_back[i]);
    }
    spdlog::warn(
        "communicator setup (rank {}): no shared memory with rank(s) {} on this host ({}); "
        "they talk over TCP",
        o.rank, ranks, first_reason);
  }
  for (int r = 0; r < o.size; ++r) {
    if (r == o.rank || pairs[static_cast<size_t>(r)]) continue;
    pairs[static_cast<size_t>(r)] = tcp_pair(o, r, links[static_cast<size_t>(r)]);
  }
  return pairs;
}

}  // namespace cohort::comm
