#include "cohort/train/idx.h"

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <memory>

namespace cohort::train {
namespace {

// A header may not promise more than 2^32 bytes: MNIST-sized data is 47 MB, and a corrupt
// header must not turn into a giant allocation.
constexpr uint64_t kMaxIdxBytes = uint64_t{1} << 32;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

struct GzCloser {
  void operator()(gzFile f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<std::remove_pointer_t<gzFile>, GzCloser>;

// Reads exactly n bytes; returns how many were read before the end (or throws on a zlib error,
// which is how a truncated gzip stream shows up).
size_t read_some(gzFile f, const std::string& path, void* out, size_t n) {
  size_t got = 0;
  auto* p = static_cast<uint8_t*>(out);
  while (got < n) {
    unsigned chunk = static_cast<unsigned>(std::min<size_t>(n - got, 1u << 30));
    int r = gzread(f, p + got, chunk);
    if (r < 0) {
      int errnum = 0;
      const char* msg = gzerror(f, &errnum);
      throw DatasetError(path + ": corrupt or truncated after " + std::to_string(got) +
                         " bytes of data (" + std::string(msg ? msg : "zlib error") + ")");
    }
    if (r == 0) break;
    got += static_cast<size_t>(r);
  }
  return got;
}

uint32_t big_endian_u32(const uint8_t* b) {
  return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | uint32_t{b[3]};
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "0x%08x", v);
  return buf;
}

}  // namespace

std::string idx_images_name(Split split) {
  return split == Split::Train ? "train-images-idx3-ubyte" : "t10k-images-idx3-ubyte";
}

std::string idx_labels_name(Split split) {
  return split == Split::Train ? "train-labels-idx1-ubyte" : "t10k-labels-idx1-ubyte";
}

std::optional<std::string> find_idx_file(const std::string& dir, const std::string& base) {
  for (const std::string& name : {base + ".gz", base}) {
    std::string path = dir + "/" + name;
    if (exists(path)) return path;
  }
  return std::nullopt;
}

IdxArray read_idx(const std::string& path, int ndims) {
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw DatasetError(path + ": cannot open (" + std::string(std::strerror(errno)) + ")");
  gzbuffer(f.get(), 1 << 17);

  uint8_t head[4];
  if (read_some(f.get(), path, head, 4) != 4) {
    throw DatasetError(path + ": truncated: the file ends inside the 4-byte IDX magic number");
  }
  // Magic: two zero bytes, the element type (0x08 = unsigned byte), the number of dimensions.
  const uint32_t magic = big_endian_u32(head);
  const uint32_t expected = 0x00000800u | static_cast<uint32_t>(ndims);
  if (magic != expected) {
    throw DatasetError(path + ": bad magic number " + hex32(magic) + ", expected " +
                       hex32(expected) + " (an unsigned-byte IDX file with " +
                       std::to_string(ndims) + " dimensions)");
  }
  IdxArray out;
  uint64_t total = 1;
  for (int i = 0; i < ndims; ++i) {
    uint8_t b[4];
    if (read_some(f.get(), path, b, 4) != 4) {
      throw DatasetError(path + ": truncated: the file ends inside the header (dimension " +
                         std::to_string(i) + ")");
    }
    uint32_t d = big_endian_u32(b);
    out.dims.push_back(d);
    total *= d;
    if (total > kMaxIdxBytes) {
      throw DatasetError(path + ": the header's dimensions promise more than 4 GiB of data");
    }
  }
  out.data.resize(total);
  size_t got = read_some(f.get(), path, out.data.data(), total);
  if (got != total) {
    throw DatasetError(path + ": truncated: the header promises " + std::to_string(total) +
                       " bytes of data, the file has " + std::to_string(got));
  }
  uint8_t extra;
  if (read_some(f.get(), path, &extra, 1) != 0) {
    throw DatasetError(path + ": has bytes after the " + std::to_string(total) +
                       " the header promises (wrong dimensions?)");
  }
  return out;
}

IdxSplit read_idx_split(const std::string& dir, Split split, int64_t rows, int64_t cols,
                        int64_t classes) {
  auto find = [&](const std::string& base) {
    auto p = find_idx_file(dir, base);
    if (!p) throw DatasetError(dir + "/" + base + ".gz: no such file");
    return *p;
  };
  const std::string images_path = find(idx_images_name(split));
  const std::string labels_path = find(idx_labels_name(split));
  IdxSplit s{.images = read_idx(images_path, 3), .labels = read_idx(labels_path, 1)};
  if (s.images.dims[1] != rows || s.images.dims[2] != cols) {
    throw DatasetError(images_path + ": images are " + std::to_string(s.images.dims[1]) + "x" +
                       std::to_string(s.images.dims[2]) + ", expected " + std::to_string(rows) +
                       "x" + std::to_string(cols));
  }
  if (s.images.dims[0] != s.labels.dims[0]) {
    throw DatasetError(labels_path + ": has " + std::to_string(s.labels.dims[0]) + " labels but " +
                       images_path + " has " + std::to_string(s.images.dims[0]) + " images");
  }
  for (size_t i = 0; i < s.labels.data.size(); ++i) {
    if (s.labels.data[i] >= classes) {
      throw DatasetError(labels_path + ": label " + std::to_string(s.labels.data[i]) +
                         " at index " + std::to_string(i) + " is not below " +
                         std::to_string(classes) + " classes");
    }
  }
  return s;
}

}  // namespace cohort::train
