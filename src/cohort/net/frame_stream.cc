#include "cohort/net/frame_stream.h"

#include <cstring>

#include "cohort/base/error.h"

namespace cohort::net {

bool FrameReader::read(Socket& s, size_t max_length) {
  if (ready_) return true;
  if (!have_header_) {
    auto* h = reinterpret_cast<uint8_t*>(&header_);
    while (header_got_ < kFrameHeaderBytes) {
      size_t k = s.recv_some(h + header_got_, kFrameHeaderBytes - header_got_);
      if (k == 0) return false;
      header_got_ += k;
    }
    check_header(header_, max_length);  // before a single payload byte is allocated
    have_header_ = true;
    payload_.resize(header_.length);
    payload_got_ = 0;
  }
  while (payload_got_ < payload_.size()) {
    size_t k = s.recv_some(payload_.data() + payload_got_, payload_.size() - payload_got_);
    if (k == 0) return false;
    payload_got_ += k;
  }
  ready_ = true;
  return true;
}

Frame FrameReader::take() {
  if (!ready_) throw Error("FrameReader::take called before a frame was complete");
  Frame f{header_.type, std::move(payload_)};
  header_ = {};
  header_got_ = 0;
  have_header_ = false;
  payload_ = {};
  payload_got_ = 0;
  ready_ = false;
  return f;
}

void FrameWriter::push(MsgType type, const std::vector<uint8_t>& payload) {
  FrameHeader h;
  h.type = static_cast<uint16_t>(type);
  h.length = payload.size();
  std::vector<uint8_t> buf(kFrameHeaderBytes + payload.size());
  std::memcpy(buf.data(), &h, kFrameHeaderBytes);
  if (!payload.empty()) std::memcpy(buf.data() + kFrameHeaderBytes, payload.data(), payload.size());
  queue_.push_back(std::move(buf));
}

bool FrameWriter::flush(Socket& s) {
  while (!queue_.empty()) {
    auto& front = queue_.front();
    size_t k = s.send_some(front.data() + front_sent_, front.size() - front_sent_);
    if (k == 0) return false;
    front_sent_ += k;
    if (front_sent_ == front.size()) {
      queue_.pop_front();
      front_sent_ = 0;
    }
  }
  return true;
}

}  // namespace cohort::net
