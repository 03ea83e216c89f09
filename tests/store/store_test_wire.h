// Helpers for talking to a StoreServer by hand (to break the rules on purpose) and for counting
// the log lines the server writes about it.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <spdlog/sinks/base_sink.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "cohort/base/clock.h"
#include "cohort/base/error.h"
#include "cohort/net/frame.h"
#include "cohort/net/handshake.h"
#include "cohort/net/socket.h"

namespace cohort::store::testing {

// Installs itself as spdlog's default logger and records every line at debug level and above.
// Construct it before any server and destroy it after (the default logger is not swapped safely
// while another thread logs).
class LogCapture {
 public:
  LogCapture() : prev_(spdlog::default_logger()), sink_(std::make_shared<Sink>()) {
    auto logger = std::make_shared<spdlog::logger>("capture", sink_);
    logger->set_level(spdlog::level::debug);
    spdlog::set_default_logger(logger);
  }
  ~LogCapture() { spdlog::set_default_logger(prev_); }

  // Warnings whose text contains `part`.
  size_t warnings(const std::string& part) const { return sink_->count(spdlog::level::warn, part); }
  // Waits until at least n warnings contain `part` (the server logs from its own thread).
  bool wait_for_warnings(const std::string& part, size_t n, Millis limit) const {
    return wait_for(spdlog::level::warn, part, n, limit);
  }
  // The same for debug lines: what the server did (a waiter parked, a client left).
  bool wait_for_debug(const std::string& part, size_t n, Millis limit) const {
    return wait_for(spdlog::level::debug, part, n, limit);
  }
  std::string dump() const { return sink_->dump(); }

 private:
  bool wait_for(spdlog::level::level_enum level, const std::string& part, size_t n,
                Millis limit) const {
    auto deadline = Deadline::after(limit);
    while (sink_->count(level, part) < n) {
      if (deadline.expired()) return false;
      std::this_thread::sleep_for(Millis(5));
    }
    return true;
  }

  class Sink : public spdlog::sinks::base_sink<std::mutex> {
   public:
    size_t count(spdlog::level::level_enum lvl, const std::string& part) {
      std::lock_guard lk(this->mutex_);
      size_t n = 0;
      for (const auto& [l, text] : lines_) n += (l == lvl && text.find(part) != std::string::npos);
      return n;
    }
    std::string dump() {
      std::lock_guard lk(this->mutex_);
      std::string s;
      for (const auto& [l, text] : lines_) s += text + "\n";
      return s;
    }

   protected:
    void sink_it_(const spdlog::details::log_msg& m) override {
      lines_.emplace_back(m.level, std::string(m.payload.data(), m.payload.size()));
    }
    void flush_() override {}

   private:
    std::vector<std::pair<spdlog::level::level_enum, std::string>> lines_;
  };

  std::shared_ptr<spdlog::logger> prev_;
  std::shared_ptr<Sink> sink_;
};

inline std::vector<uint8_t> frame_bytes(uint16_t type, const std::vector<uint8_t>& payload,
                                        uint64_t length_field, uint32_t magic = net::kFrameMagic,
                                        uint16_t version = net::kWireVersion) {
  net::FrameHeader h{magic, version, type, length_field};
  std::vector<uint8_t> b(net::kFrameHeaderBytes + payload.size());
  std::memcpy(b.data(), &h, net::kFrameHeaderBytes);
  // GCC 12 at -O2 with -fsanitize=thread, inlining this with an empty payload, warns that the
  // guarded copy below writes past the header (-Warray-bounds, -Wstringop-overflow): it never
  // runs then. Rewritten with vector::insert, the release build warns the same way.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Warray-bounds"
#ifndef __clang__
#pragma GCC diagnostic ignored "-Wstringop-overflow"
#endif
  if (!payload.empty())
    std::memcpy(b.data() + net::kFrameHeaderBytes, payload.data(), payload.size());
#pragma GCC diagnostic pop
  return b;
}
inline std::vector<uint8_t> frame_bytes(net::MsgType type, const std::vector<uint8_t>& payload) {
  return frame_bytes(static_cast<uint16_t>(type), payload, payload.size());
}

// One hand-driven connection to the server.
class RawClient {
 public:
  explicit RawClient(const net::Endpoint& server)
      : sock_(net::Socket::connect(server, Deadline::after(Millis(5000)))) {
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    getsockname(sock_.fd(), reinterpret_cast<sockaddr*>(&ss), &len);
    local_ = "127.0.0.1:" + std::to_string(ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port));
  }
  // The address the server sees (and must name in its log line).
  const std::string& local() const { return local_; }
  net::Socket& sock() { return sock_; }

  void send(const std::vector<uint8_t>& bytes) {
    sock_.send_all(bytes.data(), bytes.size(), Deadline::after(Millis(5000)));
  }
  void handshake(const std::string& token) {
    net::handshake_as_client(sock_, token, "raw", Deadline::after(Millis(5000)));
  }
  void shutdown_write() { ::shutdown(sock_.fd(), SHUT_WR); }

  // Reads and discards until the server closes the connection. Returns the time it took, or
  // nullopt if the connection was still open after `limit`.
  std::optional<Millis> wait_closed(Millis limit) {
    auto t0 = Clock::now();
    auto deadline = Deadline::after(limit);
    uint8_t scratch[4096];
    try {
      for (;;) {
        if (!net::wait_fd(sock_.fd(), POLLIN, deadline)) return std::nullopt;
        sock_.recv_some(scratch, sizeof(scratch));
      }
    } catch (const PeerLostError&) {
      return std::chrono::duration_cast<Millis>(Clock::now() - t0);
    }
  }

 private:
  net::Socket sock_;
  std::string local_;
};

}  // namespace cohort::store::testing
