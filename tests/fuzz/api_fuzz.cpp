// libFuzzer target over the HTTP API's request routing (app/api_routes): method, path, query
// and JSON body. Beyond "no crash": exactly one of call and refusal, and a call's arguments are
// one valid JSON value.
#include <cstdlib>
#include <string_view>

#include <simdjson.h>

#include "app/api_routes.hpp"
#include "app/url_decoding.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // method \n path \n wait_ms \n body
  std::string_view in{reinterpret_cast<const char*>(data), size};
  std::string_view parts[3];
  for (auto& p : parts) {
    auto nl = in.find('\n');
    p = in.substr(0, nl);
    in = nl == in.npos ? std::string_view{} : in.substr(nl + 1);
  }
  fusee::app::http_exchange ex;
  ex.method = std::string{parts[0]};
  ex.raw_path = std::string{parts[1]};
  ex.path = fusee::app::percent_decoded(parts[1]);
  if (!parts[2].empty()) ex.query["wait_ms"] = std::string{parts[2]};
  ex.body = std::string{in};
  auto r = fusee::app::route_api_request(ex);
  if (r.call.has_value() == r.refusal.has_value()) std::abort();
  if (r.call) {
    simdjson::dom::parser parser;
    simdjson::padded_string padded(r.call->args);
    if (parser.parse(padded).error()) std::abort();
  } else if (r.refusal->body.empty() || r.refusal->status < 400) {
    std::abort();
  }
  return 0;
}
