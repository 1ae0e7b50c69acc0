// The server's log lines: what a peer sends stays within its quoted field.
#include <doctest/doctest.h>

#include "logging/logging.hpp"
#include "logging/warning_limiter.hpp"

using fusee::server::logging::quoted;
using fusee::server::logging::warning_limiter;

TEST_CASE("a quoted field keeps a peer's bytes on one line and inside its quotes") {
  CHECK(quoted("plain name") == "\"plain name\"");
  CHECK(quoted("say \"hi\" \\ bye") == "\"say \\\"hi\\\" \\\\ bye\"");
  CHECK(quoted("GET /x\nfake=line") == "\"GET /x\\nfake=line\"");
  CHECK(quoted("a\rb\tc") == "\"a\\rb\\tc\"");
  CHECK(quoted(std::string{"bell\x07", 5} + "\x1b[31m" + "\x7f") == "\"bell\\x07\\x1b[31m\\x7f\"");
  CHECK(quoted("caf\xc3\xa9") == "\"caf\xc3\xa9\"");  // UTF-8 passes through
}

TEST_CASE("a repeating warning is let through once a minute per kind, and counts the lines it held "
          "back") {
  warning_limiter said;
  auto t0 = warning_limiter::clock::time_point{} + std::chrono::hours(1);
  uint64_t unsaid = 99;
  CHECK(said.admit("refused 10.0.0.1", t0, &unsaid));
  CHECK(unsaid == 0);
  for (int i = 1; i <= 5; ++i)
    CHECK_FALSE(said.admit("refused 10.0.0.1", t0 + std::chrono::seconds(10 * i)));
  CHECK(said.admit("refused 10.0.0.2", t0 + std::chrono::seconds(1)));  // another kind: at once
  CHECK_FALSE(said.admit("refused 10.0.0.1",
                         t0 + std::chrono::seconds(59) + std::chrono::milliseconds(999)));
  CHECK(said.admit("refused 10.0.0.1", t0 + std::chrono::minutes(1), &unsaid));
  CHECK(unsaid == 6);
  CHECK_FALSE(said.admit("refused 10.0.0.1", t0 + std::chrono::seconds(61)));
  CHECK(said.admit("refused 10.0.0.1", t0 + std::chrono::minutes(2), &unsaid));
  CHECK(unsaid == 1);
}

TEST_CASE("a warning limiter full of kinds forgets them all: each is said once more, none is "
          "silenced for good") {
  warning_limiter said(2);
  auto t0 = warning_limiter::clock::time_point{} + std::chrono::hours(1);
  CHECK(said.admit("a", t0));
  CHECK(said.admit("b", t0));
  CHECK_FALSE(said.admit("a", t0));  // known: held back
  CHECK(said.admit("c", t0));        // a third kind: the others are forgotten
  CHECK(said.admit("a", t0));
}

TEST_CASE("at most so many new kinds of a sort of warning are said within a minute: a flood from "
          "many addresses is said once, then held until the minute is over, and other sorts still "
          "show") {
  warning_limiter said(10000, 3);
  auto t0 = warning_limiter::clock::time_point{} + std::chrono::hours(1);
  using v = warning_limiter::verdict;
  CHECK(said.judge("refused 10.0.0.1", t0) == v::warn);
  CHECK(said.judge("refused 10.0.0.2", t0) == v::warn);
  CHECK(said.judge("refused 10.0.0.1", t0) == v::held);  // a known kind costs no budget
  CHECK(said.judge("refused 10.0.0.3", t0 + std::chrono::seconds(30)) == v::warn);
  CHECK(said.judge("refused 10.0.0.4", t0 + std::chrono::seconds(31)) == v::new_flood);
  CHECK(said.judge("refused 10.0.0.5", t0 + std::chrono::seconds(32)) == v::flooded);
  CHECK(said.judge("refused 10.0.0.4", t0 + std::chrono::seconds(33)) == v::flooded);
  CHECK(said.judge("silent 10.0.0.9", t0 + std::chrono::seconds(34)) == v::warn);  // another sort
  // Kinds said before keep their minute.
  CHECK(said.judge("refused 10.0.0.1", t0 + std::chrono::minutes(1)) == v::warn);
  // A minute after the window began, new kinds are said again.
  CHECK(said.judge("refused 10.0.0.5", t0 + std::chrono::minutes(1)) == v::warn);
}
