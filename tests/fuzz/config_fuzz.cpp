// libFuzzer target over the server's TOML configuration: app/config's reading (every table and
// key of the settings tables, [cluster], [[endpoint]], [[token]], [tls]) and its checks. Beyond
// "no crash": every refusal says why.
#include <cstdlib>
#include <string_view>

#include "app/config.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text{reinterpret_cast<const char*>(data), size};
  fusee::app::server_config cfg;
  auto err = fusee::app::load_toml_text(text, "fuzz.toml", cfg);
  if (err) {
    if (err->empty()) std::abort();
    return 0;
  }
  // Files the text names are looked up as they would be (most do not exist: refused, named).
  if (auto bad = fusee::app::validate(cfg); bad && bad->empty()) std::abort();
  return 0;
}
