#include "cohort/comm/types.h"

namespace cohort::comm {

std::string_view reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
      return "sum";
    case ReduceOp::Avg:
      return "avg";
    case ReduceOp::Max:
      return "max";
    case ReduceOp::Min:
      return "min";
    case ReduceOp::Product:
      return "product";
    case ReduceOp::BAnd:
      return "band";
    case ReduceOp::BOr:
      return "bor";
    case ReduceOp::BXor:
      return "bxor";
  }
  return "?";
}

std::string_view algorithm_name(Algorithm a) {
  switch (a) {
    case Algorithm::Auto:
      return "auto";
    case Algorithm::Ring:
      return "ring";
    case Algorithm::HalvingDoubling:
      return "halving_doubling";
    case Algorithm::RecursiveDoubling:
      return "recursive_doubling";
    case Algorithm::Hierarchical:
      return "hierarchical";
    case Algorithm::Linear:
      return "linear";
  }
  return "?";
}

Algorithm parse_algorithm(std::string_view s) {
  if (s == "auto") return Algorithm::Auto;
  if (s == "ring") return Algorithm::Ring;
  if (s == "halving_doubling" || s == "hd") return Algorithm::HalvingDoubling;
  if (s == "recursive_doubling" || s == "rd") return Algorithm::RecursiveDoubling;
  if (s == "hierarchical") return Algorithm::Hierarchical;
  if (s == "linear") return Algorithm::Linear;
  throw ConfigError(
      "unknown algorithm '" + std::string(s) +
      "' (expected auto, ring, halving_doubling, recursive_doubling, hierarchical or linear)");
}

std::string_view transport_name(Transport t) {
  switch (t) {
    case Transport::Auto:
      return "auto";
    case Transport::Tcp:
      return "tcp";
    case Transport::Shm:
      return "shm";
  }
  return "?";
}

Transport parse_transport(std::string_view s) {
  if (s == "auto") return Transport::Auto;
  if (s == "tcp") return Transport::Tcp;
  if (s == "shm") return Transport::Shm;
  throw ConfigError("unknown transport '" + std::string(s) + "' (expected auto, tcp or shm)");
}

std::string_view integrity_name(Integrity i) {
  switch (i) {
    case Integrity::None:
      return "none";
    case Integrity::Hmac:
      return "hmac";
    case Integrity::Gmac:
      return "gmac";
  }
  return "?";
}

Integrity parse_integrity(std::string_view s) {
  if (s == "none") return Integrity::None;
  if (s == "hmac") return Integrity::Hmac;
  if (s == "gmac") return Integrity::Gmac;
  throw ConfigError("unknown integrity '" + std::string(s) + "' (expected none, hmac or gmac)");
}

}  // namespace cohort::comm
