#include "cohort/net/frame.h"

#include <gtest/gtest.h>
#include <poll.h>

#include <cstring>
#include <thread>

#include "cohort/base/error.h"
#include "cohort/net/frame_stream.h"
#include "net_test_util.h"

namespace cohort::net {
namespace {

using testing::tcp_pair;

Deadline soon() {
  return Deadline::after(Millis(5000));
}

std::vector<uint8_t> header_bytes(uint32_t magic, uint16_t version, uint16_t type, uint64_t len) {
  FrameHeader h{magic, version, type, len};
  std::vector<uint8_t> b(kFrameHeaderBytes);
  std::memcpy(b.data(), &h, kFrameHeaderBytes);
  return b;
}

TEST(Frame, HeaderLayoutIsMagicVersionTypeLengthLittleEndian) {
  auto [a, b] = tcp_pair();
  write_frame(a, MsgType::kStoreRequest, std::vector<uint8_t>{0xAA, 0xBB}, soon());
  uint8_t raw[kFrameHeaderBytes + 2];
  b.recv_all(raw, sizeof(raw), soon());
  const uint8_t expected[] = {'C', 'H', 'R', 'T', 1, 0, 16, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0xAA, 0xBB};
  EXPECT_EQ(std::memcmp(raw, expected, sizeof(expected)), 0);
}

TEST(Frame, RoundTripsEmptySmallAndLargePayloads) {
  auto sockets = tcp_pair();  // named, not bound: lambdas below capture them
  Socket& a = sockets.first;
  Socket& b = sockets.second;
  for (size_t n : {size_t(0), size_t(1), size_t(4096), size_t(4097), size_t(3u << 20)}) {
    std::vector<uint8_t> p(n);
    for (size_t i = 0; i < n; ++i) p[i] = static_cast<uint8_t>(i % 251);
    std::thread w([&] { write_frame(a, MsgType::kCommData, p, soon()); });
    Frame f = read_frame(b, soon());
    w.join();
    EXPECT_EQ(f.type, static_cast<uint16_t>(MsgType::kCommData));
    EXPECT_EQ(f.payload, p) << n << " bytes";
  }
}

TEST(Frame, CheckHeaderRejectsBadMagicVersionAndLength) {
  EXPECT_NO_THROW(check_header(FrameHeader{kFrameMagic, kWireVersion, 1, 100}, 100));
  EXPECT_THROW(check_header(FrameHeader{0x50545448, kWireVersion, 1, 0}, 100), ProtocolError);
  EXPECT_THROW(check_header(FrameHeader{kFrameMagic, 2, 1, 0}, 100), ProtocolError);
  EXPECT_THROW(check_header(FrameHeader{kFrameMagic, 0, 1, 0}, 100), ProtocolError);
  EXPECT_THROW(check_header(FrameHeader{kFrameMagic, kWireVersion, 1, 101}, 100), ProtocolError);
}

TEST(Frame, OversizedLengthIsRejectedBeforeAllocation) {
  // A length of 2^60 would abort the process (or trip ASan) if it reached an allocation.
  auto [a, b] = tcp_pair();
  auto h = header_bytes(kFrameMagic, kWireVersion, 16, uint64_t(1) << 60);
  a.send_all(h.data(), h.size(), soon());
  try {
    read_frame(b, soon());
    FAIL() << "accepted a 2^60-byte frame";
  } catch (const ProtocolError& e) {
    EXPECT_NE(std::string(e.what()).find("exceeds the limit"), std::string::npos) << e.what();
  }
}

TEST(Frame, ReadFrameOfRejectsTheWrongType) {
  auto [a, b] = tcp_pair();
  write_frame(a, MsgType::kHello, nullptr, 0, soon());
  EXPECT_THROW(read_frame_of(b, MsgType::kStoreRequest, soon()), ProtocolError);
}

TEST(Frame, TruncatedFrameIsPeerLostNotAHang) {
  auto [a, b] = tcp_pair();
  auto h = header_bytes(kFrameMagic, kWireVersion, 16, 100);
  a.send_all(h.data(), h.size(), soon());
  a.send_all("only ten b", 10, soon());
  a.close();
  EXPECT_THROW(read_frame(b, soon()), PeerLostError);
}

TEST(FrameReader, AssemblesAFrameDeliveredOneByteAtATime) {
  auto [a, b] = tcp_pair();
  b.set_nonblocking(true);
  std::vector<uint8_t> payload = {1, 2, 0, 4, 5};
  auto bytes = header_bytes(kFrameMagic, kWireVersion, 17, payload.size());
  bytes.insert(bytes.end(), payload.begin(), payload.end());
  FrameReader r;
  for (size_t i = 0; i < bytes.size(); ++i) {
    EXPECT_FALSE(r.read(b, 1024)) << "frame complete after " << i << " bytes";
    EXPECT_EQ(r.mid_frame(), i > 0);
    a.send_all(&bytes[i], 1, soon());
    ASSERT_TRUE(wait_fd(b.fd(), POLLIN, soon()));
  }
  ASSERT_TRUE(r.read(b, 1024));
  Frame f = r.take();
  EXPECT_EQ(f.type, 17);
  EXPECT_EQ(f.payload, payload);
  EXPECT_FALSE(r.mid_frame());
}

TEST(FrameReader, ChecksTheLengthBeforeReadingThePayload) {
  auto [a, b] = tcp_pair();
  b.set_nonblocking(true);
  auto h = header_bytes(kFrameMagic, kWireVersion, 16, uint64_t(1) << 60);
  a.send_all(h.data(), h.size(), soon());
  ASSERT_TRUE(wait_fd(b.fd(), POLLIN, soon()));
  FrameReader r;
  EXPECT_THROW(r.read(b, 1 << 20), ProtocolError);
}

TEST(FrameReader, ReadsBackToBackFrames) {
  auto [a, b] = tcp_pair();
  b.set_nonblocking(true);
  write_frame(a, MsgType::kHello, std::vector<uint8_t>{1}, soon());
  write_frame(a, MsgType::kAccept, std::vector<uint8_t>{2, 3}, soon());
  FrameReader r;
  std::vector<Frame> got;
  while (got.size() < 2) {
    ASSERT_TRUE(wait_fd(b.fd(), POLLIN, soon()));
    while (r.read(b, 1024)) got.push_back(r.take());
  }
  EXPECT_EQ(got[0].type, 1);
  EXPECT_EQ(got[0].payload, std::vector<uint8_t>{1});
  EXPECT_EQ(got[1].type, 4);
  EXPECT_EQ(got[1].payload, (std::vector<uint8_t>{2, 3}));
}

TEST(FrameWriter, FlushesALargeFrameAcrossManyWritableEvents) {
  auto sockets = tcp_pair();  // named, not bound: lambdas below capture them
  Socket& a = sockets.first;
  Socket& b = sockets.second;
  a.set_nonblocking(true);
  a.set_buffer_sizes(64 << 10);
  std::vector<uint8_t> p(2 << 20);
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 13);
  FrameWriter w;
  w.push(MsgType::kCommData, p);
  EXPECT_FALSE(w.flush(a));  // 2 MiB cannot fit in the socket buffers at once
  std::thread reader([&] {
    Frame f = read_frame(b, soon(), 16 << 20);
    EXPECT_EQ(f.payload, p);
  });
  while (!w.flush(a)) ASSERT_TRUE(wait_fd(a.fd(), POLLOUT, soon()));
  EXPECT_TRUE(w.empty());
  reader.join();
}

}  // namespace
}  // namespace cohort::net
