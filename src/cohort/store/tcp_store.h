// TCP Store: a StoreServer (embedded in the coordinator or launcher process) holds the keys; every
// rank talks to it through a TcpStore client. Clients authenticate with the job token
// (net/handshake) before the server reads a single request; bad clients cost one log line.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <string>

#include "cohort/net/socket.h"
#include "cohort/store/store.h"

namespace cohort::store {

struct StoreServerOptions {
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;  // 0: pick a free port
  std::string token;
  // A connection that has not finished its handshake by then is closed (slow-loris defence).
  std::chrono::milliseconds handshake_timeout{5000};
  // Clients served at once: the ranks of a large job (a 1,024-rank communicator's ranks, its
  // launcher and their heartbeats) must fit. The process's open-file limit is raised to match.
  size_t max_connections = 4096;
  // Connections still in their handshake at once (net::FrameServerOptions::max_handshakes).
  size_t max_handshakes = 256;
  size_t max_value_bytes = 16u << 20;
  // A file that keeps the keys as they change (journal.h): when it exists, the server starts with
  // the keys it holds. Empty: the keys live in memory alone.
  std::string journal;
};

// Serves the store on its own thread until destroyed or stop() is called.
class StoreServer {
 public:
  explicit StoreServer(const StoreServerOptions& options);
  ~StoreServer();
  StoreServer(const StoreServer&) = delete;
  StoreServer& operator=(const StoreServer&) = delete;

  uint16_t port() const;
  net::Endpoint endpoint() const;
  void stop();

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

struct StoreRequest;
struct StoreResponse;

// Client of a StoreServer. Thread-safe, one request at a time: a get() or wait() that blocks holds
// the connection, so threads that block on keys other threads set should use their own TcpStore.
// Failures name the server: TimeoutError (naming the keys), PeerLostError (connection lost),
// AuthError (token mismatch), Error (the server refused the request, e.g. add on a non-integer).
class TcpStore : public Store {
 public:
  // Connects (retrying until timeout while the server is not up yet) and authenticates.
  TcpStore(const net::Endpoint& server, const std::string& token,
           std::chrono::milliseconds timeout = std::chrono::seconds(30));
  ~TcpStore() override;
  // How long a call spends connecting again after the connection was lost (at most the store's
  // timeout). A worker whose coordinator is gone learns it within this, not within the timeout of
  // whatever it was waiting for.
  void set_reconnect_timeout(std::chrono::milliseconds t) { reconnect_timeout_ = t; }

  void set(const std::string& key, const Bytes& value) override;
  Bytes get(const std::string& key) override;
  int64_t add(const std::string& key, int64_t delta) override;
  Bytes compare_set(const std::string& key, const Bytes& expected, const Bytes& desired) override;
  bool delete_key(const std::string& key) override;
  bool check(const std::vector<std::string>& keys) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  using Store::wait;

 private:
  // Sends q and returns the server's ok response; throws on error and timeout responses. A lost
  // connection is made again first, within connect_timeout (never more than the store's timeout).
  StoreResponse call(const StoreRequest& q, std::chrono::milliseconds io_timeout,
                     std::chrono::milliseconds connect_timeout = std::chrono::milliseconds::max());

  class Conn;
  std::unique_ptr<Conn> conn_;
  std::mutex mu_;  // one request at a time on the connection
  std::chrono::milliseconds reconnect_timeout_ = std::chrono::milliseconds::max();
};

}  // namespace cohort::store
