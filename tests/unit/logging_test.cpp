// The server's log lines: what a peer sends stays within its quoted field.
#include <doctest/doctest.h>

#include "actors/logging.hpp"

using fusee::server::logging::quoted;

TEST_CASE("a quoted field keeps a peer's bytes on one line and inside its quotes") {
  CHECK(quoted("plain name") == "\"plain name\"");
  CHECK(quoted("say \"hi\" \\ bye") == "\"say \\\"hi\\\" \\\\ bye\"");
  CHECK(quoted("GET /x\nfake=line") == "\"GET /x\\nfake=line\"");
  CHECK(quoted("a\rb\tc") == "\"a\\rb\\tc\"");
  CHECK(quoted(std::string{"bell\x07", 5} + "\x1b[31m" + "\x7f") == "\"bell\\x07\\x1b[31m\\x7f\"");
  CHECK(quoted("caf\xc3\xa9") == "\"caf\xc3\xa9\"");  // UTF-8 passes through
}
