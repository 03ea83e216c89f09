// Typed errors raised at Cohort's public API. Every error says what failed and names the parties
// involved (rank, collective, sequence number, file and line) so that a user can act on it.
#pragma once

#include <stdexcept>
#include <string>

namespace cohort {

// Base of every error Cohort raises on purpose.
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A deadline passed before the awaited event happened.
class TimeoutError : public Error {
 public:
  using Error::Error;
};

// A peer's connection was lost (closed, reset, or the process died).
class PeerLostError : public Error {
 public:
  PeerLostError(int rank, const std::string& what) : Error(what), rank_(rank) {}
  int rank() const { return rank_; }

 private:
  int rank_;
};

// Bytes on a connection broke the wire rules (bad magic, version, type, oversized length, ...).
class ProtocolError : public Error {
 public:
  using Error::Error;
};

// A peer failed to prove the job token.
class AuthError : public ProtocolError {
 public:
  using ProtocolError::ProtocolError;
};

// Data that arrived over an authenticated connection failed its integrity check: it was changed,
// injected, replayed or reordered on the way.
class IntegrityError : public AuthError {
 public:
  using AuthError::AuthError;
};

// The operation was cancelled by abort().
class AbortedError : public Error {
 public:
  using Error::Error;
};

// A system call failed; the message carries strerror(errno).
class SystemError : public Error {
 public:
  SystemError(const std::string& what, int err);
  int code() const { return code_; }

 private:
  int code_;
};

// A user-supplied file or value is invalid; the message names the file, line, column and key.
class ConfigError : public Error {
 public:
  using Error::Error;
};

}  // namespace cohort
