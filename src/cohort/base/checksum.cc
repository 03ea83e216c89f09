#include "cohort/base/checksum.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <openssl/sha.h>
#include <zlib.h>

#include "cohort/base/error.h"

namespace cohort {

uint32_t crc32(const void* data, size_t n, uint32_t seed) {
  // zlib's crc32 takes a uInt length; feed large buffers in pieces.
  uLong crc = seed;
  const auto* p = static_cast<const Bytef*>(data);
  while (n > 0) {
    uInt piece = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    crc = ::crc32(crc, p, piece);
    p += piece;
    n -= piece;
  }
  return static_cast<uint32_t>(crc);
}

Digest sha256(const void* data, size_t n) {
  Digest d;
  SHA256(static_cast<const unsigned char*>(data), n, d.data());
  return d;
}

Digest hmac_sha256(std::string_view key, const void* data, size_t n) {
  Digest d;
  unsigned int len = 0;
  if (!HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()),
            static_cast<const unsigned char*>(data), n, d.data(), &len) ||
      len != d.size()) {
    throw Error("HMAC-SHA256 failed");
  }
  return d;
}

bool digest_equal(const Digest& a, const Digest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

std::string to_hex(const void* data, size_t n) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  s.reserve(n * 2);
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    s.push_back(kHex[p[i] >> 4]);
    s.push_back(kHex[p[i] & 15]);
  }
  return s;
}

void random_bytes(void* out, size_t n) {
  if (RAND_bytes(static_cast<unsigned char*>(out), static_cast<int>(n)) != 1) {
    throw Error("RAND_bytes failed");
  }
}

}  // namespace cohort
