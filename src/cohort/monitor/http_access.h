// Who may do what on the HTTP API of `cohort serve`.
//
// Every request that changes state (any method but GET, HEAD and OPTIONS: submit, cancel) must
// carry the server's token as `Authorization: Bearer <token>` — the CLI reads it from a file only
// its user can read (base/secret.h) — and must not come from another web origin: a browser sends
// `Origin` (and `Sec-Fetch-Site`) with a cross-site request, and such a request is refused, so a
// page the user visits cannot submit or cancel jobs (cross-site request forgery) even where it
// can reach the port. Bodies must be JSON: a cross-site HTML form cannot send that content type.
//
// Read-only requests are open while the server listens on loopback only (open_reads); bound
// beyond it they need the token too, as the bearer header or as the cookie that
// `GET /login?token=...` sets for a browser. On loopback the Host header must name a loopback
// address, so a page whose own domain resolves to 127.0.0.1 (DNS rebinding) cannot read the API.
#pragma once

#include <optional>
#include <string>

namespace httplib {
struct Request;
}

namespace cohort::monitor {

struct HttpAccessPolicy {
  std::string token;       // the secret state-changing requests (and closed reads) must carry
  bool open_reads = true;  // GET and HEAD without the token
  bool loopback = true;    // the server listens on loopback only: Host must name loopback
};

struct HttpRefusal {
  int status;  // 401, 403 or 415
  std::string reason;
};

// Why `req` is refused under `policy`, or nothing when it may go on.
std::optional<HttpRefusal> check_access(const httplib::Request& req,
                                        const HttpAccessPolicy& policy);

// Whether `host` (a bind address or the host part of a Host header) is a loopback address.
bool is_loopback_host(const std::string& host);

// The name of the cookie `GET /login` sets.
inline constexpr const char* kTokenCookie = "cohort_token";

}  // namespace cohort::monitor
