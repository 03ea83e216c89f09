#include "cohort/monitor/http_access.h"

#include <arpa/inet.h>
#include <httplib.h>

#include "cohort/base/secret.h"

namespace cohort::monitor {
namespace {

bool is_read(const std::string& method) {
  return method == "GET" || method == "HEAD" || method == "OPTIONS";
}

// "host:port", "[v6]:port" or a bare host -> the host.
std::string host_part(const std::string& host_header) {
  if (!host_header.empty() && host_header.front() == '[') {
    const size_t close = host_header.find(']');
    return close == std::string::npos ? host_header : host_header.substr(1, close - 1);
  }
  const size_t colon = host_header.rfind(':');
  return colon == std::string::npos ? host_header : host_header.substr(0, colon);
}

std::string bearer(const httplib::Request& req) {
  const std::string h = req.get_header_value("Authorization");
  constexpr std::string_view kScheme = "Bearer ";
  return h.size() > kScheme.size() && h.compare(0, kScheme.size(), kScheme) == 0
             ? h.substr(kScheme.size())
             : std::string();
}

std::string cookie(const httplib::Request& req, const std::string& name) {
  const std::string all = req.get_header_value("Cookie");
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find(';', pos);
    if (end == std::string::npos) end = all.size();
    size_t start = all.find_first_not_of(' ', pos);
    if (start < end && all.compare(start, name.size() + 1, name + "=") == 0) {
      return all.substr(start + name.size() + 1, end - start - name.size() - 1);
    }
    pos = end + 1;
  }
  return "";
}

// The origin a browser would name for this server: http://<Host header>.
bool same_origin(const httplib::Request& req) {
  const std::string origin = req.get_header_value("Origin");
  if (origin.empty()) return true;  // not sent by a browser's cross-origin request
  return origin == "http://" + req.get_header_value("Host");
}

}  // namespace

bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1" || host == "[::1]") return true;
  in_addr a{};  // a dotted IPv4 literal in 127.0.0.0/8, not a name that starts with "127."
  return ::inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

std::optional<HttpRefusal> check_access(const httplib::Request& req,
                                        const HttpAccessPolicy& policy) {
  if (policy.loopback && !is_loopback_host(host_part(req.get_header_value("Host")))) {
    return HttpRefusal{403,
                       "this server answers only requests addressed to a loopback host "
                       "(Host: " +
                           req.get_header_value("Host") + ")"};
  }
  const bool read = is_read(req.method);
  if (!read) {
    const std::string site = req.get_header_value("Sec-Fetch-Site");
    if (!same_origin(req)) {
      return HttpRefusal{403, "cross-origin " + req.method +
                                  " refused (Origin: " + req.get_header_value("Origin") + ")"};
    }
    if (!site.empty() && site != "same-origin" && site != "none") {
      return HttpRefusal{403,
                         "cross-origin " + req.method + " refused (Sec-Fetch-Site: " + site + ")"};
    }
    // Checked before the body is read: a body, or a type, that is not JSON.
    const std::string type = req.get_header_value("Content-Type");
    const std::string length = req.get_header_value("Content-Length");
    const bool has_body = !length.empty() && length != "0";
    if ((has_body || !type.empty()) && type.rfind("application/json", 0) != 0) {
      return HttpRefusal{415, req.method + " " + req.path +
                                  ": expected a JSON body (Content-Type: application/json)"};
    }
  }
  if (read && policy.open_reads) return std::nullopt;
  const std::string given = bearer(req);
  if (!given.empty() && secrets_equal(given, policy.token)) return std::nullopt;
  // A browser's reads may carry the token as the login cookie; a change of state never does.
  if (read) {
    const std::string c = cookie(req, kTokenCookie);
    if (!c.empty() && secrets_equal(c, policy.token)) return std::nullopt;
  }
  return HttpRefusal{401, given.empty() ? req.method + " " + req.path +
                                              " needs the server's token (Authorization: Bearer; "
                                              "cohort submit/cancel read it from --token-file)"
                                        : "wrong token for " + req.method + " " + req.path};
}

}  // namespace cohort::monitor
