#include "cohort/comm/mesh_lazy.h"

#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>
#include <sstream>
#include <unordered_map>

#include "cohort/base/error.h"
#include "cohort/comm/exchange.h"
#include "cohort/comm/mesh_pairs.h"
#include "cohort/net/descriptors.h"

namespace cohort::comm {
namespace {

// A flag of a rendezvous record: "shm=1" or "shm=0" (whether shared memory is used).
std::string flag(const char* name, bool on) {
  return std::string(name) + (on ? "=1" : "=0");
}

// The flag `word` states; nullopt when it is neither form.
std::optional<bool> read_flag(const char* name, const std::string& word) {
  if (word == flag(name, true)) return true;
  if (word == flag(name, false)) return false;
  return std::nullopt;
}

// A count of a rendezvous record, at least 1: "cpus=C" (the CPUs a rank counts), "per_cpu=K" (the
// ranks per CPU of the most crowded host).
std::string count(const char* name, int n) {
  return std::string(name) + "=" + std::to_string(n);
}

// The count `word` states; nullopt when it is not that count's form.
std::optional<int> read_count(const char* name, const std::string& word) {
  const std::string prefix = std::string(name) + "=";
  int n = 0, used = 0;
  if (word.rfind(prefix, 0) != 0 ||
      std::sscanf(word.c_str() + prefix.size(), "%d%n", &n, &used) != 1 ||
      used != static_cast<int>(word.size() - prefix.size()) || n < 1) {
    return std::nullopt;
  }
  return n;
}

}  // namespace

Mesh::Lazy::Lazy(Mesh& mesh, store::Store& store, const CommConfig& o)
    : mesh_(mesh),
      store_(store),
      o_(o),
      me_(info_of(o)),
      state_(static_cast<size_t>(o.size), State::None) {
  const Deadline deadline = Deadline::after(o.timeout);
  // The listener, a connection to each of a few dozen peers and pending strangers.
  net::ensure_descriptors(512, "communicator setup (rank " + std::to_string(o.rank) + ")");
  door_ = std::make_unique<Doorman>(o_, me_, net::Listener::bind(o.bind_host, 0, kListenBacklog));
  // Every other rank may dial this one at once (the linear allreduce's root, a broadcast's).
  door_->set_max_pending(std::max<size_t>(256, static_cast<size_t>(o.size)));
  local_pairs_ = pairs_of_host(o.size);  // as if every rank were on this host
  wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd_ < 0) throw SystemError("eventfd", errno);
  thread_ = std::thread([this] { accept_loop(); });
  try {
    publish_address(store_, o_, door_->port());
    store_.set(key("joined/" + std::to_string(o.rank)),
               store::to_bytes(this_host(o) + " " + count("cpus", usable_cpus(o)) + " " +
                               flag("shm", o.transport != Transport::Tcp)));
    rendezvous(deadline);
  } catch (...) {
    stop();
    throw;
  }
}

void Mesh::Lazy::stop() {
  if (thread_.joinable()) {
    stopping_ = true;
    const uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(wake_fd_, &one, sizeof(one));
    thread_.join();
  }
  if (wake_fd_ >= 0) ::close(wake_fd_);
  wake_fd_ = -1;
}

void Mesh::Lazy::never_joined(const std::string& why) {
  std::vector<int> missing;
  try {
    for (int r = 0; r < o_.size; ++r) {
      if (!store_.check({key("joined/" + std::to_string(r))})) missing.push_back(r);
    }
  } catch (const std::exception&) {
  }
  throw TimeoutError(
      "communicator setup: rank " + std::to_string(o_.rank) + " of " + std::to_string(o_.size) +
      " timed out after " + std::to_string(o_.timeout.count()) + " ms; ranks never joined: " +
      (missing.empty() ? std::string("none missing now") : join_ranks(missing)) + " (" + why + ")");
}

void Mesh::Lazy::rendezvous(Deadline deadline) {
  const size_t n = static_cast<size_t>(o_.size);
  std::vector<std::string> hosts(n);
  if (o_.rank == 0) {
    std::vector<std::string> keys;
    for (int r = 0; r < o_.size; ++r) keys.push_back(key("joined/" + std::to_string(r)));
    try {
      wait_for_keys(store_, o_, keys, deadline);
    } catch (const TimeoutError& e) {
      never_joined(e.what());
    }
    std::unordered_map<std::string, int> number;
    std::string world;
    std::vector<int> host_of(n), cpus(n);
    bool shm = true;
    for (size_t r = 0; r < n; ++r) {
      // "<host> cpus=C shm=0|1"
      const std::string joined = store::to_string(store_.get(keys[r]));
      const size_t last = joined.rfind(' ');
      const size_t space =
          last == std::string::npos || last == 0 ? std::string::npos : joined.rfind(' ', last - 1);
      const auto on = read_flag("shm", last == std::string::npos ? "" : joined.substr(last + 1));
      const auto counted = read_count(
          "cpus", space == std::string::npos ? "" : joined.substr(space + 1, last - space - 1));
      if (!on || !counted) {
        throw ProtocolError("communicator setup: malformed record of rank " + std::to_string(r) +
                            " joining");
      }
      shm = shm && *on;
      const std::string host = joined.substr(0, space);
      const int h = number.try_emplace(host, static_cast<int>(number.size())).first->second;
      world += std::to_string(h) + ' ';
      hosts[r] = std::to_string(h);
      host_of[r] = h;
      cpus[r] = *counted;
    }
    mesh_.shm_everywhere_ = shm;
    mesh_.ranks_per_cpu_ = most_ranks_per_cpu(host_of, cpus);
    store_.set(key("world"), store::to_bytes(world + flag("shm", shm) + " " +
                                             count("per_cpu", mesh_.ranks_per_cpu_)));
  } else {
    try {
      wait_for_keys(store_, o_, {key("world")}, deadline);
    } catch (const TimeoutError& e) {
      never_joined(e.what());
    }
    std::istringstream in(store::to_string(store_.get(key("world"))));
    for (size_t r = 0; r < n; ++r) {
      int h = -1;
      if (!(in >> h) || h < 0) throw ProtocolError("communicator setup: malformed world record");
      hosts[r] = std::to_string(h);
    }
    std::string shm_word, per_cpu_word, rest;
    const auto shm = in >> shm_word ? read_flag("shm", shm_word) : std::nullopt;
    const auto per_cpu = in >> per_cpu_word ? read_count("per_cpu", per_cpu_word) : std::nullopt;
    if (!shm || !per_cpu || in >> rest) {
      throw ProtocolError("communicator setup: malformed world record");
    }
    mesh_.shm_everywhere_ = *shm;
    mesh_.ranks_per_cpu_ = *per_cpu;
  }
  mesh_.set_hosts(hosts);
  local_pairs_ = pairs_of_host(mesh_.ranks_on_this_host());
  // A peer that shares a CPU with k ranks gets its turn about k times less often: beyond 16 ranks
  // per CPU the silence a handshake may keep grows with k (at 512 ranks on 2 CPUs, 3 s dropped
  // real peers).
  door_->set_handshake_timeout(o_.handshake_timeout * std::max(1, mesh_.ranks_per_cpu_ / 16));
}

uint64_t Mesh::Lazy::pairs_of_host(int ranks) const {
  // About 2 log2(n) + 2 peers per rank (ring and halving-doubling partners), at most every other
  // rank of the host: the pairs of this host that its rings must share /dev/shm among.
  const auto local = static_cast<uint64_t>(ranks);
  const auto degree = static_cast<uint64_t>(2 * std::ceil(std::log2(o_.size)) + 2);
  return local * std::min(local - 1, degree) / 2;
}

void Mesh::Lazy::accept_loop() {
  const Doorman::OnPeer on = [this](const std::string& info, const net::SessionKey& session,
                                    net::Socket& sock,
                                    const std::string&) { return on_peer(info, session, sock); };
  while (!stopping_) {
    try {
      door_->poll_once(Deadline::after(Millis(1000)), wake_fd_, on);
    } catch (const std::exception& e) {
      spdlog::warn("communicator (rank {}): accepting connections: {}", o_.rank, e.what());
      std::this_thread::sleep_for(Millis(10));
    }
  }
  door_->drop_all("the communicator is closing");
}

// On the acceptor thread: an authenticated connection from a peer.
std::string Mesh::Lazy::on_peer(const std::string& info, const net::SessionKey& session,
                                net::Socket& sock) {
  auto peer = parse_info(info);
  if (!peer) return "malformed rank info '" + info + "'";
  if (peer->size != o_.size || peer->rank < 0 || peer->rank >= o_.size || peer->rank == o_.rank) {
    return "'" + info + "' is not a peer in a world of " + std::to_string(o_.size);
  }
  if (std::string why = integrity_mismatch(o_, *peer); !why.empty()) return why;
  const int b = peer->rank;
  PeerLink link = make_link(o_, std::move(sock), *peer, session);
  const Deadline deadline = Deadline::after(o_.handshake_timeout);
  {
    std::unique_lock lk(mu_);
    State& st = state_[static_cast<size_t>(b)];
    bool closed;
    {
      std::lock_guard ml(mesh_.mu_);
      closed = mesh_.closed_;
    }
    // Ours wins when we are dialling it too and are the higher rank; a second connection from a
    // rank already connected is refused the same way.
    if (closed || st == State::Ready || st == State::Accepting ||
        (st == State::Dialing && o_.rank > b)) {
      lk.unlock();
      try {
        send_setup_message(link, "dup", deadline);
      } catch (const std::exception&) {
      }
      return "";
    }
    st = State::Accepting;
  }
  try {
    send_setup_message(link, "ok", deadline);
    auto pair = make_pair(o_, b, link, local_pairs_, deadline);
    mesh_.publish(b, std::move(pair), data_seal(o_, link));
    std::lock_guard lk(mu_);
    state_[static_cast<size_t>(b)] = State::Ready;
  } catch (const std::exception& e) {
    spdlog::warn("communicator (rank {}): connection from rank {} failed: {}", o_.rank, b,
                 e.what());
    std::lock_guard lk(mu_);
    state_[static_cast<size_t>(b)] = State::None;
  }
  cv_.notify_all();
  return "";
}

transport::Pair& Mesh::Lazy::wait_for(int r, Deadline deadline, std::unique_lock<std::mutex>& lk) {
  const size_t i = static_cast<size_t>(r);
  cv_.wait_until(lk, deadline.at(),
                 [&] { return state_[i] == State::Ready || state_[i] == State::None; });
  if (transport::Pair* p = mesh_.ready_[i].load(std::memory_order_acquire)) return *p;
  throw StallError(r, "waiting for rank " + std::to_string(r) + " to connect");
}

transport::Pair& Mesh::Lazy::connect(int r, Deadline deadline) {
  const size_t i = static_cast<size_t>(r);
  {
    std::unique_lock lk(mu_);
    {
      std::lock_guard ml(mesh_.mu_);
      if (mesh_.closed_) {
        throw AbortedError("rank " + std::to_string(o_.rank) + " is shut down; no new pair to " +
                           std::to_string(r));
      }
    }
    if (state_[i] == State::Ready || state_[i] == State::Accepting)
      return wait_for(r, deadline, lk);
    state_[i] = State::Dialing;
  }
  try {
    PeerLink link = dial_peer(store_, o_, me_, r, deadline);
    std::string verdict;
    std::unique_ptr<transport::Pair> pair;
    try {
      verdict = recv_setup_message(link, r, deadline);
      if (verdict == "ok") pair = make_pair(o_, r, link, local_pairs_, deadline);
    } catch (const StallError&) {
      throw;
    } catch (const TimeoutError& e) {
      // Named as every other wait on a peer is: the rank that did not answer.
      throw StallError(r, "setting up the pair to rank " + std::to_string(r) + ": " + e.what());
    } catch (const PeerLostError& e) {
      if (e.rank() >= 0) throw;
      throw PeerLostError(r, "rank " + std::to_string(o_.rank) + " lost its connection to rank " +
                                 std::to_string(r) + " while setting up their pair: " + e.what());
    }
    if (verdict == "ok") {
      mesh_.publish(r, std::move(pair), data_seal(o_, link));
      std::lock_guard lk(mu_);
      state_[i] = State::Ready;
    } else if (verdict != "dup") {
      throw ProtocolError("rank " + std::to_string(r) + " answered a connection with '" + verdict +
                          "'");
    } else {
      // The peer keeps the connection it dials to this rank: the acceptor publishes it (it may
      // be setting it up already).
      std::unique_lock lk(mu_);
      if (state_[i] == State::Dialing) state_[i] = State::AwaitingPeer;
      cv_.wait_until(lk, deadline.at(), [&] {
        return state_[i] != State::AwaitingPeer && state_[i] != State::Accepting;
      });
      if (transport::Pair* p = mesh_.ready_[i].load(std::memory_order_acquire)) return *p;
      throw StallError(r, "waiting for rank " + std::to_string(r) + " to connect");
    }
  } catch (...) {
    std::lock_guard lk(mu_);
    if (state_[i] != State::Ready) state_[i] = State::None;
    throw;
  }
  cv_.notify_all();
  return *mesh_.ready_[i].load(std::memory_order_acquire);
}

}  // namespace cohort::comm
