// The shared-memory transport: a Pair between two ranks of one host over a segment in /dev/shm
// holding one single-producer single-consumer ring per direction.
//
// Data never touches the kernel: the sender copies into the ring and publishes its new head, the
// receiver copies out and publishes its new tail. Waiting uses the pair's TCP connection, which
// carries no data any more, as a doorbell: a side about to sleep sets a flag in the segment and
// polls the socket; the other side, after moving its end of the ring, clears the flag and writes
// one byte to the socket. A wake-up therefore costs one small write, only when the other side
// really sleeps (a spinning wait never sets the flag), and one poll(2) can watch shared-memory and
// TCP pairs together. The connection is also how a dead peer is noticed: the kernel closes a
// killed process's socket, so a rank waiting on its ring sees the doorbell close, exactly as over
// TCP. A stopped peer is caught by the operation's deadline, as over TCP.
//
// Large sends whose peer reads them as they go (Delivery::Rendezvous: a collective's frames) are
// copied once, not twice (the single-copy path, as Open MPI's vader does with CMA): instead of
// copying a frame into the ring, the sender describes where its bytes are in its
// own memory and the receiver copies them straight into its buffer with process_vm_readv(2). The
// sender's buffer stays untouched until the receiver has taken every byte (send_some counts bytes
// as sent only once they have been read), and a receiver uses the bytes it read only if the pair
// was still open after the copy: a sender that fails marks the pair closed before it gives its
// buffers back. A receiver the kernel does not let read the sender's memory (ptrace rules, Yama,
// a seccomp filter) says so once in the segment and the pair copies through the ring from then on.
//
// The segment's name exists only during setup: the rank that opens it removes it at once and the
// creator removes it when the other side answers (or fails to), so nothing stays in /dev/shm after
// either rank dies. Its size is fixed at creation and its pages are allocated then
// (posix_fallocate), so a /dev/shm too small for it fails at setup (SystemError, ENOSPC), when the
// pair can still fall back to TCP, instead of with SIGBUS during a collective.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "cohort/comm/transport/pair.h"
#include "cohort/net/socket.h"

namespace cohort::comm::transport {

// A mapped segment of two rings. Move-only; unmaps (and removes its name, if still there) when
// destroyed. Ranks that are threads of one process share one mapping of a segment (the opener
// finds the creator's), so the two ends' atomics are the same objects to the compiler and to
// ThreadSanitizer, as they are to the hardware.
class ShmSegment {
 public:
  // Removes from /dev/shm the names of segments that children of process `parent` created and
  // no peer opened (a rank killed between creating a segment and its peer opening it): for a
  // launcher, once its ranks are gone. Returns how many it removed.
  static int remove_orphans_of(pid_t parent);
  // Creates and maps a new segment whose rings hold `ring_bytes` each (a power of two, at least
  // 4 KiB). `label` goes into the name, for a person reading /dev/shm during setup. Throws
  // SystemError when /dev/shm refuses (ENOSPC: too small; ENOENT/EACCES: absent or read-only).
  static ShmSegment create(size_t ring_bytes, const std::string& label);
  // Opens and maps the segment another rank created under `name`, and removes the name. Throws
  // ProtocolError when it is not a Cohort segment of `ring_bytes` rings, SystemError when it
  // cannot be opened.
  static ShmSegment open(const std::string& name, size_t ring_bytes);

  ShmSegment() = default;
  ShmSegment(ShmSegment&& o) noexcept;
  ShmSegment& operator=(ShmSegment&& o) noexcept;
  ~ShmSegment();

  struct Mapping;  // one mmap of a segment, shared by the ends in this process

  const std::string& name() const { return name_; }
  size_t ring_bytes() const { return ring_bytes_; }
  uint8_t* base() const;
  // Removes the name from /dev/shm (the mapping stays). Idempotent.
  void unlink();

 private:
  std::string name_;
  bool named_ = false;
  std::shared_ptr<Mapping> mapping_;
  size_t ring_bytes_ = 0;
};

class ShmPair final : public Pair {
 public:
  // `doorbell` is the authenticated connection to `peer`; `creator` says which of the two rings
  // is this rank's to write (the creator writes ring 0). A send of at least `single_copy_bytes`
  // goes by the single-copy path (0: never).
  ShmPair(int peer, net::Socket doorbell, ShmSegment segment, bool creator,
          size_t single_copy_bytes);
  ~ShmPair() override;

  Kind kind() const override { return Kind::Shm; }
  size_t send_some(const iovec* iov, int n, Delivery delivery) override;
  size_t recv_some(void* p, size_t n) override;
  bool has_view() const override { return true; }
  size_t peek(const uint8_t** p) override;
  void consume(size_t n) override;
  bool watch(Direction dir, bool arm, pollfd* pfd) override;
  bool woke(Direction dir, short revents) override;
  void abandon_send() override;
  void shutdown() override;

  struct Ring;  // the control block of one direction (shm_pair.cc)
  // The most iovecs one single-copy send describes (a frame is header, payload, tag).
  static constexpr int kMaxDirectParts = 4;

 private:
  // Bytes waiting in the incoming ring / free in the outgoing one (ProtocolError if the peer
  // left the ring in an impossible state).
  size_t readable();
  // Free bytes, counted afresh unless those last counted are at least `want`.
  size_t writable(size_t want);
  void ring_doorbell();
  // Rings the doorbell if the other side sleeps on `flag`, after a store it must see.
  void wake_if(std::atomic<uint32_t>& flag);

  // The single-copy path. Sender: describes the iovecs for the peer (false: not this time).
  bool post_direct(const iovec* iov, int n);
  // Sender: bytes of the outstanding description the peer took since the last call.
  size_t direct_progress(const iovec* iov, int n);
  bool direct_outstanding() const { return direct_end_ != direct_reported_; }
  bool send_ready();
  // Receiver: copies described bytes into [p, p + n); 0 when none are described or this rank
  // may not read the sender's memory.
  size_t recv_direct(void* p, size_t n);
  bool direct_readable() const;
  // Receiver: whether this process can read the sender's memory (reads the sender's cookie).
  bool can_read_sender(std::string* why);
  void refuse_direct(const std::string& why);
  // Touch every page of the ring this side writes, of the ring it reads, once each.
  void touch_out();
  void touch_in();
  // Reads whatever bytes the doorbell holds; notices the peer closing it.
  void drain_doorbell();
  [[noreturn]] void closed() const;
  // Marks both rings closed in the segment, for the peer to see.
  void mark_closed();
  // The pair is closed: shut down here, or closed or gone at the other end.
  bool gone();

  net::Socket doorbell_;
  ShmSegment segment_;
  Ring* out_ = nullptr;
  Ring* in_ = nullptr;
  uint8_t* out_data_ = nullptr;
  uint8_t* in_data_ = nullptr;
  size_t cap_ = 0;
  // The peer's end of each ring as this side last read it: the incoming ring's head, the outgoing
  // ring's tail. Each lags the true value, which is safe (fewer bytes readable, less room).
  uint64_t head_seen_ = 0;
  uint64_t tail_seen_ = 0;
  // This side's own head (of the ring it writes) and tail (of the ring it reads): kept here and
  // only published to the segment, never read back from it, where the peer could change them.
  uint64_t head_ = 0;
  uint64_t tail_ = 0;
  // Whether this side has touched every page of the ring it writes, of the ring it reads (each
  // on its direction's first use; one thread drives a direction at a time).
  bool out_touched_ = false;
  bool in_touched_ = false;
  bool peer_closed_ = false;
  // Single copy, sending side: the least bytes worth it (0: off), the outstanding description
  // (stream counters of bytes described: [direct_reported_, direct_end_) not yet reported to the
  // caller) and the iovecs it names. Receiving side: whether reading the peer failed for good.
  size_t direct_min_ = 0;
  uint64_t direct_base_ = 0;
  uint64_t direct_reported_ = 0;
  uint64_t direct_end_ = 0;
  iovec direct_iov_[kMaxDirectParts] = {};
  int direct_n_ = 0;
  bool direct_refused_ = false;
  bool direct_read_ok_ = false;
  // A random value at an address the peer reads first: the pid the segment names is this
  // process's peer, and its memory is readable, only if what it reads there is this value.
  uint64_t direct_cookie_ = 0;
  std::atomic<bool> shut_{false};
};

}  // namespace cohort::comm::transport
