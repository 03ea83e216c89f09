#include "cohort/comm/frame_seal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <string>

#include "cohort/base/checksum.h"
#include "cohort/base/error.h"

namespace cohort::comm {

// A keyed HMAC-SHA256 context. EVP_MAC_init without a key starts a new message with the key's
// precomputed inner and outer states, so a frame costs no key schedule.
struct FrameMac::Ctx {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* ctx = nullptr;
  ~Ctx() {
    EVP_MAC_CTX_free(ctx);
    EVP_MAC_free(mac);
  }
};

namespace {

[[noreturn]] void fail(const char* what) {
  throw Error(std::string("frame integrity: OpenSSL ") + what + " failed");
}

}  // namespace

FrameMac::FrameMac(const net::SessionKey& key) : ctx_(std::make_unique<Ctx>()) {
  ctx_->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
  if (!ctx_->mac) fail("EVP_MAC_fetch(HMAC)");
  ctx_->ctx = EVP_MAC_CTX_new(ctx_->mac);
  if (!ctx_->ctx) fail("EVP_MAC_CTX_new");
  char digest[] = "SHA256";
  const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                               OSSL_PARAM_END};
  if (!EVP_MAC_init(ctx_->ctx, key.data(), key.size(), params)) fail("EVP_MAC_init");
}

FrameMac::~FrameMac() = default;

void FrameMac::begin(const void* header, size_t n) {
  if (!EVP_MAC_init(ctx_->ctx, nullptr, 0, nullptr)) fail("EVP_MAC_init");
  uint8_t number[8];
  for (int i = 0; i < 8; ++i) number[i] = static_cast<uint8_t>(frame_ >> (8 * i));
  update(number, sizeof(number));
  update(header, n);
}

void FrameMac::update(const void* p, size_t n) {
  if (n && !EVP_MAC_update(ctx_->ctx, static_cast<const unsigned char*>(p), n)) {
    fail("EVP_MAC_update");
  }
}

FrameTag FrameMac::finish() {
  FrameTag tag;
  size_t len = 0;
  if (!EVP_MAC_final(ctx_->ctx, tag.data(), &len, tag.size()) || len != tag.size()) {
    fail("EVP_MAC_final");
  }
  ++frame_;
  return tag;
}

net::SessionKey frame_key(const net::SessionKey& session, int from, int to) {
  const std::string label = "cohort-frames " + std::to_string(from) + ">" + std::to_string(to);
  return hmac_sha256(
      std::string_view(reinterpret_cast<const char*>(session.data()), session.size()), label.data(),
      label.size());
}

FrameSeal::FrameSeal(const net::SessionKey& session, int rank, int peer)
    : send_(frame_key(session, rank, peer)), recv_(frame_key(session, peer, rank)) {}

bool tags_equal(const FrameTag& a, const FrameTag& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cohort::comm
