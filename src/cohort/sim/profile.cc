#include "cohort/sim/profile.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <nlohmann/json.hpp>

#include "cohort/base/error.h"
#include "cohort/base/file.h"
#include "cohort/base/yaml_reader.h"

namespace cohort::sim {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();
const std::vector<std::string> kCodecs = {"fp16", "bf16", "int8", "topk", "powersgd"};

const Schema& schema() {
  static const Schema s = {
      {"", {"profile", "name", "sources", "host", "transports", "kernels", "compute"}},
      {"host", {"cores", "ranks_per_host"}},
      {"transports", {"tcp", "shm", "network"}},
      {"transports.tcp",
       {"latency_us", "gbytes_per_s", "oversubscribed_latency_us", "oversubscribed_exponent"}},
      {"transports.shm",
       {"latency_us", "gbytes_per_s", "oversubscribed_latency_us", "oversubscribed_exponent"}},
      {"transports.network",
       {"latency_us", "gbytes_per_s", "oversubscribed_latency_us", "oversubscribed_exponent"}},
      {"kernels", {"reduce_gbytes_per_s", "codecs"}},
      {"kernels.codecs", kCodecs},
      {"kernels.codecs.fp16", {"encode_gbytes_per_s", "decode_gbytes_per_s"}},
      {"kernels.codecs.bf16", {"encode_gbytes_per_s", "decode_gbytes_per_s"}},
      {"kernels.codecs.int8", {"encode_gbytes_per_s", "decode_gbytes_per_s"}},
      {"kernels.codecs.topk", {"encode_gbytes_per_s", "decode_gbytes_per_s"}},
      {"kernels.codecs.powersgd", {"encode_gbytes_per_s", "decode_gbytes_per_s"}},
      {"compute",
       {"device", "threads", "batch_per_worker", "data_ms", "forward_ms", "backward_ms",
        "optimizer_ms", "shared_slowdown", "oversubscribed_slowdown", "gradients"}},
      {"compute.gradients", {"name", "bytes", "rows", "cols", "ready_ms"}},
  };
  return s;
}

class Reader {
 public:
  Reader(std::string_view json, const std::string& source) : r_(json, source, &schema()) {}
  const YamlReader& yaml() const { return r_; }

  YAML::Node section(const YAML::Node& parent, const std::string& path, bool required) const {
    if (required && !YamlReader::child(parent, path).IsDefined()) {
      r_.fail(path, parent, "is missing");
    }
    return r_.section(parent, path);
  }
  double number(const YAML::Node& m, const std::string& path, double lo, bool lo_open,
                double hi = kInf, std::optional<double> fallback = std::nullopt) const {
    const std::string expected =
        std::string("a number ") + (lo_open ? "above " : "of at least ") + yaml_number(lo);
    auto v = r_.get_number(m, path, lo, lo_open, hi, false, expected);
    if (v) return *v;
    if (fallback) return *fallback;
    r_.fail(path, m, "is missing (" + expected + ")");
  }
  int64_t integer(const YAML::Node& m, const std::string& path, int64_t lo, int64_t hi,
                  std::optional<int64_t> fallback = std::nullopt) const {
    const std::string expected = "an integer in [" + std::to_string(lo) + ", " +
                                 std::to_string(hi) + "]";
    auto v = r_.get_int(m, path, lo, hi, expected);
    if (v) return *v;
    if (fallback) return *fallback;
    r_.fail(path, m, "is missing (" + expected + ")");
  }

 private:
  YamlReader r_;
};

LinkCost read_link(const Reader& r, const YAML::Node& transports, const std::string& name) {
  const std::string path = "transports." + name;
  YAML::Node m = r.section(transports, path, true);
  LinkCost l;
  const double latency_us = r.number(m, path + ".latency_us", 0, false);
  l.latency_s = latency_us * 1e-6;
  l.bytes_per_s = r.number(m, path + ".gbytes_per_s", 0, true) * 1e9;
  l.oversubscribed_latency_s =
      r.number(m, path + ".oversubscribed_latency_us", latency_us, false, kInf, 0) * 1e-6;
  l.oversubscribed_exponent = r.number(m, path + ".oversubscribed_exponent", 0, false, 4, 1);
  return l;
}

void read_compute(const Reader& r, const YAML::Node& root, Compute& c) {
  YAML::Node m = r.section(root, "compute", true);
  const auto device = r.yaml().get_choice(m, "compute.device", {"cpu", "gpu"});
  c.on_device = device && *device == "gpu";
  c.threads = static_cast<int>(r.integer(m, "compute.threads", 1, 1024, 1));
  c.batch_per_worker = r.integer(m, "compute.batch_per_worker", 1, int64_t{1} << 40);
  c.data_s = r.number(m, "compute.data_ms", 0, false, kInf, 0) * 1e-3;
  c.forward_s = r.number(m, "compute.forward_ms", 0, false) * 1e-3;
  c.backward_s = r.number(m, "compute.backward_ms", 0, true) * 1e-3;
  c.optimizer_s = r.number(m, "compute.optimizer_ms", 0, false, kInf, 0) * 1e-3;
  c.shared_slowdown = r.number(m, "compute.shared_slowdown", 1, false, 100, 1);
  c.oversubscribed_slowdown = r.number(m, "compute.oversubscribed_slowdown", 1, false, 100, 1);
  YAML::Node list = YamlReader::child(m, "compute.gradients");
  if (!list.IsDefined()) r.yaml().fail("compute.gradients", m, "is missing");
  if (!list.IsSequence() || list.size() == 0) {
    r.yaml().fail("compute.gradients", list,
                  "expected a list of the gradients in the order backward produces them, got " +
                      YamlReader::describe(list));
  }
  double last = 0;
  for (size_t i = 0; i < list.size(); ++i) {
    const YAML::Node g = list[i];
    const std::string path = "compute.gradients[" + std::to_string(i) + "]";
    if (!g.IsMap()) r.yaml().fail(path, g, "expected a map of keys, got " + YamlReader::describe(g));
    r.yaml().check_keys(g, "compute.gradients");
    Gradient grad;
    grad.name = r.yaml().get_string(g, path + ".name").value_or("gradient " + std::to_string(i));
    grad.bytes = static_cast<uint64_t>(r.integer(g, path + ".bytes", 4, int64_t{1} << 40));
    if (grad.bytes % 4) r.yaml().fail(path + ".bytes", YamlReader::child(g, "bytes"), "must be a multiple of 4 (f32)");
    const uint64_t elems = grad.bytes / 4;
    grad.rows = static_cast<uint64_t>(r.integer(g, path + ".rows", 1, int64_t{1} << 40, 1));
    grad.cols = static_cast<uint64_t>(
        r.integer(g, path + ".cols", 1, int64_t{1} << 40, static_cast<int64_t>(elems / grad.rows)));
    if (grad.rows * grad.cols != elems) {
      r.yaml().fail(path + ".rows", g,
                    "rows x cols (" + std::to_string(grad.rows) + " x " +
                        std::to_string(grad.cols) + ") must be bytes / 4 (" +
                        std::to_string(elems) + ")");
    }
    grad.ready_s = r.number(g, path + ".ready_ms", 0, false, c.backward_s * 1e3) * 1e-3;
    if (grad.ready_s + 1e-12 < last) {
      r.yaml().fail(path + ".ready_ms", YamlReader::child(g, "ready_ms"),
                    "must not be before the gradient listed before it (" + yaml_number(last * 1e3) +
                        " ms): gradients are listed in the order backward produces them");
    }
    last = grad.ready_s;
    c.gradients.push_back(std::move(grad));
  }
}

}  // namespace

Profile parse_profile(std::string_view json, const std::string& source) {
  Reader r(json, source);
  const YAML::Node& root = r.yaml().root();
  if (!root.IsMap()) r.yaml().fail("", root, "expected a profile (a JSON object), got " + YamlReader::describe(root));
  r.yaml().check_keys(root, "");
  Profile p;
  const int64_t version = r.integer(root, "profile", 1, 1);
  (void)version;
  p.name = r.yaml().get_string(root, "name").value_or(source);
  YAML::Node sources = YamlReader::child(root, "sources");
  if (sources.IsDefined()) {
    if (!sources.IsSequence()) r.yaml().fail("sources", sources, "expected a list of strings, got " + YamlReader::describe(sources));
    for (const auto& s : sources) {
      if (!s.IsScalar()) r.yaml().fail("sources", s, "expected a string, got " + YamlReader::describe(s));
      p.sources.push_back(s.Scalar());
    }
  }
  YAML::Node host = r.section(root, "host", true);
  p.cores = static_cast<int>(r.integer(host, "host.cores", 1, 1 << 20));
  p.ranks_per_host = static_cast<int>(r.integer(host, "host.ranks_per_host", 1, 1 << 20, 1));
  YAML::Node transports = r.section(root, "transports", true);
  p.tcp = read_link(r, transports, "tcp");
  if (YamlReader::child(transports, "transports.shm").IsDefined()) p.shm = read_link(r, transports, "shm");
  p.network = read_link(r, transports, "network");
  YAML::Node kernels = r.section(root, "kernels", true);
  p.reduce_bytes_per_s = r.number(kernels, "kernels.reduce_gbytes_per_s", 0, true) * 1e9;
  YAML::Node codecs = r.section(kernels, "kernels.codecs", false);
  for (const std::string& name : kCodecs) {
    const std::string path = "kernels.codecs." + name;
    if (!YamlReader::child(codecs, path).IsDefined()) continue;
    YAML::Node c = r.section(codecs, path, true);
    p.codecs[name] = CodecCost{
        .encode_bytes_per_s = r.number(c, path + ".encode_gbytes_per_s", 0, true) * 1e9,
        .decode_bytes_per_s = r.number(c, path + ".decode_gbytes_per_s", 0, true) * 1e9};
  }
  if (YamlReader::child(root, "compute").IsDefined()) {
    read_compute(r, root, p.compute);
    p.has_compute = true;
  }
  return p;
}

Profile read_profile(const std::string& path) {
  return parse_profile(read_file(path), path);
}

namespace {
// A figure in a file's unit, without the last bits of rounding from converting it.
double figure(double v) {
  char text[32];
  std::snprintf(text, sizeof text, "%.12g", v);
  return std::strtod(text, nullptr);
}
}  // namespace

std::string profile_json(const Profile& p) {
  using nlohmann::json;
  auto link = [](const LinkCost& l) {
    json j = {{"latency_us", figure(l.latency_s * 1e6)}, {"gbytes_per_s", figure(l.bytes_per_s / 1e9)}};
    if (l.oversubscribed_latency_s > 0) {
      j["oversubscribed_latency_us"] = figure(l.oversubscribed_latency_s * 1e6);
      j["oversubscribed_exponent"] = figure(l.oversubscribed_exponent);
    }
    return j;
  };
  json transports = {{"tcp", link(p.tcp)}, {"network", link(p.network)}};
  if (p.shm) transports["shm"] = link(*p.shm);
  json codecs = json::object();
  for (const auto& [name, c] : p.codecs) {
    codecs[name] = {{"encode_gbytes_per_s", figure(c.encode_bytes_per_s / 1e9)},
                    {"decode_gbytes_per_s", figure(c.decode_bytes_per_s / 1e9)}};
  }
  json grads = json::array();
  for (const Gradient& g : p.compute.gradients) {
    grads.push_back({{"name", g.name}, {"bytes", g.bytes}, {"rows", g.rows}, {"cols", g.cols},
                     {"ready_ms", figure(g.ready_s * 1e3)}});
  }
  const Compute& c = p.compute;
  json j = {{"profile", 1},
            {"name", p.name},
            {"sources", p.sources},
            {"host", {{"cores", p.cores}, {"ranks_per_host", p.ranks_per_host}}},
            {"transports", transports},
            {"kernels", {{"reduce_gbytes_per_s", figure(p.reduce_bytes_per_s / 1e9)}, {"codecs", codecs}}}};
  if (!p.has_compute) return j.dump(2) + "\n";
  j["compute"] = json
             {{"device", c.on_device ? "gpu" : "cpu"},
              {"threads", c.threads},
              {"batch_per_worker", c.batch_per_worker},
              {"data_ms", figure(c.data_s * 1e3)},
              {"forward_ms", figure(c.forward_s * 1e3)},
              {"backward_ms", figure(c.backward_s * 1e3)},
              {"optimizer_ms", figure(c.optimizer_s * 1e3)},
              {"shared_slowdown", figure(c.shared_slowdown)},
              {"oversubscribed_slowdown", figure(c.oversubscribed_slowdown)},
              {"gradients", grads}};
  return j.dump(2) + "\n";
}

double tcp_payload_rate(double line_bytes_per_s, int mtu, int framing) {
  constexpr int kHeaders = 20 + 20 + 12;  // IPv4, TCP, the timestamps option
  if (mtu <= kHeaders || framing < 0) {
    throw Error("a link's MTU must exceed 52 bytes and its framing be at least 0");
  }
  return line_bytes_per_s * (mtu - kHeaders) / (mtu + framing);
}

}  // namespace cohort::sim
