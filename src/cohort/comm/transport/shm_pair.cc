#include "cohort/comm/transport/shm_pair.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <random>
#include <utility>

#include "cohort/base/error.h"

namespace cohort::comm::transport {

// One direction's control block. The writer owns head, the reader owns tail; each side's flag
// says it sleeps until the other moves its end (see shm_pair.h). Each field has a cache line of
// its own, so the two sides never write the same line.
struct ShmPair::Ring {
  alignas(64) std::atomic<uint64_t> head;  // bytes ever written
  alignas(64) std::atomic<uint64_t> tail;  // bytes ever read
  alignas(64) std::atomic<uint32_t> reader_waiting;
  alignas(64) std::atomic<uint32_t> writer_waiting;
  // Set by either side when it shuts the pair down or goes away (a killed process cannot: its
  // peer then sees the doorbell close instead).
  alignas(64) std::atomic<uint32_t> closed;
  // The single-copy path (shm_pair.h). The writer's: its pid, and a description of bytes in its
  // memory that come next in the stream once the ring's bytes are read. direct_posted counts the
  // bytes ever described; the description in flight is [direct_base, direct_posted) of that
  // count, in direct_parts pieces at direct_addr/direct_len.
  alignas(64) std::atomic<uint64_t> direct_posted;
  std::atomic<uint64_t> direct_base;
  std::atomic<uint64_t> direct_revoked;  // direct_posted of a description withdrawn mid-read
  std::atomic<uint64_t> cookie_addr;
  std::atomic<uint64_t> cookie_value;
  std::atomic<int32_t> writer_pid;
  std::atomic<uint32_t> direct_parts;
  std::atomic<uint64_t> direct_addr[kMaxDirectParts];
  std::atomic<uint64_t> direct_len[kMaxDirectParts];
  // The reader's: the described bytes it ever took, and whether it may not read the writer's
  // memory (set once, before it took any).
  alignas(64) std::atomic<uint64_t> direct_taken;
  std::atomic<uint32_t> direct_refused;
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the rings need lock-free atomics: they are shared between processes");

constexpr uint64_t kMagic = 0x6d68732d74726f68;  // "hort-shm", little-endian
constexpr uint32_t kVersion = 2;

struct alignas(64) Header {
  uint64_t magic;
  uint32_t version;
  uint32_t reserved;
  uint64_t ring_bytes;
};

using Ring = ShmPair::Ring;
constexpr size_t kRingsOffset = sizeof(Header);
constexpr size_t kDataOffset = kRingsOffset + 2 * sizeof(Ring);

size_t segment_size(size_t ring_bytes) {
  return kDataOffset + 2 * ring_bytes;
}

Ring* ring_at(uint8_t* base, int i) {
  return reinterpret_cast<Ring*>(base + kRingsOffset + static_cast<size_t>(i) * sizeof(Ring));
}
uint8_t* data_at(uint8_t* base, size_t ring_bytes, int i) {
  return base + kDataOffset + static_cast<size_t>(i) * ring_bytes;
}

bool valid_ring_bytes(size_t n) {
  return n >= 4096 && n <= (size_t{1} << 30) && (n & (n - 1)) == 0;
}

std::string random_hex() {
  std::random_device rd;
  const uint64_t v = (uint64_t{rd()} << 32) | rd();
  char s[17];
  std::snprintf(s, sizeof(s), "%016llx", static_cast<unsigned long long>(v));
  return s;
}

}  // namespace

struct ShmSegment::Mapping {
  uint8_t* base = nullptr;
  size_t size = 0;
  ~Mapping() {
    if (base) ::munmap(base, size);
  }
};

namespace {

// The segments this process created and still maps, by name.
std::mutex g_mappings_mu;
std::map<std::string, std::weak_ptr<ShmSegment::Mapping>> g_mappings;

std::shared_ptr<ShmSegment::Mapping> map(int fd, size_t size, const std::string& what) {
  void* p = ::mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) throw SystemError("mmap " + what, errno);
  auto m = std::make_shared<ShmSegment::Mapping>();
  m->base = static_cast<uint8_t*>(p);
  m->size = size;
  return m;
}

// Touches every page of one ring once, writing the byte already there (the ring this side writes:
// nothing is published before its head moves) or reading it (the ring it reads; the value is
// dropped). So the mappings that the first pass of collectives through a fresh ring would build
// page by page are built at once: a minor fault per page and side on bare metal, and where the
// guest's page tables are shadowed by a hypervisor a trap to it per page and side, which made each
// of the first 256 4 KiB allreduces between 2 ranks take 30 µs instead of 2 (BENCHMARKS.md, shared
// memory). Done on a direction's first use, not in setup: a world of n ranks on a host sets up
// n - 1 pairs per rank and its algorithms use a few of them (a ring 2, halving-doubling 2 log2 n);
// touching every ring in setup made 32 ranks on 2 CPUs take 1.15-1.27 s to set up against
// 0.63-0.71 s this way, and mapped all of the host's rings in every rank. A read races with the
// peer's first writes and its value is dropped: not instrumented by ThreadSanitizer for that
// reason.
__attribute__((no_sanitize("thread"))) void touch_pages(uint8_t* ring, size_t bytes, bool write) {
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t i = 0; i < bytes; i += page) {
    volatile uint8_t* p = ring + i;
    if (write) {
      *p = *p;
    } else {
      [[maybe_unused]] uint8_t r = *p;
    }
  }
}

void remember(const std::string& name, const std::shared_ptr<ShmSegment::Mapping>& m) {
  std::lock_guard lk(g_mappings_mu);
  std::erase_if(g_mappings, [](const auto& kv) { return kv.second.expired(); });
  g_mappings[name] = m;
}

std::shared_ptr<ShmSegment::Mapping> mapped_here(const std::string& name) {
  std::lock_guard lk(g_mappings_mu);
  auto it = g_mappings.find(name);
  return it == g_mappings.end() ? nullptr : it->second.lock();
}

// Copies n bytes into the ring at position pos (wrapping), or out of it.
void copy_in(uint8_t* ring, size_t cap, uint64_t pos, const uint8_t* src, size_t n) {
  const size_t at = static_cast<size_t>(pos & (cap - 1));
  const size_t first = std::min(n, cap - at);
  std::memcpy(ring + at, src, first);
  if (first < n) std::memcpy(ring, src + first, n - first);
}
void copy_out(const uint8_t* ring, size_t cap, uint64_t pos, uint8_t* dst, size_t n) {
  const size_t at = static_cast<size_t>(pos & (cap - 1));
  const size_t first = std::min(n, cap - at);
  std::memcpy(dst, ring + at, first);
  if (first < n) std::memcpy(dst + first, ring, n - first);
}

}  // namespace

int ShmSegment::remove_orphans_of(pid_t parent) {
  const std::string prefix = "cohort-" + std::to_string(parent) + ".";
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm", ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    if (::shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  return removed;
}

ShmSegment ShmSegment::create(size_t ring_bytes, const std::string& label) {
  if (!valid_ring_bytes(ring_bytes)) {
    throw ConfigError("shared memory: ring size " + std::to_string(ring_bytes) +
                      " is not a power of two between 4 KiB and 1 GiB");
  }
  ShmSegment s;
  // The parent's pid first: every segment of a job's workers shares their launcher's.
  s.name_ = "/cohort-" + std::to_string(::getppid()) + "." + std::to_string(::getpid()) + "-" +
            label + "-" + random_hex();
  s.ring_bytes_ = ring_bytes;
  const size_t size = segment_size(ring_bytes);
  const int fd = ::shm_open(s.name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) throw SystemError("shm_open " + s.name_, errno);
  s.named_ = true;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  if (::ftruncate(fd, static_cast<off_t>(size)) != 0) {
    throw SystemError("ftruncate " + s.name_, errno);
  }
  // Allocates every page now: a full /dev/shm says so here, not with SIGBUS later.
  if (int err = ::posix_fallocate(fd, 0, static_cast<off_t>(size)); err != 0) {
    throw SystemError(
        "allocating " + std::to_string(size >> 10) + " KiB in /dev/shm for " + s.name_, err);
  }
  s.mapping_ = map(fd, size, s.name_);
  auto* h = reinterpret_cast<Header*>(s.base());
  h->magic = kMagic;
  h->version = kVersion;
  h->ring_bytes = ring_bytes;
  for (int i = 0; i < 2; ++i) {
    Ring* r = new (ring_at(s.base(), i)) Ring{};
    for (auto* v : {&r->head, &r->tail, &r->direct_posted, &r->direct_base, &r->direct_revoked,
                    &r->cookie_addr, &r->cookie_value, &r->direct_taken}) {
      v->store(0, std::memory_order_relaxed);
    }
    for (auto* v : {&r->reader_waiting, &r->writer_waiting, &r->closed, &r->direct_parts,
                    &r->direct_refused}) {
      v->store(0, std::memory_order_relaxed);
    }
    r->writer_pid.store(0, std::memory_order_relaxed);
  }
  remember(s.name_, s.mapping_);
  return s;  // the name reaches the other side over a socket, after these stores
}

ShmSegment ShmSegment::open(const std::string& name, size_t ring_bytes) {
  if (name.size() < 2 || name.size() > 200 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos || name.rfind("/cohort-", 0) != 0) {
    throw ProtocolError("shared memory: '" + name + "' is not a Cohort segment name");
  }
  if (!valid_ring_bytes(ring_bytes)) {
    throw ProtocolError("shared memory: ring size " + std::to_string(ring_bytes) + " is invalid");
  }
  const int fd = ::shm_open(name.c_str(), O_RDWR | O_CLOEXEC, 0);
  if (fd < 0) throw SystemError("shm_open " + name, errno);
  ::shm_unlink(name.c_str());  // mapped from here on: no name left behind whoever dies
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw SystemError("fstat " + name, errno);
  const size_t want = segment_size(ring_bytes);
  if (static_cast<size_t>(st.st_size) != want) {
    throw ProtocolError("shared memory: " + name + " holds " + std::to_string(st.st_size) +
                        " bytes, not the " + std::to_string(want) + " announced");
  }
  ShmSegment s;
  s.name_ = name;
  s.ring_bytes_ = ring_bytes;
  s.mapping_ = mapped_here(name);  // a rank of this process created it
  if (!s.mapping_) s.mapping_ = map(fd, want, name);
  const auto* h = reinterpret_cast<const Header*>(s.base());
  if (h->magic != kMagic || h->version != kVersion || h->ring_bytes != ring_bytes) {
    throw ProtocolError("shared memory: " + name + " is not a Cohort segment of version " +
                        std::to_string(kVersion));
  }
  return s;
}

ShmSegment::ShmSegment(ShmSegment&& o) noexcept {
  *this = std::move(o);
}

ShmSegment& ShmSegment::operator=(ShmSegment&& o) noexcept {
  if (this != &o) {
    unlink();
    name_ = std::move(o.name_);
    named_ = std::exchange(o.named_, false);
    mapping_ = std::move(o.mapping_);
    ring_bytes_ = std::exchange(o.ring_bytes_, 0);
  }
  return *this;
}

ShmSegment::~ShmSegment() {
  unlink();
}

uint8_t* ShmSegment::base() const {
  return mapping_ ? mapping_->base : nullptr;
}

void ShmSegment::unlink() {
  if (named_) ::shm_unlink(name_.c_str());
  named_ = false;
}

ShmPair::ShmPair(int peer, net::Socket doorbell, ShmSegment segment, bool creator,
                 size_t single_copy_bytes)
    : Pair(peer),
      doorbell_(std::move(doorbell)),
      segment_(std::move(segment)),
      direct_min_(single_copy_bytes) {
  doorbell_.set_nonblocking(true);
  doorbell_.set_nodelay(true);
  cap_ = segment_.ring_bytes();
  const int mine = creator ? 0 : 1;
  out_ = ring_at(segment_.base(), mine);
  in_ = ring_at(segment_.base(), 1 - mine);
  out_data_ = data_at(segment_.base(), cap_, mine);
  in_data_ = data_at(segment_.base(), cap_, 1 - mine);
  head_ = out_->head.load(std::memory_order_relaxed);
  tail_ = in_->tail.load(std::memory_order_relaxed);
  // Before any description: the peer reads these only after a direct_posted that follows them.
  std::random_device rd;
  direct_cookie_ = (uint64_t{rd()} << 32) | rd() | 1;
  out_->cookie_addr.store(reinterpret_cast<uintptr_t>(&direct_cookie_), std::memory_order_relaxed);
  out_->cookie_value.store(direct_cookie_, std::memory_order_relaxed);
  out_->writer_pid.store(static_cast<int32_t>(::getpid()), std::memory_order_relaxed);
}

ShmPair::~ShmPair() {
  mark_closed();
}

void ShmPair::mark_closed() {
  if (!out_) return;
  out_->closed.store(1, std::memory_order_release);
  in_->closed.store(1, std::memory_order_release);
}

bool ShmPair::gone() {
  if (!peer_closed_ && in_->closed.load(std::memory_order_acquire) != 0) peer_closed_ = true;
  return peer_closed_ || shut_.load(std::memory_order_relaxed);
}

void ShmPair::closed() const {
  throw PeerLostError(peer(), shut_.load(std::memory_order_relaxed) ? "connection shut down"
                                                                    : "connection closed by peer");
}

size_t ShmPair::readable() {
  // The head last seen first: while it shows bytes not read yet, the line the writer stores its
  // head to is not fetched again (each fetch is a transfer between cores).
  const uint64_t tail = tail_;
  if (head_seen_ != tail) return static_cast<size_t>(head_seen_ - tail);
  head_seen_ = in_->head.load(std::memory_order_seq_cst);
  const uint64_t used = head_seen_ - tail;
  if (used > cap_) {
    throw ProtocolError("the shared-memory ring from rank " + std::to_string(peer()) +
                        " is corrupt (" + std::to_string(used) + " bytes in a ring of " +
                        std::to_string(cap_) + ")");
  }
  return static_cast<size_t>(used);
}

size_t ShmPair::writable(size_t want) {
  // Likewise the reader's tail last seen, while it leaves room for `want` bytes.
  const uint64_t head = head_;
  if (cap_ - (head - tail_seen_) >= want) return cap_ - static_cast<size_t>(head - tail_seen_);
  tail_seen_ = out_->tail.load(std::memory_order_seq_cst);
  const uint64_t used = head - tail_seen_;
  if (used > cap_) {
    throw ProtocolError("the shared-memory ring to rank " + std::to_string(peer()) +
                        " is corrupt (" + std::to_string(used) + " bytes in a ring of " +
                        std::to_string(cap_) + ")");
  }
  return cap_ - static_cast<size_t>(used);
}

void ShmPair::ring_doorbell() {
  const char b = 1;
  // A full socket already holds a wake-up; a closed one is noticed by the next wait.
  (void)::send(doorbell_.fd(), &b, 1, MSG_NOSIGNAL | MSG_DONTWAIT);
}

void ShmPair::wake_if(std::atomic<uint32_t>& flag) {
  // Sequentially consistent store (the caller's) and load here and in watch(): of "publish, then
  // look at the flag" and "raise the flag, then look again", at least one side sees the other's
  // store, so a side going to sleep either sees what was published or gets the doorbell.
  if (flag.load(std::memory_order_seq_cst) != 0 &&
      flag.exchange(0, std::memory_order_relaxed) != 0) {
    ring_doorbell();
  }
}

void ShmPair::drain_doorbell() {
  char buf[64];
  for (;;) {
    ssize_t rc = ::recv(doorbell_.fd(), buf, sizeof(buf), MSG_DONTWAIT);
    if (rc > 0) continue;
    if (rc == 0) {
      peer_closed_ = true;
      return;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) peer_closed_ = true;
    return;
  }
}

size_t ShmPair::send_some(const iovec* iov, int n, Delivery delivery) {
  // What the peer took of a posted description is sent even if it has closed since (it read the
  // last bytes of an operation, then left): only what it left untaken is lost with it.
  const bool posted = direct_outstanding();
  if (!posted && gone()) closed();
  touch_out();
  if (posted || (delivery == Delivery::Rendezvous && post_direct(iov, n))) {
    const size_t k = direct_progress(iov, n);
    if (k > 0) return k;
    if (gone()) closed();
    if (direct_outstanding()) return 0;
    // Withdrawn: the peer may not read this rank's memory, so the ring carries the bytes.
  }
  size_t want = 0;
  for (int i = 0; i < n; ++i) want += iov[i].iov_len;
  size_t room = writable(want);
  uint64_t head = head_;
  size_t total = 0;
  for (int i = 0; i < n && room > 0; ++i) {
    const size_t k = std::min(room, iov[i].iov_len);
    copy_in(out_data_, cap_, head, static_cast<const uint8_t*>(iov[i].iov_base), k);
    head += k;
    room -= k;
    total += k;
  }
  if (total == 0) return 0;
  head_ = head;
  out_->head.store(head, std::memory_order_seq_cst);
  wake_if(out_->reader_waiting);
  return total;
}

size_t ShmPair::recv_some(void* p, size_t n) {
  if (shut_.load(std::memory_order_relaxed)) closed();
  touch_in();
  // Described bytes follow the ring's: looking at the description before the ring's head means
  // that the ring's bytes written before it are seen too, and read first.
  const bool described = direct_readable();
  const size_t avail = readable();
  if (avail == 0) {
    if (described) {
      if (size_t k = recv_direct(p, n)) return k;
    }
    if (gone()) closed();
    return 0;
  }
  const size_t k = std::min(avail, n);
  copy_out(in_data_, cap_, tail_, static_cast<uint8_t*>(p), k);
  tail_ += k;
  in_->tail.store(tail_, std::memory_order_seq_cst);
  wake_if(in_->writer_waiting);
  return k;
}

size_t ShmPair::peek(const uint8_t** p) {
  *p = nullptr;
  if (shut_.load(std::memory_order_relaxed)) closed();
  touch_in();
  const size_t avail = readable();
  if (avail == 0) return 0;
  const size_t at = static_cast<size_t>(tail_) & (cap_ - 1);
  *p = in_data_ + at;
  return std::min(avail, cap_ - at);
}

void ShmPair::touch_out() {
  if (out_touched_) return;
  touch_pages(out_data_, cap_, true);
  out_touched_ = true;
}

void ShmPair::touch_in() {
  if (in_touched_) return;
  touch_pages(in_data_, cap_, false);
  in_touched_ = true;
}

void ShmPair::consume(size_t n) {
  if (n == 0) return;
  tail_ += n;
  in_->tail.store(tail_, std::memory_order_seq_cst);
  wake_if(in_->writer_waiting);
}

bool ShmPair::watch(Direction dir, bool arm, pollfd* pfd) {
  *pfd = {-1, 0, 0};
  if (gone()) return true;
  const bool send = dir == Direction::Send;
  auto ready = [&] { return send ? send_ready() : readable() > 0 || direct_readable(); };
  if (ready()) return true;
  if (!arm) return false;
  std::atomic<uint32_t>& flag = send ? out_->writer_waiting : in_->reader_waiting;
  flag.store(1, std::memory_order_seq_cst);
  if (ready()) {
    flag.store(0, std::memory_order_relaxed);
    return true;
  }
  *pfd = {doorbell_.fd(), POLLIN, 0};
  return false;
}

bool ShmPair::woke(Direction dir, short revents) {
  const bool send = dir == Direction::Send;
  (send ? out_->writer_waiting : in_->reader_waiting).store(0, std::memory_order_relaxed);
  if (revents != 0) drain_doorbell();
  if (gone()) return true;
  return send ? send_ready() : readable() > 0 || direct_readable();
}

// The single-copy path.

bool ShmPair::post_direct(const iovec* iov, int n) {
  if (direct_min_ == 0 || n < 1 || n > kMaxDirectParts) return false;
  size_t total = 0;
  for (int i = 0; i < n; ++i) total += iov[i].iov_len;
  if (total < direct_min_) return false;
  const uint64_t base = out_->direct_posted.load(std::memory_order_relaxed);  // this side's
  for (int i = 0; i < n; ++i) {
    out_->direct_addr[i].store(reinterpret_cast<uintptr_t>(iov[i].iov_base),
                               std::memory_order_relaxed);
    out_->direct_len[i].store(iov[i].iov_len, std::memory_order_relaxed);
    direct_iov_[i] = iov[i];
  }
  direct_n_ = n;
  out_->direct_parts.store(static_cast<uint32_t>(n), std::memory_order_relaxed);
  out_->direct_base.store(base, std::memory_order_relaxed);
  out_->direct_posted.store(base + total, std::memory_order_seq_cst);
  wake_if(out_->reader_waiting);
  direct_base_ = direct_reported_ = base;
  direct_end_ = base + total;
  return true;
}

size_t ShmPair::direct_progress(const iovec* iov, int n) {
  const uint64_t taken = out_->direct_taken.load(std::memory_order_seq_cst);
  if (taken == direct_reported_) {
    if (taken == direct_base_ && out_->direct_refused.load(std::memory_order_seq_cst) != 0) {
      // The peer took none of it and never will: withdraw the description, copy from now on.
      out_->direct_posted.store(direct_base_, std::memory_order_seq_cst);
      direct_end_ = direct_base_;
      direct_min_ = 0;
    }
    return 0;
  }
  if (taken < direct_reported_ || taken > direct_end_) {
    throw ProtocolError("the shared-memory pair to rank " + std::to_string(peer()) +
                        " is corrupt (the peer took " + std::to_string(taken) +
                        " described bytes of " + std::to_string(direct_end_) + ")");
  }
  // The caller goes on with what it has not been told is sent: the bytes described, from here.
  uint64_t off = direct_reported_ - direct_base_;
  const void* expected = nullptr;
  for (int i = 0; i < direct_n_ && !expected; ++i) {
    if (off < direct_iov_[i].iov_len) {
      expected = static_cast<const uint8_t*>(direct_iov_[i].iov_base) + off;
    } else {
      off -= direct_iov_[i].iov_len;
    }
  }
  size_t given = 0;
  for (int i = 0; i < n; ++i) given += iov[i].iov_len;
  if (n < 1 || iov[0].iov_base != expected || given < direct_end_ - direct_reported_) {
    throw std::logic_error("ShmPair::send_some: called with other bytes while " +
                           std::to_string(direct_end_ - direct_reported_) +
                           " described bytes are in flight");
  }
  const size_t k = static_cast<size_t>(taken - direct_reported_);
  direct_reported_ = taken;
  return k;
}

bool ShmPair::send_ready() {
  if (!direct_outstanding()) return writable(1) > 0;
  return out_->direct_taken.load(std::memory_order_seq_cst) != direct_reported_ ||
         out_->direct_refused.load(std::memory_order_seq_cst) != 0;
}

bool ShmPair::direct_readable() const {
  if (direct_refused_) return false;
  const uint64_t posted = in_->direct_posted.load(std::memory_order_seq_cst);
  return posted != in_->direct_taken.load(std::memory_order_relaxed) &&
         posted != in_->direct_revoked.load(std::memory_order_seq_cst);
}

void ShmPair::abandon_send() {
  if (!direct_outstanding()) return;
  // A read under way when this lands is not used (recv_direct looks after its copy).
  out_->direct_revoked.store(direct_end_, std::memory_order_seq_cst);
  direct_reported_ = direct_end_;
  direct_min_ = 0;
}

bool ShmPair::can_read_sender(std::string* why) {
  const pid_t pid = in_->writer_pid.load(std::memory_order_relaxed);
  const uint64_t addr = in_->cookie_addr.load(std::memory_order_relaxed);
  const uint64_t want = in_->cookie_value.load(std::memory_order_relaxed);
  uint64_t got = 0;
  const iovec local{&got, sizeof(got)};
  const iovec remote{reinterpret_cast<void*>(addr), sizeof(got)};
  const ssize_t rc = ::process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (rc == static_cast<ssize_t>(sizeof(got)) && got == want && want != 0) return true;
  // EPERM/EACCES: ptrace rules; ENOSYS: a kernel or filter without it; ESRCH or another value:
  // the pid is not the peer's here (another pid namespace) or the peer is gone.
  *why = rc < 0 ? std::string(std::strerror(errno))
                : "pid " + std::to_string(pid) + " is not the peer here";
  return false;
}

void ShmPair::refuse_direct(const std::string& why) {
  // Said once, for the sender to withdraw its description and use the ring from then on.
  direct_refused_ = true;
  in_->direct_refused.store(1, std::memory_order_seq_cst);
  wake_if(in_->writer_waiting);
  static std::atomic<bool> said{false};
  if (!said.exchange(true)) {
    spdlog::warn(
        "shared memory: this process cannot read rank {}'s memory ({}); large messages "
        "are copied twice, through the ring",
        peer(), why);
  }
}

size_t ShmPair::recv_direct(void* p, size_t n) {
  const uint64_t posted = in_->direct_posted.load(std::memory_order_seq_cst);
  const uint64_t taken = in_->direct_taken.load(std::memory_order_relaxed);
  if (direct_refused_ || posted == taken || n == 0) return 0;
  if (posted == in_->direct_revoked.load(std::memory_order_seq_cst)) return 0;
  if (!direct_read_ok_) {
    std::string why;
    if (!can_read_sender(&why)) {
      refuse_direct(why);
      return 0;
    }
    direct_read_ok_ = true;
  }
  const uint64_t base = in_->direct_base.load(std::memory_order_relaxed);
  const uint32_t parts = in_->direct_parts.load(std::memory_order_relaxed);
  iovec remote[kMaxDirectParts];
  int count = 0;
  uint64_t described = 0;
  uint64_t off = taken - base;
  size_t want = 0;
  const uint64_t left = posted - taken;  // what the reader may take, at most
  bool sane = base <= taken && taken < posted;
  for (uint32_t i = 0; sane && i < parts && i < kMaxDirectParts; ++i) {
    const uint64_t len = in_->direct_len[i].load(std::memory_order_relaxed);
    const uint64_t addr = in_->direct_addr[i].load(std::memory_order_relaxed);
    sane = len <= posted - base - described;
    if (!sane) break;
    described += len;
    if (off >= len) {
      off -= len;
      continue;
    }
    const size_t k =
        static_cast<size_t>(std::min<uint64_t>(len - off, std::min<uint64_t>(n, left) - want));
    if (k > 0) remote[count++] = {reinterpret_cast<void*>(addr + off), k};
    want += k;
    off = 0;
  }
  if (!sane || parts < 1 || parts > kMaxDirectParts || described != posted - base || want == 0) {
    throw ProtocolError("the shared-memory pair from rank " + std::to_string(peer()) +
                        " holds an impossible description of " + std::to_string(posted - taken) +
                        " bytes");
  }
  const iovec local{p, want};
  const pid_t pid = in_->writer_pid.load(std::memory_order_relaxed);
  const ssize_t rc =
      ::process_vm_readv(pid, &local, 1, remote, static_cast<unsigned long>(count), 0);
  if (rc <= 0) {
    const int err = rc < 0 ? errno : EIO;
    if (gone()) closed();
    throw PeerLostError(
        peer(), std::string("could not read the bytes it described (") + std::strerror(err) + ")");
  }
  // A sender that gives up withdraws the description (abandon_send) or closes the pair before
  // what it described goes away: if neither had happened after the copy, the copy read it. The
  // read-modify-write orders that check after the copy as a fence would (and, unlike a fence,
  // ThreadSanitizer follows it).
  if (posted == in_->direct_revoked.fetch_add(0, std::memory_order_seq_cst)) return 0;
  if (gone()) closed();
  in_->direct_taken.store(taken + static_cast<uint64_t>(rc), std::memory_order_seq_cst);
  wake_if(in_->writer_waiting);
  return static_cast<size_t>(rc);
}

void ShmPair::shutdown() {
  shut_.store(true, std::memory_order_relaxed);
  mark_closed();
  doorbell_.shutdown();
}

}  // namespace cohort::comm::transport
