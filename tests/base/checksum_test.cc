#include "cohort/base/checksum.h"

#include <gtest/gtest.h>

#include <string>

#include "cohort/base/bytes.h"
#include "cohort/base/clock.h"

namespace cohort {

TEST(Checksum, Crc32MatchesKnownVector) {
  const std::string s = "123456789";
  EXPECT_EQ(crc32(s.data(), s.size()), 0xCBF43926u);
}

TEST(Checksum, HmacSha256MatchesRfc4231Case2) {
  const std::string data = "what do ya want for nothing?";
  Digest d = hmac_sha256("Jefe", data.data(), data.size());
  EXPECT_EQ(to_hex(d.data(), d.size()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Checksum, DigestEqualDetectsOneBitFlip) {
  Digest a = sha256("x", 1), b = a;
  EXPECT_TRUE(digest_equal(a, b));
  b[31] ^= 1;
  EXPECT_FALSE(digest_equal(a, b));
}

TEST(Bytes, ReaderRejectsTruncatedInput) {
  ByteWriter w;
  w.put<uint32_t>(7).put_string("hello");
  auto bytes = w.take();
  ByteReader r(bytes.data(), bytes.size() - 1);
  EXPECT_EQ(r.get<uint32_t>(), 7u);
  EXPECT_THROW(r.get_string(), ProtocolError);
}

TEST(Clock, DeadlineRemainingNeverNegative) {
  auto d = Deadline::after(Millis(-5));
  EXPECT_TRUE(d.expired());
  EXPECT_EQ(d.remaining().count(), 0);
  EXPECT_EQ(d.poll_timeout_ms(), 0);
  EXPECT_EQ(Deadline::never().poll_timeout_ms(), -1);
}

}  // namespace cohort
