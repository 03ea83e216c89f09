#include "cohort/train/idx.h"

#include <gtest/gtest.h>
#include <unistd.h>
#include <zlib.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace cohort::train {
namespace {

namespace fs = std::filesystem;

const std::string kFashion = "/usr/share/datasets/fashion-mnist";

std::vector<uint8_t> idx_header(uint32_t magic, const std::vector<uint32_t>& dims) {
  std::vector<uint8_t> out;
  auto put = [&](uint32_t v) {
    for (int s = 24; s >= 0; s -= 8) out.push_back(static_cast<uint8_t>(v >> s));
  };
  put(magic);
  for (uint32_t d : dims) put(d);
  return out;
}

class IdxFiles : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("cohort_idx_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Writes an IDX file (header + `body_bytes` bytes of pattern), gzipped unless `plain`.
  std::string write(const std::string& name, uint32_t magic, const std::vector<uint32_t>& dims,
                    size_t body_bytes, bool plain = false, uint8_t fill = 3) {
    std::vector<uint8_t> bytes = idx_header(magic, dims);
    for (size_t i = 0; i < body_bytes; ++i) bytes.push_back(static_cast<uint8_t>(fill));
    std::string path = (dir_ / (plain ? name : name + ".gz")).string();
    if (plain) {
      std::ofstream(path, std::ios::binary)
          .write(reinterpret_cast<const char*>(bytes.data()), static_cast<long>(bytes.size()));
    } else {
      gzFile f = gzopen(path.c_str(), "wb");
      EXPECT_NE(f, nullptr);
      EXPECT_EQ(gzwrite(f, bytes.data(), static_cast<unsigned>(bytes.size())),
                static_cast<int>(bytes.size()));
      gzclose(f);
    }
    return path;
  }
  void write_pair(uint32_t images, uint32_t labels, uint32_t rows = 28, uint32_t cols = 28) {
    write("train-images-idx3-ubyte", 0x803, {images, rows, cols}, size_t{images} * rows * cols);
    write("train-labels-idx1-ubyte", 0x801, {labels}, labels, false, 7);
  }
  // The DatasetError message of reading the train split of dir_.
  std::string split_error() {
    try {
      read_idx_split(dir_.string(), Split::Train);
    } catch (const DatasetError& e) {
      return e.what();
    }
    return "";
  }

  fs::path dir_;
};

TEST(IdxRealFiles, FashionMnistLoadsBothSplits) {
  if (!fs::exists(kFashion)) GTEST_SKIP() << kFashion << " is not installed";
  IdxSplit train = read_idx_split(kFashion, Split::Train);
  EXPECT_EQ(train.images.dims, (std::vector<int64_t>{60000, 28, 28}));
  EXPECT_EQ(train.labels.dims, (std::vector<int64_t>{60000}));
  EXPECT_EQ(train.images.data.size(), 60000u * 784u);
  IdxSplit test = read_idx_split(kFashion, Split::Test);
  EXPECT_EQ(test.images.dims, (std::vector<int64_t>{10000, 28, 28}));
  // Fashion-MNIST is balanced: 6000 (train) and 1000 (test) examples of each of the 10 classes.
  std::array<int, 10> train_counts{}, test_counts{};
  for (uint8_t l : train.labels.data) ++train_counts[l];
  for (uint8_t l : test.labels.data) ++test_counts[l];
  for (int c = 0; c < 10; ++c) {
    EXPECT_EQ(train_counts[c], 6000) << "class " << c;
    EXPECT_EQ(test_counts[c], 1000) << "class " << c;
  }
  // Pixels are not all zero or all one value.
  uint8_t lo = 255, hi = 0;
  for (uint8_t p : test.images.data) lo = std::min(lo, p), hi = std::max(hi, p);
  EXPECT_EQ(lo, 0);
  EXPECT_EQ(hi, 255);
}

TEST_F(IdxFiles, ReadsGzippedAndPlainFiles) {
  write_pair(5, 5);
  IdxSplit s = read_idx_split(dir_.string(), Split::Train);
  EXPECT_EQ(s.images.dims, (std::vector<int64_t>{5, 28, 28}));
  EXPECT_EQ(s.labels.data, std::vector<uint8_t>(5, 7));
  std::string plain = write("plain-labels", 0x801, {4}, 4, true);
  EXPECT_EQ(read_idx(plain, 1).dims, (std::vector<int64_t>{4}));
}

TEST_F(IdxFiles, BadMagicNamesTheFile) {
  std::string path = write("train-images-idx3-ubyte", 0x804, {5, 28, 28}, 5 * 784);
  try {
    read_idx(path, 3);
    FAIL() << "expected a DatasetError";
  } catch (const DatasetError& e) {
    EXPECT_EQ(std::string(e.what()), path +
                                         ": bad magic number 0x00000804, expected 0x00000803 "
                                         "(an unsigned-byte IDX file with 3 dimensions)");
  }
  // A float IDX file (type 0x0d) is not an unsigned-byte one either.
  path = write("floats", 0xd01, {4}, 16);
  EXPECT_THROW(read_idx(path, 1), DatasetError);
}

TEST_F(IdxFiles, TruncatedBodyAndHeader) {
  std::string path = write("images", 0x803, {5, 28, 28}, 3 * 784);
  try {
    read_idx(path, 3);
    FAIL() << "expected a DatasetError";
  } catch (const DatasetError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": truncated: the header promises 3920 bytes of data, the file has 2352");
  }
  path = (dir_ / "short").string();
  std::ofstream(path, std::ios::binary).write("\0\0\x08\x03\0\0", 6);
  try {
    read_idx(path, 3);
    FAIL() << "expected a DatasetError";
  } catch (const DatasetError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": truncated: the file ends inside the header (dimension 0)");
  }
}

TEST_F(IdxFiles, TruncatedGzipStream) {
  std::string path = write("images", 0x803, {50, 28, 28}, 50 * 784);
  // Cut the compressed file in half: zlib reports an unexpected end of the stream.
  fs::resize_file(path, fs::file_size(path) / 2);
  try {
    read_idx(path, 3);
    FAIL() << "expected a DatasetError";
  } catch (const DatasetError& e) {
    std::string msg = e.what();
    EXPECT_EQ(msg.rfind(path + ": ", 0), 0u) << msg;
    EXPECT_NE(msg.find("truncated"), std::string::npos) << msg;
  }
}

TEST_F(IdxFiles, TrailingBytesAreAnError) {
  std::string path = write("labels", 0x801, {4}, 6);
  try {
    read_idx(path, 1);
    FAIL() << "expected a DatasetError";
  } catch (const DatasetError& e) {
    EXPECT_EQ(std::string(e.what()),
              path + ": has bytes after the 4 the header promises (wrong dimensions?)");
  }
}

TEST_F(IdxFiles, AbsurdHeaderIsRejectedBeforeAllocating) {
  std::string path = write("images", 0x803, {0xffffffffu, 0xffffffffu, 28}, 16);
  EXPECT_THROW(read_idx(path, 3), DatasetError);
}

TEST_F(IdxFiles, LabelCountMustMatchImageCount) {
  write_pair(5, 4);
  EXPECT_EQ(split_error(), (dir_ / "train-labels-idx1-ubyte.gz").string() + ": has 4 labels but " +
                               (dir_ / "train-images-idx3-ubyte.gz").string() + " has 5 images");
}

TEST_F(IdxFiles, ImageSizeMustMatch) {
  write_pair(3, 3, 32, 32);
  EXPECT_EQ(split_error(),
            (dir_ / "train-images-idx3-ubyte.gz").string() + ": images are 32x32, expected 28x28");
}

TEST_F(IdxFiles, LabelsMustBeBelowTheClassCount) {
  write("train-images-idx3-ubyte", 0x803, {2, 28, 28}, 2 * 784);
  write("train-labels-idx1-ubyte", 0x801, {2}, 2, false, 12);
  EXPECT_EQ(split_error(), (dir_ / "train-labels-idx1-ubyte.gz").string() +
                               ": label 12 at index 0 is not below 10 classes");
}

TEST_F(IdxFiles, MissingFileIsNamed) {
  write("train-images-idx3-ubyte", 0x803, {2, 28, 28}, 2 * 784);
  EXPECT_EQ(split_error(), (dir_ / "train-labels-idx1-ubyte.gz").string() + ": no such file");
}

}  // namespace
}  // namespace cohort::train
