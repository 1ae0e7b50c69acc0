// The liveness rule (actors/liveness_rules.hpp) at its boundaries, without a clock.
#include <doctest/doctest.h>

#include "actors/liveness_rules.hpp"

using fusee::server::liveness_silence_ns;

TEST_CASE("a worker is never silent before its LEASE was written") {
  CHECK(liveness_silence_ns(10'000'000'000, 1, 0) == 0);
}

TEST_CASE("silence counts from the LEASE when the worker's last frame came before it") {
  // HELLO at 1 s, LEASE written at 4 s (a slow grant of many shards), now 5 s: 1 s of silence.
  CHECK(liveness_silence_ns(5'000'000'000, 1'000'000'000, 4'000'000'000) == 1'000'000'000);
}

TEST_CASE("silence counts from the worker's last frame once one came after the LEASE") {
  CHECK(liveness_silence_ns(5'000'000'000, 4'500'000'000, 4'000'000'000) == 500'000'000);
  CHECK(liveness_silence_ns(5'000'000'000, 5'000'000'000, 4'000'000'000) == 0);
}
