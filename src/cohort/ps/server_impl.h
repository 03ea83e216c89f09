// The parts of a parameter server (server.h): server.cc sets it up and keeps its view, its links
// to backups and its store thread; server_requests.cc serves requests. Not a public header.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <thread>
#include <vector>

#include "cohort/net/frame_server.h"
#include "cohort/ps/protocol.h"
#include "cohort/ps/server.h"
#include "cohort/ps/view.h"
#include "cohort/store/store.h"

namespace cohort::ps {

using ConnId = net::FrameServer::ConnId;

class Server::Impl : public net::FrameServer::Handler {
 public:
  explicit Impl(const ServerOptions& options);
  ~Impl() override;

  std::string wait();
  void stop();
  net::Endpoint endpoint() const { return server_.endpoint(); }
  uint64_t incarnation() const { return incarnation_; }

  // net::FrameServer::Handler (the loop thread)
  void on_frame(ConnId conn, net::Frame frame) override;
  void on_ready(ConnId conn, const std::string& peer_info, bool adopted) override;
  void on_closed(ConnId conn) override;
  Deadline next_deadline() override;
  void on_tick() override;

 private:
  // A request that waits to be answered: for its backup's acknowledgement (replicated when the
  // shard's acked_upto reaches fwd), for the version its pull asks (ssp), or both. On a backup
  // the same requests wait without a connection (conn 0): their reads are recorded, nothing sent.
  struct Waiting {
    ConnId conn = 0;
    Response response;
    uint64_t fwd = 0;  // 0: nothing to wait for
    bool pull = false, pulled = false;
    // A worker's push_pull, whose answer waits while another slot evaluates (a pause).
    bool holdable = false;
    std::optional<Clock::time_point> held_since;
    Deadline notice_by = Deadline::never();  // while held: when to say so again (kHeld)
    uint32_t slot = 0;
    int64_t min_version = 0;
    int64_t min_clock = 0;
    Deadline answer_by = Deadline::never();  // a pull's wait_ms
    // A push_pull's fresh_ms: until fresh_by, the answer waits for this version too.
    std::vector<Range> ranges;
    int64_t fresh_version = 0;
    Deadline fresh_by = Deadline(Clock::time_point::min());
  };
  // A change forwarded (or to be forwarded) to the backup, in order; a sync carries the whole
  // shard and stands for every change before it.
  struct Forward {
    uint64_t id = 0;
    std::vector<uint8_t> payload;  // a kReplicate or kSync request
    bool sent = false;
    bool sync = false;
  };
  struct Held {
    std::optional<Shard> shard;
    std::deque<Waiting> waiting;
    // As primary: the backup forwarded to, and the changes not yet acknowledged.
    int backup = -1;
    uint64_t backup_incarnation = 0;
    bool backup_synced = false;
    uint64_t acked_upto = 0;  // every forward up to this id is on the backup
    std::deque<Forward> forwards;
  };
  struct Link {
    uint64_t incarnation = 0;
    std::optional<ConnId> conn;
    bool connecting = false;
    Deadline retry_at = Deadline::never();
  };
  // Another slot's answers wait while `slot` evaluates (Control::kPause).
  struct Pause {
    uint32_t slot = 0;
    // Pause requests not yet answered: each waits for more held slots than it knew of, or a
    // short while (the pausing worker asks again).
    struct Ask {
      ConnId conn = 0;
      Response response;
      uint32_t known = 0;
      Deadline answer_by = Deadline::never();
    };
    std::vector<Ask> asks;
    std::set<ConnId> conns;  // the pausing worker's connections
  };
  // A thread that makes a link (connect and handshake block).
  struct Connector {
    std::thread thread;
    std::shared_ptr<std::atomic<bool>> done;
  };

  // --- server.cc: set-up, views, links ---
  void store_loop();
  void fence(const std::string& why);
  void join_connectors(bool all);
  void adopt_view(const View& v);
  void configure_backup(uint32_t shard, Held& h);
  void step_down(uint32_t shard, Held& h);
  size_t send_elsewhere(Held& h, const std::string& why);
  void connect_link(int server);
  void link_up(int server, ConnId conn);
  void link_down(int server);
  void send_forwards(uint32_t shard, Held& h);
  void on_forward_ack(ConnId conn, const Response& r);
  uint64_t forward(uint32_t shard, Held& h, const std::vector<uint8_t>& request_payload);
  bool is_primary(uint32_t shard) const;
  std::string name() const;

  // --- server_requests.cc: requests ---
  void handle_request(ConnId conn, const Request& q, const std::vector<uint8_t>& payload);
  void handle_replica(ConnId conn, const Request& q);
  // Applies a change to `h` (primary and backup alike); the Waiting for its answer, or nullopt
  // when it was answered already (an error, status, snapshot).
  std::optional<Waiting> apply(uint32_t shard, Held& h, const Request& q, Response& r);
  void resolve(Held& h);
  void handle_pause(ConnId conn, const Request& q);
  // Answers the pause requests once every other active slot waits here (or at the deadline).
  void check_pause();
  void end_pause();
  // Tells the worker of a held answer that it is held (Status::kHeld), so its deadline restarts.
  void notice_held(Waiting& w);
  void answer(ConnId conn, const Response& r);
  Response base_response(const Request& q, const Held* h) const;
  std::vector<uint8_t> status_body(const Shard& s) const;

  const ServerOptions options_;
  std::unique_ptr<store::Store> store_;  // the store thread's (and set-up's)
  const ServerSettings settings_;
  const uint64_t incarnation_;
  std::string info_;  // this server's handshake info: "ps-server <index> <incarnation>"

  // Loop thread only.
  View view_;
  bool in_view_ = false;  // view_ names this process (not an earlier one of its index)
  std::map<uint32_t, Held> shards_;
  std::map<int, Link> links_;         // by backup server index
  std::map<ConnId, int> link_conns_;  // an adopted link's connection -> server index
  std::map<ConnId, std::string> peers_;
  std::set<ConnId> busy_;  // workers' connections with a request in flight
  std::optional<Pause> pause_;
  uint64_t next_fwd_ = 1;  // forwards' ids, across shards (a backup acknowledges by id)
  // Replication from a primary of a newer view, for a shard this server still serves in its own:
  // applied, in order, once that view is here (a hand-back's new primary syncs at once).
  std::deque<std::pair<ConnId, Request>> deferred_;

  // Between threads.
  std::mutex mu_;
  std::condition_variable cv_;
  bool done_ = false;
  std::string fenced_;
  std::vector<std::string> synced_notes_;  // keys the store thread sets
  std::atomic<bool> stopping_{false};
  std::atomic<bool> fenced_flag_{false};
  std::thread store_thread_;
  std::mutex connectors_mu_;
  std::vector<Connector> connectors_;

  net::FrameServer server_;  // last: stopped first
};

// Handshake infos.
std::string server_info(int index, uint64_t incarnation);
// The index and incarnation of a peer that says it is a server; nullopt otherwise.
std::optional<std::pair<int, uint64_t>> parse_server_info(const std::string& info);

}  // namespace cohort::ps
