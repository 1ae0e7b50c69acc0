#include "client/address.hpp"

namespace fusee::client {

std::optional<host_port> parse_host_port(const std::string& text) {
  auto colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == text.size()) return std::nullopt;
  auto port_text = text.substr(colon + 1);
  if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos)
    return std::nullopt;
  auto port = std::stoul(port_text);
  if (port > 65535) return std::nullopt;
  return host_port{text.substr(0, colon), static_cast<uint16_t>(port)};
}

}  // namespace fusee::client
