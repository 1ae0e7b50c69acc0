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

TEST_CASE("silence counts only up to what the server has read, never below zero") {
  // Last frame at 4 s; the only I/O thread has been committing since 4.2 s (nothing read since),
  // whatever the clock says: 0.2 s of silence.
  CHECK(liveness_silence_ns(4'200'000'000, 4'000'000'000, 1'000'000'000) == 200'000'000);
  // A frame read after the last completed look counts as no silence, not as a negative one.
  CHECK(liveness_silence_ns(4'200'000'000, 4'300'000'000, 1'000'000'000) == 0);
  CHECK(liveness_silence_ns(4'200'000'000, 1'000'000'000, 4'300'000'000) == 0);
}
