#include <gtest/gtest.h>

#include "cohort/base/error.h"
#include "cohort/net/socket.h"

namespace cohort::net {
namespace {

TEST(Endpoint, ParsesHostAndPort) {
  Endpoint e = Endpoint::parse("10.1.2.3:29500");
  EXPECT_EQ(e.host, "10.1.2.3");
  EXPECT_EQ(e.port, 29500);
  EXPECT_EQ(e.str(), "10.1.2.3:29500");
}

TEST(Endpoint, ParsesHostNames) {
  Endpoint e = Endpoint::parse("coordinator.example:80");
  EXPECT_EQ(e.host, "coordinator.example");
  EXPECT_EQ(e.port, 80);
}

TEST(Endpoint, ParsesBracketedIpv6AndPrintsItBracketed) {
  Endpoint e = Endpoint::parse("[::1]:8080");
  EXPECT_EQ(e.host, "::1");
  EXPECT_EQ(e.port, 8080);
  EXPECT_EQ(e.str(), "[::1]:8080");
}

TEST(Endpoint, EmptyHostMeansLoopback) {
  Endpoint e = Endpoint::parse(":1234");
  EXPECT_EQ(e.host, "127.0.0.1");
  EXPECT_EQ(e.port, 1234);
}

TEST(Endpoint, PortBoundsAreInclusive) {
  EXPECT_EQ(Endpoint::parse("h:0").port, 0);
  EXPECT_EQ(Endpoint::parse("h:65535").port, 65535);
  EXPECT_THROW(Endpoint::parse("h:65536"), ConfigError);
}

TEST(Endpoint, RejectsMalformedAddresses) {
  for (const char* bad : {"", "host", "host:", "host:http", "host:80x", "host: 80", "host:+80",
                          "host:-1", "host:123456", "::1:80", "[::1]", "[::1:80", "a]:80"}) {
    EXPECT_THROW(Endpoint::parse(bad), ConfigError) << "'" << bad << "'";
  }
}

TEST(Endpoint, ErrorNamesTheAddress) {
  try {
    Endpoint::parse("node7:http");
    FAIL() << "no exception";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("node7:http"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cohort::net
