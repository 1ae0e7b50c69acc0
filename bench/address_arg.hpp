// The HOST:PORT argument every bench program takes: parsed, or a usage error (exit status 2).
#pragma once

#include <cstdio>
#include <cstdlib>

#include "client/address.hpp"

namespace fusee::bench {

inline client::host_port address_arg(const char* text) {
  auto at = client::parse_host_port(text);
  if (!at) {
    std::fprintf(stderr, "not host:port: %s\n", text);
    std::exit(2);
  }
  return *at;
}

}  // namespace fusee::bench
