// TcpStore: the client side. One connection, one request in flight at a time (under mu_).
// After a failed call (timeout, lost connection, garbled response) the connection may be out of
// step with the server, so it is dropped, and the next call connects and authenticates afresh.
#include "cohort/store/tcp_store.h"

#include <algorithm>
#include <thread>

#include <spdlog/spdlog.h>

#include "cohort/base/error.h"
#include "cohort/net/frame.h"
#include "cohort/net/handshake.h"
#include "cohort/store/memory_store.h"
#include "cohort/store/store_protocol.h"

namespace cohort::store {
namespace {

constexpr const char* kClientInfo = "cohort store client";
// A parked get/wait is answered by the server at its deadline; the client allows this much more
// for the answer to arrive before it gives up on its own.
constexpr Millis kServerGrace{2000};

// Client-side bound for a server-side wait of t: t plus the grace, saturating.
Millis with_grace(Millis t) {
  constexpr Millis kMaxWait = std::chrono::hours(24 * 7);
  return std::clamp(t, Millis(0), kMaxWait) + kServerGrace;
}

// " (it closed the connection during the handshake N times)", for a connect's timeout, when it did.
std::string times_closed(int n) {
  if (n == 0) return "";
  return " (it closed the connection during the handshake " + std::to_string(n) +
         (n == 1 ? " time)" : " times)");
}

std::string keys_text(const std::vector<std::string>& keys) {
  return keys.size() == 1 ? "key '" + keys.front() + "'" : "keys " + describe_missing(keys);
}

}  // namespace

class TcpStore::Conn {
 public:
  Conn(net::Endpoint server, std::string token) : server_(std::move(server)), token_(token) {}

  // A server that closes the connection before the handshake completes is one that is stopping,
  // full (max_connections) or that found this client too slow (its handshake deadline, which a
  // client starved of CPU can overrun): it is dialled again, with backoff, until `timeout`.
  void connect(Millis timeout) {
    auto deadline = Deadline::after(timeout);
    const std::string where = "store server " + server_.str();
    int closed = 0;
    for (Millis backoff{20};; backoff = std::min(backoff * 2, Millis(500))) {
      try {
        sock_ = net::Socket::connect(server_, deadline);
        net::handshake_as_client(sock_, token_, kClientInfo, deadline);
        return;
      } catch (const AuthError& e) {
        sock_.close();
        throw AuthError(where + ": " + e.what());
      } catch (const TimeoutError& e) {
        sock_.close();
        throw TimeoutError("could not reach " + where + " within " +
                           std::to_string(timeout.count()) + " ms" + times_closed(closed) + ": " +
                           e.what());
      } catch (const PeerLostError& e) {
        sock_.close();
        ++closed;
        if (deadline.expired()) {
          throw PeerLostError(-1, where + " closed the connection during the handshake (" +
                                      std::to_string(closed) + " attempts in " +
                                      std::to_string(timeout.count()) + " ms): " + e.what());
        }
        spdlog::debug("{} closed the connection during the handshake ({}); again", where,
                      e.what());
        std::this_thread::sleep_for(std::min<Millis>(backoff, deadline.remaining()));
      } catch (const ProtocolError& e) {
        sock_.close();
        throw ProtocolError(where + ": " + e.what());
      }
    }
  }

  // One request/response exchange. `io_timeout` bounds the whole exchange on the client side.
  StoreResponse call(const StoreRequest& q, Millis connect_timeout, Millis io_timeout) {
    if (!sock_.valid()) connect(connect_timeout);
    const std::string what = std::string("store ") + op_name(q.op) + " of " + keys_text(q.keys) +
                             " (store server " + server_.str() + ")";
    auto deadline = Deadline::after(io_timeout);
    try {
      net::write_frame(sock_, net::MsgType::kStoreRequest, encode_request(q), deadline);
      net::Frame f = net::read_frame_of(sock_, net::MsgType::kStoreResponse, deadline);
      return decode_response(q.op, f.payload);
    } catch (const TimeoutError& e) {
      sock_.close();
      throw TimeoutError(what + " timed out after " + std::to_string(io_timeout.count()) +
                         " ms: " + e.what());
    } catch (const PeerLostError& e) {
      sock_.close();
      throw PeerLostError(-1, "lost the connection during " + what + ": " + e.what());
    } catch (const ProtocolError& e) {
      sock_.close();
      throw ProtocolError("bad response to " + what + ": " + e.what());
    } catch (const Error&) {
      sock_.close();
      throw;
    }
  }

  const net::Endpoint& server() const { return server_; }

 private:
  net::Endpoint server_;
  std::string token_;
  net::Socket sock_;
};

TcpStore::TcpStore(const net::Endpoint& server, const std::string& token,
                   std::chrono::milliseconds timeout)
    : conn_(std::make_unique<Conn>(server, token)) {
  timeout_ = timeout;
  conn_->connect(timeout);
}

TcpStore::~TcpStore() = default;

StoreResponse TcpStore::call(const StoreRequest& q, Millis io_timeout, Millis connect_timeout) {
  std::lock_guard lk(mu_);
  StoreResponse r =
      conn_->call(q, std::min({timeout_, connect_timeout, reconnect_timeout_}), io_timeout);
  const std::string where = " (store server " + conn_->server().str() + ")";
  if (r.status == StoreStatus::kError) {
    throw Error(std::string("store ") + op_name(q.op) + " of " + keys_text(q.keys) +
                " failed: " + r.error + where);
  }
  if (r.status == StoreStatus::kTimeout) {
    throw TimeoutError(std::string("store ") + op_name(q.op) + " timed out after " +
                       std::to_string(q.timeout_ms) +
                       " ms; missing keys: " + describe_missing(r.missing) + where);
  }
  return r;
}

void TcpStore::set(const std::string& key, const Bytes& value) {
  call({.op = StoreOp::kSet, .keys = {key}, .value = value}, timeout_);
}

Bytes TcpStore::get(const std::string& key) {
  StoreRequest q{.op = StoreOp::kGet, .keys = {key}, .timeout_ms = uint64_t(timeout_.count())};
  return call(q, with_grace(timeout_)).value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  return call({.op = StoreOp::kAdd, .keys = {key}, .delta = delta}, timeout_).number;
}

Bytes TcpStore::compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) {
  StoreRequest q{.op = StoreOp::kCompareSet, .keys = {key}, .value = expected, .desired = desired};
  return call(q, timeout_).value;
}

bool TcpStore::delete_key(const std::string& key) {
  return call({.op = StoreOp::kDelete, .keys = {key}}, timeout_).number != 0;
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  return call({.op = StoreOp::kCheck, .keys = keys}, timeout_).number != 0;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  timeout = std::max(timeout, Millis(0));
  StoreRequest q{.op = StoreOp::kWait, .keys = keys, .timeout_ms = uint64_t(timeout.count())};
  // No longer reconnecting than the wait may take: a short wait on a server that is gone returns
  // at its own deadline, not the store's.
  call(q, with_grace(timeout), timeout);
}

}  // namespace cohort::store
