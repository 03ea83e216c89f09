// Where a model's parameters live on the parameter servers.
//
// The keys of a table are its tensors, in order; key k holds sizes[k] f32 values, and the keys
// laid end to end make one flat vector. The flat vector is cut into one contiguous range per
// server, of nearly equal length (balanced by bytes, not by keys): a tensor larger than a share
// is split across servers, and several small ones share a server, so that no server carries more
// than its share of every push and pull whatever the model's tensor sizes are (ps-lite cuts the
// key space into equal ranges instead, which leaves a server holding one huge embedding with
// all the traffic).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace cohort::ps {

// A run of the flat vector: [offset, offset + count).
struct Range {
  uint64_t offset = 0;
  uint64_t count = 0;
  uint64_t end() const { return offset + count; }
  bool operator==(const Range&) const = default;
};

class Layout {
 public:
  Layout() = default;
  // `sizes`: each key's number of values; `servers` >= 1. Throws Error on 0 servers.
  Layout(std::vector<uint64_t> sizes, int servers);

  int servers() const { return static_cast<int>(shards_.size()); }
  size_t keys() const { return sizes_.size(); }
  uint64_t total() const { return total_; }
  const std::vector<uint64_t>& sizes() const { return sizes_; }
  // Key k's place in the flat vector. Throws Error for an unknown key.
  Range key_range(uint64_t key) const;
  // Server s's share of the flat vector (its shard).
  const Range& shard(int s) const { return shards_.at(static_cast<size_t>(s)); }

  // The pieces of `keys` (in the order given) that fall on server s, each with where its values
  // sit in the caller's buffer of those keys' values laid end to end (`at`).
  struct Piece {
    Range range;  // in the flat vector
    uint64_t at;  // offset into the caller's values
  };
  std::vector<Piece> pieces(std::span<const uint64_t> keys, int s) const;
  // Number of values `keys` hold together.
  uint64_t count(std::span<const uint64_t> keys) const;

 private:
  std::vector<uint64_t> sizes_;
  std::vector<uint64_t> offsets_;
  std::vector<Range> shards_;
  uint64_t total_ = 0;
};

}  // namespace cohort::ps
