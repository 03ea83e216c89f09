#include "cohort/comm/transport/shm_pair.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
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
};

namespace {

static_assert(std::atomic<uint64_t>::is_always_lock_free &&
                  std::atomic<uint32_t>::is_always_lock_free,
              "the rings need lock-free atomics: they are shared between processes");

constexpr uint64_t kMagic = 0x6d68732d74726f68;  // "hort-shm", little-endian
constexpr uint32_t kVersion = 1;

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
    r->head.store(0, std::memory_order_relaxed);
    r->tail.store(0, std::memory_order_relaxed);
    r->reader_waiting.store(0, std::memory_order_relaxed);
    r->writer_waiting.store(0, std::memory_order_relaxed);
    r->closed.store(0, std::memory_order_relaxed);
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

ShmPair::ShmPair(int peer, net::Socket doorbell, ShmSegment segment, bool creator)
    : Pair(peer), doorbell_(std::move(doorbell)), segment_(std::move(segment)) {
  doorbell_.set_nonblocking(true);
  doorbell_.set_nodelay(true);
  cap_ = segment_.ring_bytes();
  const int mine = creator ? 0 : 1;
  out_ = ring_at(segment_.base(), mine);
  in_ = ring_at(segment_.base(), 1 - mine);
  out_data_ = data_at(segment_.base(), cap_, mine);
  in_data_ = data_at(segment_.base(), cap_, 1 - mine);
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

size_t ShmPair::readable() const {
  const uint64_t used =
      in_->head.load(std::memory_order_seq_cst) - in_->tail.load(std::memory_order_relaxed);
  if (used > cap_) {
    throw ProtocolError("the shared-memory ring from rank " + std::to_string(peer()) +
                        " is corrupt (" + std::to_string(used) + " bytes in a ring of " +
                        std::to_string(cap_) + ")");
  }
  return static_cast<size_t>(used);
}

size_t ShmPair::writable() const {
  const uint64_t used =
      out_->head.load(std::memory_order_relaxed) - out_->tail.load(std::memory_order_seq_cst);
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

size_t ShmPair::send_some(const iovec* iov, int n) {
  if (gone()) closed();
  size_t room = writable();
  uint64_t head = out_->head.load(std::memory_order_relaxed);
  size_t total = 0;
  for (int i = 0; i < n && room > 0; ++i) {
    const size_t k = std::min(room, iov[i].iov_len);
    copy_in(out_data_, cap_, head, static_cast<const uint8_t*>(iov[i].iov_base), k);
    head += k;
    room -= k;
    total += k;
  }
  if (total == 0) return 0;
  // Sequentially consistent store and load here and in watch(): of "publish, then look at the
  // flag" and "raise the flag, then look again", at least one side sees the other's store, so a
  // reader going to sleep either sees this data or gets the doorbell.
  out_->head.store(head, std::memory_order_seq_cst);
  if (out_->reader_waiting.load(std::memory_order_seq_cst) != 0 &&
      out_->reader_waiting.exchange(0, std::memory_order_relaxed) != 0) {
    ring_doorbell();
  }
  return total;
}

size_t ShmPair::recv_some(void* p, size_t n) {
  if (shut_.load(std::memory_order_relaxed)) closed();
  const size_t avail = readable();
  if (avail == 0) {
    if (gone()) closed();
    return 0;
  }
  const size_t k = std::min(avail, n);
  uint64_t tail = in_->tail.load(std::memory_order_relaxed);
  copy_out(in_data_, cap_, tail, static_cast<uint8_t*>(p), k);
  in_->tail.store(tail + k, std::memory_order_seq_cst);  // as in send_some
  if (in_->writer_waiting.load(std::memory_order_seq_cst) != 0 &&
      in_->writer_waiting.exchange(0, std::memory_order_relaxed) != 0) {
    ring_doorbell();
  }
  return k;
}

bool ShmPair::watch(Direction dir, bool arm, pollfd* pfd) {
  *pfd = {-1, 0, 0};
  if (gone()) return true;
  const bool send = dir == Direction::Send;
  auto ready = [&] { return send ? writable() > 0 : readable() > 0; };
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
  return send ? writable() > 0 : readable() > 0;
}

void ShmPair::shutdown() {
  shut_.store(true, std::memory_order_relaxed);
  mark_closed();
  doorbell_.shutdown();
}

}  // namespace cohort::comm::transport
