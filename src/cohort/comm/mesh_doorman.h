// Internal to the mesh: the accepting side of its connections.
//
// A Doorman owns a rank's listener and runs the server side of the handshake of every connection
// that arrives, each driven by the bytes it has sent (poll), so that no connection ever blocks
// the others. Anything that is not a well-behaved peer (garbage, a wrong token, a connection that
// falls silent for the handshake timeout, or keeps sending without finishing the handshake for
// kHandshakeLifetimes of it) costs one log line and is closed. Pending connections are bounded in
// number: beyond the bound the oldest one is dropped (a real peer dials again).
#pragma once

#include <atomic>
#include <chrono>
#include <deque>
#include <functional>
#include <string>

#include "cohort/base/clock.h"
#include "cohort/comm/communicator.h"
#include "cohort/net/frame_stream.h"
#include "cohort/net/handshake.h"
#include "cohort/net/socket.h"

namespace cohort::comm {

class Doorman {
 public:
  // A pending handshake is dropped once it has lasted this many times the silence it may keep,
  // however often it sends: a real peer sends two messages (its hello, its response), each at
  // most a silence after the last thing it heard, while a connection that trickles a byte at a
  // time would otherwise hold its slot for as long as its frames allow.
  static constexpr int kHandshakeLifetimes = 4;

  // What to do with a connection that proved the token: `info` is what the peer stated about
  // itself, `session` the connection's session key, `from` its address (for log lines). Return
  // an empty string to keep the socket (it has been moved from), or why it is refused (it is then
  // closed with a log line).
  using OnPeer = std::function<std::string(const std::string& info, const net::SessionKey& session,
                                           net::Socket& sock, const std::string& from)>;

  // `me` is what this rank states about itself in the handshake.
  Doorman(const CommConfig& o, std::string me, net::Listener listener);

  uint16_t port() const { return listener_.port(); }
  // Bounds the pending handshakes (at least 32).
  void set_max_pending(size_t n) { max_pending_ = n; }
  // How long a pending connection may stay silent (CommConfig::handshake_timeout until set); may
  // be called from another thread than poll_once's.
  void set_handshake_timeout(std::chrono::milliseconds t) { silence_ms_ = t.count(); }
  // Waits until `until`, or until something arrives on the listener, a pending handshake or
  // `wake_fd` (when >= 0: readable means wake up, and the caller drains it), and moves every
  // handshake on with what has arrived.
  void poll_once(Deadline until, int wake_fd, const OnPeer& on_peer);
  // Closes every pending connection.
  void drop_all(const std::string& why);

 private:
  struct Pending {
    net::Socket sock;
    Clock::time_point arrived;
    Clock::time_point heard;  // accepted, or last sent something
    std::string from;
    net::ServerHandshake hs;
    net::FrameReader reader;
    net::FrameWriter writer;
    bool challenged = false;  // the hello is answered
    bool accepted = false;    // the client proved the token; Accept is queued
  };

  void drop(Pending& p, const std::string& why) const;
  // Moves p's handshake on with what has arrived; true once p is done with (kept or dropped).
  bool advance(Pending& p, const OnPeer& on_peer);
  void accept_new();

  const CommConfig& o_;
  const std::string me_;
  net::Listener listener_;
  std::deque<Pending> pending_;
  size_t max_pending_ = 32;
  std::atomic<int64_t> silence_ms_;
};

}  // namespace cohort::comm
