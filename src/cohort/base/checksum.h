// Checksums and message authentication (zlib CRC-32, OpenSSL SHA-256 / HMAC-SHA256).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace cohort {

using Digest = std::array<uint8_t, 32>;

uint32_t crc32(const void* data, size_t n, uint32_t seed = 0);
Digest sha256(const void* data, size_t n);
Digest hmac_sha256(std::string_view key, const void* data, size_t n);
// Constant-time comparison, for MACs.
bool digest_equal(const Digest& a, const Digest& b);
std::string to_hex(const void* data, size_t n);
// Cryptographically random bytes (OpenSSL RAND_bytes).
void random_bytes(void* out, size_t n);

}  // namespace cohort
