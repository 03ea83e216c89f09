#include "cohort/base/base64.h"

#include <gtest/gtest.h>

#include "cohort/base/error.h"

namespace cohort {
namespace {

// RFC 4648's test vectors, then every byte value.
TEST(Base64, EncodesAndDecodesRfc4648sVectorsAndEveryByte) {
  const std::pair<const char*, const char*> vectors[] = {{"", ""},
                                                         {"f", "Zg=="},
                                                         {"fo", "Zm8="},
                                                         {"foo", "Zm9v"},
                                                         {"foob", "Zm9vYg=="},
                                                         {"fooba", "Zm9vYmE="},
                                                         {"foobar", "Zm9vYmFy"}};
  for (const auto& [plain, coded] : vectors) {
    EXPECT_EQ(base64_encode(plain), coded);
    EXPECT_EQ(base64_decode(coded), plain);
  }
  std::string all;
  for (int i = 0; i < 256; ++i) all += char(i);
  for (size_t n = 0; n <= all.size(); n += 37) {
    EXPECT_EQ(base64_decode(base64_encode(all.substr(0, n))), all.substr(0, n));
  }
}

TEST(Base64, RefusesWhatIsNotBase64) {
  EXPECT_THROW(base64_decode("abc"), ProtocolError);
  EXPECT_THROW(base64_decode("ab!d"), ProtocolError);
}

}  // namespace
}  // namespace cohort
