// Test tool: signs or verifies an invocation signature with our code, so an independent
// implementation (tests/scripts/signature_interop.py) can check us and be checked by us.
//   sigtool sign   SECRET_HEX T_MS          < body   -> prints the header value
//   sigtool verify SECRET_HEX NOW_MS HEADER < body   -> exit 0 if good, else 1 and the reason
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "protocol/signature.hpp"

namespace {

std::string unhex(const std::string& hex) {
  std::string out;
  for (size_t i = 0; i + 1 < hex.size(); i += 2)
    out.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
  return out;
}

const char* reason_name(fusee::proto::signature_error e) {
  switch (e) {
  case fusee::proto::signature_error::malformed:
    return "malformed";
  case fusee::proto::signature_error::too_old:
    return "too_old";
  case fusee::proto::signature_error::too_new:
    return "too_new";
  case fusee::proto::signature_error::mismatch:
    return "mismatch";
  }
  return "?";
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  std::string body{std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>()};
  if (args.size() == 3 && args[0] == "sign") {
    std::cout << fusee::proto::sign(unhex(args[1]), std::stoull(args[2]), body);
    return 0;
  }
  if (args.size() == 4 && args[0] == "verify") {
    std::vector<std::string> secrets{unhex(args[1])};
    auto r = fusee::proto::verify(args[3], body, secrets, std::stoull(args[2]));
    if (!r) return 0;
    std::cout << reason_name(r->reason) << ": " << r->message << "\n";
    return 1;
  }
  std::cerr << "usage: sigtool sign SECRET_HEX T_MS < body\n"
               "       sigtool verify SECRET_HEX NOW_MS HEADER < body\n";
  return 2;
}
