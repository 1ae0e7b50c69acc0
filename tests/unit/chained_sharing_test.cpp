// The CAF scheduler policy (app/chained_sharing.hpp): its wake-up rule on a fake coordinator, and
// the bound on a lone job's wait in a real actor system.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>

#include <caf/all.hpp>

#include "app/chained_sharing.hpp"

namespace {

using fusee::app::chained_sharing;

// What the policy touches of CAF's coordinator and worker; notify_one only counts.
struct fake_shared {
  std::list<caf::resumable*> queue;
  std::mutex lock;
  struct {
    int woken = 0;
    void notify_one() { ++woken; }
  } cv;
};
struct fake_coordinator {
  fake_shared shared;
  fake_shared& data() { return shared; }
};
struct fake_worker {
  fake_coordinator* coordinator;
  fake_coordinator* parent() { return coordinator; }
};

caf::resumable* job(uintptr_t n) {
  return reinterpret_cast<caf::resumable*>(n);
}

}  // namespace

TEST_CASE(
    "a job an actor enqueues on an empty queue wakes no worker: its own worker takes it next") {
  fake_coordinator c;
  fake_worker w{&c};
  chained_sharing policy;
  policy.internal_enqueue(&w, job(1));
  CHECK(c.shared.cv.woken == 0);
  CHECK(c.shared.queue.size() == 1);
}

TEST_CASE("a job an actor enqueues behind other work wakes a worker to help") {
  fake_coordinator c;
  fake_worker w{&c};
  chained_sharing policy;
  policy.internal_enqueue(&w, job(1));
  policy.internal_enqueue(&w, job(2));
  CHECK(c.shared.cv.woken == 1);
  CHECK(c.shared.queue == std::list<caf::resumable*>{job(1), job(2)});
}

TEST_CASE("an actor that used up its turn wakes a worker only if other work waits") {
  fake_coordinator c;
  fake_worker w{&c};
  chained_sharing policy;
  policy.resume_job_later(&w, job(1));
  CHECK(c.shared.cv.woken == 0);
  policy.resume_job_later(&w, job(2));
  CHECK(c.shared.cv.woken == 1);
}

TEST_CASE("a job from a thread that is not a worker always wakes one") {
  fake_coordinator c;
  fake_worker w{&c};
  chained_sharing policy;
  policy.external_enqueue(&w, job(1));
  CHECK(c.shared.cv.woken == 1);
}

namespace {

using work_atom = caf::atom_constant<caf::atom("work")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using done_atom = caf::atom_constant<caf::atom("done")>;

struct chained_config : caf::actor_system_config {
  chained_config() { fusee::app::use_chained_sharing(*this); }
};

}  // namespace

TEST_CASE("a lone message an actor sends waits at most one turn of that actor, not its mailbox") {
  // `busy` gets N messages that each take ~20 us; its first sends `other` a ping, which no worker
  // is woken for (the queue was empty). It runs once busy's turn (scheduler.max-throughput
  // messages) ends, not after all N: without the bound it would wait for busy's whole mailbox.
  constexpr int n = 5000;
  chained_config cfg;
  caf::actor_system sys{cfg};
  auto handled = std::make_shared<std::atomic<int>>(0);
  auto handled_before_ping = std::make_shared<std::atomic<int>>(-1);
  auto other = sys.spawn([=](caf::event_based_actor*) -> caf::behavior {
    return {[=](ping_atom) { handled_before_ping->store(handled->load()); }};
  });
  caf::scoped_actor waiter{sys};
  caf::actor waiter_handle = waiter;
  auto busy = sys.spawn([=](caf::event_based_actor* self) -> caf::behavior {
    return {[=](work_atom, int i) {
      if (i == 0) self->send(other, ping_atom::value);
      auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
      if (handled->fetch_add(1) + 1 == n) self->send(waiter_handle, done_atom::value);
    }};
  });
  for (int i = 0; i < n; ++i)
    caf::anon_send(busy, work_atom::value, i);
  bool done = false;
  waiter->receive([&](done_atom) { done = true; }, caf::after(std::chrono::seconds(30)) >> [] {});
  REQUIRE(done);
  CHECK(handled_before_ping->load() >= 0);
  CHECK(handled_before_ping->load() < n / 5);
  caf::anon_send_exit(busy, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(other, caf::exit_reason::user_shutdown);
}
