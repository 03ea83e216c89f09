// Integrity of the data plane (CommConfig::integrity, frame_seal.h): a man in the middle between
// two ranks changes, replays, reorders or forges data frames. With Integrity::Hmac or Gmac the
// receiving rank fails the operation with IntegrityError naming the collective and the sender,
// and never uses the bytes; without it, the same attacks silently change the result (which shows
// the proxy really reaches the data). The collectives suites run every collective with sealed
// frames too (Wires::Hmac, Wires::Gmac).
#include <gtest/gtest.h>
#include <poll.h>

#include <atomic>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/comm/communicator.h"
#include "cohort/comm/frame_seal.h"
#include "cohort/comm/mesh_pairs.h"
#include "cohort/comm/wire.h"
#include "cohort/net/socket.h"
#include "cohort/store/memory_store.h"
#include "world.h"

namespace cohort::comm {
namespace {

using namespace std::chrono_literals;
using testing::message_of;
using Bytes = std::vector<uint8_t>;

// A store that gives one key another value: what a rank that reads it is told, while every other
// key is the shared store's.
class RedirectingStore : public store::Store {
 public:
  RedirectingStore(store::Store& inner, std::string key, std::string value)
      : inner_(inner), key_(std::move(key)), value_(std::move(value)) {}
  void set(const std::string& k, const store::Bytes& v) override { inner_.set(k, v); }
  store::Bytes get(const std::string& k) override {
    if (k == key_) return store::to_bytes(value_);
    return inner_.get(k);
  }
  int64_t add(const std::string& k, int64_t d) override { return inner_.add(k, d); }
  store::Bytes compare_set(const std::string& k, const store::Bytes& e,
                           const store::Bytes& d) override {
    return inner_.compare_set(k, e, d);
  }
  bool delete_key(const std::string& k) override { return inner_.delete_key(k); }
  bool check(const std::vector<std::string>& keys) override { return inner_.check(keys); }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds t) override {
    inner_.wait(keys, t);
  }

 private:
  store::Store& inner_;
  std::string key_, value_;
};

// What the man in the middle does with the i-th data frame from the dialling rank: the frames to
// forward in its place (none, it, another, several).
using Tamper = std::function<std::vector<Bytes>(size_t i, Bytes frame)>;

// Sits between a dialling rank and the rank it dials, forwarding bytes both ways. Once armed, it
// cuts what the dialler sends into data frames (WireHeader, payload, and a tag of `tag_bytes`)
// and forwards what `tamper` makes of each.
class Proxy {
 public:
  Proxy(net::Endpoint target, size_t tag_bytes)
      : target_(std::move(target)),
        tag_bytes_(tag_bytes),
        listener_(net::Listener::bind("127.0.0.1", 0)),
        thread_([this] { run(); }) {}
  ~Proxy() {
    stop_ = true;
    thread_.join();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(listener_.port()); }
  void arm(Tamper t) {
    std::lock_guard lk(mu_);
    tamper_ = std::move(t);
  }

 private:
  void run() {
    try {
      net::Socket in = listener_.accept(Deadline::after(20s));
      net::Socket out = net::Socket::connect(target_, Deadline::after(5s));
      in.set_nonblocking();
      out.set_nonblocking();
      while (!stop_) {
        pollfd fds[2] = {{in.fd(), POLLIN, 0}, {out.fd(), POLLIN, 0}};
        if (::poll(fds, 2, 20) <= 0) continue;
        uint8_t buf[1 << 16];
        if (fds[1].revents) {  // the dialled rank's bytes go back as they are
          const size_t k = out.recv_some(buf, sizeof(buf));
          if (k) in.send_all(buf, k, Deadline::after(5s));
        }
        if (fds[0].revents) {
          const size_t k = in.recv_some(buf, sizeof(buf));
          forward(out, buf, k);
        }
      }
    } catch (const std::exception&) {
      // A rank closed its end (the operation failed, or the test is over).
    }
  }

  void forward(net::Socket& out, const uint8_t* p, size_t k) {
    std::lock_guard lk(mu_);
    if (!tamper_) {
      out.send_all(p, k, Deadline::after(5s));
      return;
    }
    pending_.insert(pending_.end(), p, p + k);
    for (;;) {
      if (pending_.size() < sizeof(WireHeader)) return;
      WireHeader h;
      std::memcpy(&h, pending_.data(), sizeof(h));
      const size_t frame = sizeof(WireHeader) + h.bytes + tag_bytes_;
      if (pending_.size() < frame) return;
      Bytes f(pending_.begin(), pending_.begin() + static_cast<long>(frame));
      pending_.erase(pending_.begin(), pending_.begin() + static_cast<long>(frame));
      for (const Bytes& b : tamper_(frames_++, std::move(f))) {
        out.send_all(b.data(), b.size(), Deadline::after(5s));
      }
    }
  }

  net::Endpoint target_;
  size_t tag_bytes_;
  net::Listener listener_;
  std::atomic<bool> stop_{false};
  std::mutex mu_;
  Tamper tamper_;
  Bytes pending_;
  size_t frames_ = 0;
  std::thread thread_;  // last: it starts once everything above is ready
};

struct Outcome {
  std::vector<float> result;  // rank 0's buffer after the allreduce
  std::exception_ptr error;   // what rank 0's allreduce threw
};

constexpr size_t kCount = 2048;  // 8 KiB: 32 frames of 256 bytes each way

size_t tag_bytes_of(Integrity integrity) {
  if (integrity == Integrity::None) return 0;
  net::SessionKey k{};
  return FrameMac(mac_for(integrity), k).tag_bytes();
}

// Two ranks over TCP, rank 1 dialling rank 0 through the proxy; once both are connected the
// proxy is armed with `tamper`, and they run one allreduce (sum) of distinct values.
Outcome attacked_allreduce(Integrity integrity, const Tamper& tamper) {
  store::MemoryStore store;
  std::unique_ptr<Proxy> proxy;
  std::unique_ptr<RedirectingStore> redirected;
  std::vector<std::unique_ptr<Communicator>> comms(2);  // last: they go first
  auto config = [&](int r) {
    CommConfig c = testing::test_config(r, 2);
    c.transport = Transport::Tcp;
    c.integrity = integrity;
    c.timeout = 3s;
    return c;
  };
  std::thread rank0([&] { comms[0] = Communicator::create(store, config(0)); });
  store.wait({"comm/addr/0"}, 10s);
  proxy = std::make_unique<Proxy>(net::Endpoint::parse(store::to_string(store.get("comm/addr/0"))),
                                  tag_bytes_of(integrity));
  redirected = std::make_unique<RedirectingStore>(store, "comm/addr/0", proxy->address());
  comms[1] = Communicator::create(*redirected, config(1));
  rank0.join();
  proxy->arm(tamper);

  Outcome out;
  std::vector<std::vector<float>> bufs(2);
  testing::on_threads(2, [&](int r) {
    bufs[r].resize(kCount);
    for (size_t i = 0; i < kCount; ++i) bufs[r][i] = static_cast<float>(r * 10000 + i);
    try {
      comms[r]->allreduce(Buffer{DType::F32, bufs[r].data(), kCount})->wait();
    } catch (...) {
      if (r == 0) out.error = std::current_exception();
    }
  });
  out.result = bufs[0];
  return out;
}

bool is_correct_sum(const std::vector<float>& v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (v[i] != static_cast<float>(i) + static_cast<float>(10000 + i)) return false;
  }
  return true;
}

// Frame i's payload with one bit flipped.
Tamper flip_bit(size_t target) {
  return [target](size_t i, Bytes f) {
    if (i == target) f[sizeof(WireHeader) + 5] ^= 0x10;
    return std::vector<Bytes>{f};
  };
}

// Frame `target` replaced by a second copy of frame `target - 1`.
Tamper replay(size_t target) {
  auto kept = std::make_shared<Bytes>();
  return [target, kept](size_t i, Bytes f) {
    if (i + 1 == target) *kept = f;
    if (i == target) return std::vector<Bytes>{*kept};
    return std::vector<Bytes>{f};
  };
}

// Frames `first` and `first + 1` in the opposite order.
Tamper swap(size_t first) {
  auto held = std::make_shared<Bytes>();
  return [first, held](size_t i, Bytes f) {
    if (i == first) {
      *held = std::move(f);
      return std::vector<Bytes>{};
    }
    if (i == first + 1) return std::vector<Bytes>{f, *held};
    return std::vector<Bytes>{f};
  };
}

// Frame `target` replaced by one of the attacker's own: the same header, payload of its choice,
// and (when frames are tagged) a tag it cannot compute, here the real frame's.
Tamper forge(size_t target) {
  return [target](size_t i, Bytes f) {
    if (i == target) {
      for (size_t b = sizeof(WireHeader); b < sizeof(WireHeader) + 256; b += 4) {
        const float evil = 1e9f;
        std::memcpy(&f[b], &evil, sizeof(evil));
      }
    }
    return std::vector<Bytes>{f};
  };
}

void expect_refused(const Outcome& out) {
  ASSERT_TRUE(out.error) << "the tampered allreduce completed";
  try {
    std::rethrow_exception(out.error);
  } catch (const IntegrityError& e) {
    EXPECT_NE(std::string(e.what()).find("allreduce #1"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("from rank 1"), std::string::npos) << e.what();
  } catch (const std::exception& e) {
    FAIL() << "expected IntegrityError, got: " << e.what();
  }
}

struct Attack {
  const char* name;
  Tamper tamper;
};

std::vector<Attack> attacks() {
  return {{"flipped bit", flip_bit(3)},
          {"replayed frame", replay(4)},
          {"reordered frames", swap(2)},
          {"forged payload", forge(1)}};
}

TEST(Integrity, EveryAttackOnASealedPairFailsTheOperationNamingTheSender) {
  for (Integrity integrity : {Integrity::Hmac, Integrity::Gmac}) {
    for (const Attack& a : attacks()) {
      SCOPED_TRACE(std::string(a.name) + " with " + std::string(integrity_name(integrity)));
      expect_refused(attacked_allreduce(integrity, a.tamper));
    }
  }
}

TEST(Integrity, WithoutSealsTheSameAttacksChangeTheResultUnnoticed) {
  for (const Attack& a : attacks()) {
    SCOPED_TRACE(a.name);
    const Outcome out = attacked_allreduce(Integrity::None, a.tamper);
    EXPECT_FALSE(out.error) << message_of(out.error);
    EXPECT_FALSE(is_correct_sum(out.result)) << "the proxy did not reach the data";
  }
}

TEST(Integrity, AnUntouchedSealedPairThroughTheProxyComputesTheRightSum) {
  for (Integrity integrity : {Integrity::None, Integrity::Hmac, Integrity::Gmac}) {
    const Outcome out =
        attacked_allreduce(integrity, [](size_t, Bytes f) { return std::vector<Bytes>{f}; });
    EXPECT_FALSE(out.error) << message_of(out.error);
    EXPECT_TRUE(is_correct_sum(out.result)) << integrity_name(integrity);
  }
}

TEST(Integrity, RanksThatDisagreeOnSealingRefuseEachOtherAtSetup) {
  store::MemoryStore store;
  std::vector<std::string> errors(2);
  testing::on_threads(2, [&](int r) {
    CommConfig c = testing::test_config(r, 2);
    c.timeout = 5s;
    c.integrity = r == 0 ? Integrity::Hmac : Integrity::None;
    try {
      Communicator::create(store, c);
    } catch (const ConfigError& e) {
      errors[r] = e.what();
    }
  });
  EXPECT_NE(errors[0].find("rank 0 uses integrity hmac but rank 1 uses none"), std::string::npos)
      << errors[0];
  EXPECT_NE(errors[1].find("rank 1 uses integrity none but rank 0 uses hmac"), std::string::npos)
      << errors[1];
  for (const std::string& e : errors) {
    EXPECT_NE(e.find("comm.integrity must be the same on every rank"), std::string::npos) << e;
  }
}

TEST(Integrity, FramesCarryTagsOnlyWhenSealed) {
  for (Integrity integrity : {Integrity::None, Integrity::Hmac, Integrity::Gmac}) {
    testing::World world(2, testing::Wires::Tcp, [&](CommConfig& c) { c.integrity = integrity; });
    std::vector<uint64_t> sent(2);
    world.run([&](int r, Communicator& comm) {
      const uint64_t before = comm.stats().bytes_sent;
      std::vector<float> v(kCount, 1.0f);
      comm.allreduce(Buffer{DType::F32, v.data(), kCount})->wait();
      sent[r] = comm.stats().bytes_sent - before;
    });
    // 256-byte segments (test_config): whichever algorithm runs, each rank sends 8 KiB in 32
    // frames.
    const uint64_t frames = kCount * sizeof(float) / 256;
    const uint64_t tag = integrity == Integrity::Hmac ? 32 : integrity == Integrity::Gmac ? 16 : 0;
    const uint64_t per_frame = sizeof(WireHeader) + tag;
    EXPECT_EQ(sent[0], kCount * sizeof(float) + frames * per_frame) << integrity_name(integrity);
  }
}

TEST(Integrity, SetupMessagesUnderAnotherSessionKeyAreRefused) {
  net::Listener l = net::Listener::bind("127.0.0.1", 0);
  net::Socket a = net::Socket::connect({"127.0.0.1", l.port()}, Deadline::after(5s));
  net::Socket b = l.accept(Deadline::after(5s));
  CommConfig c0 = testing::test_config(0, 2), c1 = testing::test_config(1, 2);
  net::SessionKey k{}, other{};
  other[0] = 1;
  PeerLink from1 = make_link(c1, std::move(a), PeerInfo{.rank = 0, .size = 2}, k);
  PeerLink at0 = make_link(c0, std::move(b), PeerInfo{.rank = 1, .size = 2}, k);
  send_setup_message(from1, "ok", Deadline::after(5s));
  EXPECT_EQ(recv_setup_message(at0, 1, Deadline::after(5s)), "ok");
  // The same text again is the next message, not a replay of the first: it verifies too.
  send_setup_message(from1, "ok", Deadline::after(5s));
  EXPECT_EQ(recv_setup_message(at0, 1, Deadline::after(5s)), "ok");

  PeerLink forged = make_link(c1, std::move(from1.sock), PeerInfo{.rank = 0, .size = 2}, other);
  send_setup_message(forged, "dup", Deadline::after(5s));
  EXPECT_THROW(recv_setup_message(at0, 1, Deadline::after(5s)), IntegrityError);
}

class FrameMacs : public ::testing::TestWithParam<MacAlgorithm> {};

TEST_P(FrameMacs, TagsDependOnKeyFrameNumberHeaderAndPayload) {
  net::SessionKey k1{}, k2{};
  k2[31] = 7;
  const uint8_t header[4] = {1, 2, 3, 4}, payload[3] = {9, 8, 7};
  auto tag = [&](const net::SessionKey& k, int skip, uint8_t last) {
    FrameMac m(GetParam(), k);
    for (int i = 0; i < skip; ++i) {
      m.begin(header, 4);
      m.finish();
    }
    m.begin(header, 4);
    uint8_t p[3] = {payload[0], payload[1], last};
    m.update(p, 3);
    return m.finish();
  };
  const FrameTag base = tag(k1, 0, 7);
  EXPECT_TRUE(tags_equal(base, tag(k1, 0, 7)));
  EXPECT_FALSE(tags_equal(base, tag(k2, 0, 7)));  // another key
  EXPECT_FALSE(tags_equal(base, tag(k1, 1, 7)));  // another place in the stream
  EXPECT_FALSE(tags_equal(base, tag(k1, 0, 6)));  // another payload
  // The same bytes fed in other pieces give the same tag.
  FrameMac m(GetParam(), k1);
  m.begin(header, 2);
  m.update(header + 2, 2);
  m.update(payload, 1);
  m.update(payload + 1, 2);
  EXPECT_TRUE(tags_equal(base, m.finish()));
  // Each direction of a pair has a key of its own.
  EXPECT_NE(frame_key(k1, 0, 1), frame_key(k1, 1, 0));
}

// A tag is the MAC's whole output: 32 bytes of HMAC-SHA256, 16 of GMAC, and nothing after them.
TEST_P(FrameMacs, TagsHaveTheMacsLength) {
  net::SessionKey k{};
  FrameMac m(GetParam(), k);
  m.begin("x", 1);
  const FrameTag t = m.finish();
  EXPECT_EQ(m.tag_bytes(), GetParam() == MacAlgorithm::HmacSha256 ? 32u : 16u);
  for (size_t i = m.tag_bytes(); i < t.size(); ++i) EXPECT_EQ(t[i], 0) << i;
}

INSTANTIATE_TEST_SUITE_P(Algorithms, FrameMacs,
                         ::testing::Values(MacAlgorithm::HmacSha256, MacAlgorithm::AesGmac),
                         [](const auto& info) {
                           return info.param == MacAlgorithm::HmacSha256 ? "hmac" : "gmac";
                         });

}  // namespace
}  // namespace cohort::comm
