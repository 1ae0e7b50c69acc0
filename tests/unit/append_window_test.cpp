// A worker connection's window of APPENDs: slots freed by the DURABLE covering them, a released
// shard's kept until its RELEASE is answered (the server still counts them until then), a revoked
// shard's at once.
#include <doctest/doctest.h>

#include "worker/append_window.hpp"

using fusee::worker::append_window;

TEST_CASE("an APPEND's slot is freed by the DURABLE covering its last record, not before") {
  append_window w(3);
  w.sent(1, 10);  // records ..10
  w.sent(1, 12);  // 11..12
  w.sent(2, 5);
  CHECK(w.full());
  w.durable(1, 11);  // covers the first APPEND only
  CHECK(w.out() == 2);
  CHECK_FALSE(w.full());
  w.durable(1, 11);  // again: nothing more
  CHECK(w.out() == 2);
  w.durable(7, 100);  // a shard with nothing out
  CHECK(w.out() == 2);
  w.durable(1, 12);
  w.durable(2, 5);
  CHECK(w.out() == 0);
}

TEST_CASE("a window of 0 counts as 1") {
  append_window w(0);
  CHECK_FALSE(w.full());
  w.sent(1, 1);
  CHECK(w.full());
}

TEST_CASE("a released shard's APPENDs keep their slots until the server answers its RELEASE, "
          "and only that answer frees them, once") {
  append_window w(4);
  w.sent(1, 10);
  w.sent(1, 20);
  w.sent(2, 3);
  w.releasing(1, 500);
  CHECK(w.out() == 3);  // the server may still count shard 1's two in its queue
  w.sent(3, 1);
  CHECK(w.full());
  w.durable(1, 20);  // shard 1 is not held any more: its DURABLE frees nothing, the answer will
  CHECK(w.out() == 4);
  CHECK_FALSE(w.answered(499));  // another request's answer
  CHECK(w.out() == 4);
  CHECK(w.answered(500));
  CHECK(w.out() == 2);
  CHECK_FALSE(w.answered(500));  // once
  // another shard's RELEASE, answered in turn
  w.sent(4, 7);
  w.releasing(4, 501);
  CHECK(w.out() == 3);
  CHECK(w.answered(501));
  CHECK(w.out() == 2);
}

TEST_CASE("a shard released with nothing out holds no slot and its answer is not the window's") {
  append_window w(2);
  w.sent(1, 5);
  w.durable(1, 5);
  w.releasing(1, 600);
  CHECK(w.out() == 0);
  CHECK_FALSE(w.answered(600));
}

TEST_CASE("a revoked shard's slots are free at once and a lease granted anew starts with none") {
  append_window w(2);
  w.sent(1, 5);
  w.sent(1, 6);
  CHECK(w.full());
  w.forget(1);
  CHECK(w.out() == 0);
  w.forget(1);
  CHECK(w.out() == 0);
  w.sent(1, 7);  // the next lease's first APPEND
  CHECK(w.out() == 1);
}
