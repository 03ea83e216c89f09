// FrameServer: one thread, one epoll(7) loop, many authenticated connections of framed messages.
// The store server and the parameter servers are its handlers.
//
// Each accepted connection moves through  Hello -> Response -> Ready  (or -> Closing after a
// failed handshake, which flushes a Reject and then closes). The handshake is the
// net::ServerHandshake state machine fed with frames assembled by a non-blocking FrameReader, so
// a client that trickles bytes or sends nothing costs one pollfd and is closed at its handshake
// deadline; it never delays anyone else. Frames of a Ready connection go to the handler.
//
// An accepted connection with output not yet flushed is not read from: a peer that does not read
// its responses holds at most one request and one response in memory. (An adopted connection, a
// link this side opened to another server, is full duplex: both ends stream.) Garbage, a
// truncated frame or one over the size limit closes that connection with one log line; the
// server goes on.
//
// Handler calls, send() and close() happen on the loop thread; post() and adopt() may be called
// from any thread and run their work there.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/net/frame.h"
#include "cohort/net/socket.h"

namespace cohort::net {

struct FrameServerOptions {
  std::string name = "server";  // starts its log lines: "<name> on HOST:PORT: ..."
  std::string bind_host = "127.0.0.1";
  uint16_t port = 0;  // 0: pick a free port
  std::string token;
  std::string info;  // this side's handshake info
  // A connection that has not finished its handshake by then is closed (slow-loris defence).
  std::chrono::milliseconds handshake_timeout{5000};
  // Authenticated connections at once; a client past it is refused (and dials again).
  size_t max_connections = 4096;
  // Connections still in their handshake at once, counted apart: past it the oldest is closed to
  // make room, so that clients which never authenticate cannot keep the job's own out.
  size_t max_handshakes = 256;
  // Largest frame an authenticated connection may send.
  size_t max_frame_bytes = kDefaultMaxFrame;
};

class FrameServer {
 public:
  using ConnId = uint64_t;

  class Handler {
   public:
    virtual ~Handler() = default;
    // A frame of an authenticated connection. An exception closes the connection, its message
    // the reason (one warning).
    virtual void on_frame(ConnId conn, Frame frame) = 0;
    // A connection became Ready: the peer's handshake info, and whether this side opened it
    // (adopt()) rather than accepted it.
    virtual void on_ready(ConnId conn, const std::string& peer_info, bool adopted) {
      (void)conn, (void)peer_info, (void)adopted;
    }
    virtual void on_closed(ConnId conn) { (void)conn; }
    // The earliest deadline the handler waits for; on_tick() runs after every round of the loop.
    virtual Deadline next_deadline() { return Deadline::never(); }
    virtual void on_tick() {}
  };

  // Binds the listener; serving starts with start().
  FrameServer(FrameServerOptions options, Handler& handler);
  ~FrameServer();
  FrameServer(const FrameServer&) = delete;
  FrameServer& operator=(const FrameServer&) = delete;

  void start();
  void stop();
  uint16_t port() const { return listener_.port(); }
  Endpoint endpoint() const { return endpoint_; }
  const std::string& name() const { return who_; }

  // --- loop thread ---
  // Queues a frame and sends what the socket takes now. A lost peer closes the connection.
  void send(ConnId conn, MsgType type, const std::vector<uint8_t>& payload);
  void close(ConnId conn, const std::string& reason, bool warn);
  bool is_open(ConnId conn) const { return conns_.count(conn) != 0; }
  std::string peer(ConnId conn) const;

  // --- any thread ---
  // Runs fn on the loop thread soon (in the order posted).
  void post(std::function<void()> fn);
  // An outgoing connection another thread made and authenticated: served like an accepted one
  // (on_ready gets its id, then its frames).
  void adopt(Socket sock, std::string peer_info);

 private:
  enum class State { kHello, kResponse, kReady, kClosing };
  struct Conn;

  void run();
  void loop_once();
  Deadline next_deadline() const;
  void accept_clients();
  void add_ready(Socket sock, std::string peer, const std::string& info);
  void serve(ConnId id, short revents);
  void read_from(Conn& c, short revents);
  void handle_frame(Conn& c, Frame f);
  void flush(Conn& c);
  void expire();
  void run_posted();
  // Registers c with the epoll set for what it waits for now (output to flush, a request to read).
  void watch(Conn& c);
  void set_deadline(Conn& c, Deadline d);
  void set_listening(bool on);

  FrameServerOptions opts_;
  Handler& handler_;
  Listener listener_;
  Endpoint endpoint_;
  std::string who_;
  int wake_fd_ = -1;
  int epoll_fd_ = -1;
  bool listening_ = true;
  std::atomic<bool> stopping_{false};
  std::mutex stop_mu_;
  Deadline accept_paused_until_ = Deadline(Clock::time_point::min());
  ConnId next_id_ = 1;
  std::map<ConnId, std::unique_ptr<Conn>> conns_;
  // The connections with a deadline (handshaking, or lingering after a Reject): the loop's
  // timers and expiry look at these only, not at every connection.
  std::set<ConnId> timed_;
  std::set<ConnId> handshaking_;  // not authenticated (yet): the oldest first
  std::mutex post_mu_;
  std::vector<std::function<void()>> posted_;
  std::thread thread_;
};

}  // namespace cohort::net
