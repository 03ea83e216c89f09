#include "cohort/store/journal.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>

#include "cohort/base/bytes.h"
#include "cohort/base/checksum.h"
#include "cohort/base/error.h"
#include "cohort/base/file.h"

namespace cohort::store {
namespace {

constexpr std::string_view kHeader = "cohort store journal 1\n";
constexpr uint8_t kPut = 1, kErase = 2;
// A record's body is at most a key and a value the server accepts; anything larger is damage.
constexpr uint32_t kMaxBody = 256u << 20;
constexpr uint64_t kCompactFloor = 1u << 20;

std::vector<uint8_t> record(uint8_t kind, const std::string& key, const Bytes* value) {
  ByteWriter body;
  body.put<uint8_t>(kind).put_string(key);
  if (value) body.put_bytes(value->data(), value->size());
  ByteWriter r;
  r.put<uint32_t>(static_cast<uint32_t>(body.bytes().size()))
      .put<uint32_t>(crc32(body.bytes().data(), body.bytes().size()))
      .put_bytes(body.bytes().data(), body.bytes().size());
  return r.take();
}

void write_all(int fd, const std::vector<uint8_t>& data, const std::string& path) {
  size_t off = 0;
  while (off < data.size()) {
    ssize_t n = ::write(fd, data.data() + off, data.size() - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError("write " + path, errno);
    }
    off += static_cast<size_t>(n);
  }
}

}  // namespace

std::map<std::string, Bytes> StoreJournal::replay(const std::string& path) {
  std::map<std::string, Bytes> out;
  if (!std::filesystem::exists(path)) return out;
  const std::string text = read_file(path);
  if (text.compare(0, kHeader.size(), kHeader) != 0)
    throw Error(path + " is not a store journal (its first line is not '" +
                std::string(kHeader.substr(0, kHeader.size() - 1)) + "')");
  const auto* data = reinterpret_cast<const uint8_t*>(text.data());
  size_t off = kHeader.size();
  while (off < text.size()) {
    const size_t left = text.size() - off;
    uint32_t len = 0, sum = 0;
    if (left >= 8) {
      std::memcpy(&len, data + off, 4);
      std::memcpy(&sum, data + off + 4, 4);
    }
    const bool whole = left >= 8 && len <= kMaxBody && left - 8 >= len;
    if (!whole || crc32(data + off + 8, len) != sum) {
      if (!whole && len <= kMaxBody) {
        // The writer died inside its last write(): that change was never acknowledged.
        spdlog::warn("{}: dropped a torn last record at byte {} ({} bytes)", path, off, left);
        break;
      }
      throw Error(path + ": the record at byte " + std::to_string(off) +
                  " is damaged (its length or checksum does not match)");
    }
    try {
      ByteReader r(data + off + 8, len);
      const auto kind = r.get<uint8_t>();
      std::string key = r.get_string();
      if (kind == kPut) {
        const size_t n = r.remaining();
        const uint8_t* v = r.get_bytes(n);
        out[key] = Bytes(v, v + n);
      } else if (kind == kErase && r.done()) {
        out.erase(key);
      } else {
        throw ProtocolError("unknown record kind " + std::to_string(kind));
      }
    } catch (const ProtocolError& e) {
      throw Error(path + ": the record at byte " + std::to_string(off) + " is damaged: " +
                  e.what());
    }
    off += 8 + len;
  }
  return out;
}

StoreJournal::StoreJournal(std::string path, const std::map<std::string, Bytes>& contents)
    : path_(std::move(path)) {
  compact(contents);
}

StoreJournal::~StoreJournal() {
  if (fd_ >= 0) ::close(fd_);
}

void StoreJournal::compact(const std::map<std::string, Bytes>& contents) {
  std::string text(kHeader);
  for (const auto& [k, v] : contents) {
    const auto r = record(kPut, k, &v);
    text.append(reinterpret_cast<const char*>(r.data()), r.size());
  }
  write_file_atomically(path_, text, 0600);
  const int fd = ::open(path_.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);
  if (fd < 0) throw SystemError("open " + path_, errno);
  if (fd_ >= 0) ::close(fd_);
  fd_ = fd;
  bytes_ = compacted_bytes_ = text.size();
}

void StoreJournal::append(uint8_t kind, const std::string& key, const Bytes* value) {
  const auto r = record(kind, key, value);
  write_all(fd_, r, path_);
  bytes_ += r.size();
}

void StoreJournal::put(const std::string& key, const Bytes& value) { append(kPut, key, &value); }

void StoreJournal::erase(const std::string& key) { append(kErase, key, nullptr); }

bool StoreJournal::wants_compaction() const {
  return bytes_ > std::max(kCompactFloor, 2 * compacted_bytes_);
}

}  // namespace cohort::store
