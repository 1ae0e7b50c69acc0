#include "client/address.hpp"

#include <algorithm>

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

std::vector<std::string> split_address_list(const std::string& text) {
  std::vector<std::string> out;
  for (size_t at = 0; at <= text.size();) {
    auto comma = std::min(text.find(',', at), text.size());
    out.push_back(text.substr(at, comma - at));
    at = comma + 1;
  }
  return out;
}

}  // namespace fusee::client
