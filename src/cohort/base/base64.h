// Base64 (RFC 4648, with padding) through OpenSSL's EVP_EncodeBlock/EVP_DecodeBlock: Kubernetes
// Secrets and etcd's JSON gateway carry bytes this way.
#pragma once

#include <string>
#include <string_view>

namespace cohort {

std::string base64_encode(std::string_view bytes);
// Throws ProtocolError on text that is not base64.
std::string base64_decode(std::string_view text);

}  // namespace cohort
