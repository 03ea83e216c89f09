#include "cohort/comm/frame_seal.h"

#include <openssl/core_names.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <string>

#include "cohort/base/checksum.h"
#include "cohort/base/error.h"

namespace cohort::comm {

// HMAC: a keyed EVP_MAC; EVP_MAC_init without a key starts a new message with the key's
// precomputed inner and outer states, so a frame costs no key schedule. GMAC: an AES-256-GCM
// context keyed once; each frame sets its nonce and feeds the frame as associated data only.
struct FrameMac::Ctx {
  EVP_MAC* mac = nullptr;
  EVP_MAC_CTX* hmac = nullptr;
  EVP_CIPHER_CTX* gcm = nullptr;
  ~Ctx() {
    EVP_MAC_CTX_free(hmac);
    EVP_MAC_free(mac);
    EVP_CIPHER_CTX_free(gcm);
  }
};

namespace {

constexpr size_t kGcmNonce = 12;

[[noreturn]] void fail(const char* what) {
  throw Error(std::string("frame integrity: OpenSSL ") + what + " failed");
}

}  // namespace

FrameMac::FrameMac(MacAlgorithm algorithm, const net::SessionKey& key)
    : algorithm_(algorithm), ctx_(std::make_unique<Ctx>()) {
  if (algorithm_ == MacAlgorithm::HmacSha256) {
    ctx_->mac = EVP_MAC_fetch(nullptr, "HMAC", nullptr);
    if (!ctx_->mac) fail("EVP_MAC_fetch(HMAC)");
    ctx_->hmac = EVP_MAC_CTX_new(ctx_->mac);
    if (!ctx_->hmac) fail("EVP_MAC_CTX_new");
    char digest[] = "SHA256";
    const OSSL_PARAM params[] = {OSSL_PARAM_construct_utf8_string(OSSL_MAC_PARAM_DIGEST, digest, 0),
                                 OSSL_PARAM_END};
    if (!EVP_MAC_init(ctx_->hmac, key.data(), key.size(), params)) fail("EVP_MAC_init");
    return;
  }
  ctx_->gcm = EVP_CIPHER_CTX_new();
  if (!ctx_->gcm) fail("EVP_CIPHER_CTX_new");
  static_assert(sizeof(net::SessionKey) == 32, "AES-256 takes the whole key");
  if (!EVP_EncryptInit_ex(ctx_->gcm, EVP_aes_256_gcm(), nullptr, key.data(), nullptr)) {
    fail("EVP_EncryptInit_ex(aes-256-gcm)");
  }
}

FrameMac::~FrameMac() = default;

void FrameMac::begin(const void* header, size_t n) {
  uint8_t number[kGcmNonce] = {};
  for (int i = 0; i < 8; ++i) number[i] = static_cast<uint8_t>(frame_ >> (8 * i));
  if (algorithm_ == MacAlgorithm::HmacSha256) {
    if (!EVP_MAC_init(ctx_->hmac, nullptr, 0, nullptr)) fail("EVP_MAC_init");
    update(number, 8);
  } else if (!EVP_EncryptInit_ex(ctx_->gcm, nullptr, nullptr, nullptr, number)) {
    fail("EVP_EncryptInit_ex(nonce)");
  }
  update(header, n);
}

void FrameMac::update(const void* p, size_t n) {
  if (n == 0) return;
  const auto* bytes = static_cast<const unsigned char*>(p);
  if (algorithm_ == MacAlgorithm::HmacSha256) {
    if (!EVP_MAC_update(ctx_->hmac, bytes, n)) fail("EVP_MAC_update");
    return;
  }
  // Associated data, in pieces of at most INT_MAX bytes (EVP's length is an int).
  while (n > 0) {
    const int piece = static_cast<int>(std::min<size_t>(n, size_t{1} << 30));
    int len = 0;
    if (!EVP_EncryptUpdate(ctx_->gcm, nullptr, &len, bytes, piece)) fail("EVP_EncryptUpdate");
    bytes += piece;
    n -= static_cast<size_t>(piece);
  }
}

FrameTag FrameMac::finish() {
  FrameTag tag{};
  if (algorithm_ == MacAlgorithm::HmacSha256) {
    size_t len = 0;
    if (!EVP_MAC_final(ctx_->hmac, tag.data(), &len, tag.size()) || len != tag_bytes()) {
      fail("EVP_MAC_final");
    }
  } else {
    int len = 0;
    if (!EVP_EncryptFinal_ex(ctx_->gcm, nullptr, &len) ||
        !EVP_CIPHER_CTX_ctrl(ctx_->gcm, EVP_CTRL_GCM_GET_TAG, static_cast<int>(tag_bytes()),
                             tag.data())) {
      fail("EVP_EncryptFinal_ex(gcm)");
    }
  }
  ++frame_;
  return tag;
}

MacAlgorithm mac_for(Integrity integrity) {
  return integrity == Integrity::Gmac ? MacAlgorithm::AesGmac : MacAlgorithm::HmacSha256;
}

net::SessionKey frame_key(const net::SessionKey& session, int from, int to) {
  const std::string label = "cohort-frames " + std::to_string(from) + ">" + std::to_string(to);
  return hmac_sha256(
      std::string_view(reinterpret_cast<const char*>(session.data()), session.size()), label.data(),
      label.size());
}

FrameSeal::FrameSeal(MacAlgorithm algorithm, const net::SessionKey& session, int rank, int peer)
    : send_(algorithm, frame_key(session, rank, peer)),
      recv_(algorithm, frame_key(session, peer, rank)) {}

bool tags_equal(const FrameTag& a, const FrameTag& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

}  // namespace cohort::comm
