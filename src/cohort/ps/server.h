// A parameter server: holds shards of the job's parameter table (shard.h), applies the workers'
// pushes with the job's optimizer, answers their pulls, and copies every change to the shard's
// backup before it answers, so that its death loses no acknowledged push (view.h).
//
// One thread serves every connection (net::FrameServer): the workers' requests and, on a backup,
// the primary's replication stream. A request that changes a shard (init, push_pull, control) is
// applied on the primary, forwarded to the backup over a link the primary opens to it, and
// answered once the backup acknowledged it; a pull that asks for a version the shard has not
// reached (ssp) waits in the shard until a push completes the clock. The backup runs the same
// requests in the primary's order through the same code, so it holds the same shard, reads
// included. A backup that is new (a replacement) first receives the whole shard (sync); so does
// one whose link broke.
//
// A second thread talks to the job's store: it heartbeats, registers, watches for new views and
// says when a new backup holds its shard. A server that finds itself left out of a view (the
// launcher declared it lost) or cut off from the store for the failure timeout stops at once:
// a stale primary never goes on answering on its own. Its backup would refuse its replication
// anyway, so it could not acknowledge anything.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "cohort/net/socket.h"
#include "cohort/ps/shard.h"

namespace cohort::ps {

// What every server of a job runs with (ps/settings in the job's store, written by the launcher).
struct ServerSettings {
  int servers = 1;
  ShardSettings shard{};
  std::chrono::milliseconds heartbeat{1000};
  std::chrono::milliseconds failure_timeout{10000};
  // The largest message a server accepts (a shard's pull or push and its header).
  size_t max_message_bytes = size_t{1} << 30;
  std::string to_json() const;
  static ServerSettings parse(const std::string& text);  // throws ProtocolError
  bool operator==(const ServerSettings&) const = default;
};

struct ServerOptions {
  int index = 0;      // which of the job's servers this process is
  std::string store;  // the job's store (store/connect.h)
  std::string token;  // the job token
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;
  // The host workers reach this server at (default: bind_host, or this host's address towards
  // the store when bound to every address).
  std::string advertise_host;
};

class Server {
 public:
  // Connects to the store, reads the settings, starts serving and registers (the launcher's
  // ViewManager then puts it in a view). Throws when the store cannot be reached.
  explicit Server(const ServerOptions& options);
  ~Server();
  Server(const Server&) = delete;
  Server& operator=(const Server&) = delete;

  // Blocks until the server stops: stop() was called (returns ""), or it fenced itself (returns
  // why: left out of a view, cut off from the store).
  std::string wait();
  void stop();
  net::Endpoint endpoint() const;
  uint64_t incarnation() const;

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace cohort::ps
