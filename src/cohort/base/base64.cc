#include "cohort/base/base64.h"

#include <openssl/evp.h>

#include <climits>

#include "cohort/base/error.h"

namespace cohort {

std::string base64_encode(std::string_view bytes) {
  if (bytes.size() > size_t(INT_MAX) / 4 * 3) throw Error("base64: input too large");
  std::string out(4 * ((bytes.size() + 2) / 3) + 1, '\0');
  const int n = EVP_EncodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(bytes.data()),
                                static_cast<int>(bytes.size()));
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string base64_decode(std::string_view text) {
  if (text.size() % 4 != 0 || text.size() > size_t(INT_MAX))
    throw ProtocolError("base64: length " + std::to_string(text.size()) +
                        " is not a multiple of 4");
  std::string out(text.size() / 4 * 3, '\0');
  const int n = EVP_DecodeBlock(reinterpret_cast<unsigned char*>(out.data()),
                                reinterpret_cast<const unsigned char*>(text.data()),
                                static_cast<int>(text.size()));
  if (n < 0) throw ProtocolError("base64: not base64 text");
  // EVP_DecodeBlock counts the padding as zero bytes.
  size_t pad = 0;
  if (!text.empty() && text.back() == '=')
    pad = text.size() >= 2 && text[text.size() - 2] == '=' ? 2 : 1;
  out.resize(static_cast<size_t>(n) - pad);
  return out;
}

}  // namespace cohort
