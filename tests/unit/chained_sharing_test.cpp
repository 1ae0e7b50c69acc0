// The CAF scheduler policy (app/chained_sharing.hpp): its wake-up rule on a fake coordinator, and
// the bound on an actor's turn in a real actor system.
#include <doctest/doctest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

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
  struct this_thread {
    std::thread::id get_id() const { return std::this_thread::get_id(); }
  };
  fake_coordinator* coordinator;
  fake_coordinator* parent() { return coordinator; }
  this_thread get_thread() { return {}; }  // the test's thread runs the "worker"
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
  policy.central_enqueue(&c, job(1));  // anon_send, the clock, a scoped actor
  CHECK(c.shared.cv.woken == 1);
  policy.external_enqueue(&w, job(2));  // the coordinator's stop
  CHECK(c.shared.cv.woken == 2);
}

namespace {

using work_atom = caf::atom_constant<caf::atom("work")>;
using ping_atom = caf::atom_constant<caf::atom("ping")>;
using done_atom = caf::atom_constant<caf::atom("done")>;

/// The node's scheduler with one worker: a job waits for the running actor's turn whatever
/// another worker would do, so the test below sees the turn's length exactly.
struct one_worker_config : caf::actor_system_config {
  one_worker_config() {
    fusee::app::use_chained_sharing(*this);
    set("scheduler.max-threads", 1);
  }
};

/// What the actors of the test below share with it.
struct turn_run {
  std::atomic<bool> all_sent{false};
  std::atomic<int> handled{0};
  std::atomic<int> handled_before_ping{-1};
};
using run_ptr = std::shared_ptr<turn_run>;

caf::behavior pinged(caf::event_based_actor*, run_ptr run) {
  return {[run](ping_atom) { run->handled_before_ping = run->handled.load(); }};
}

/// Handles `n` messages of ~20 us each; the first sends `other` a ping and waits until the test
/// sent all `n`, so its mailbox holds the rest before its turn goes on.
caf::behavior busy(caf::event_based_actor* self, run_ptr run, caf::actor other, caf::actor done,
                   int n) {
  return {[=](work_atom, int i) {
    if (i == 0) {
      self->send(other, ping_atom::value);
      while (!run->all_sent)
        std::this_thread::yield();
    }
    auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
    while (std::chrono::steady_clock::now() < until) {
    }
    if (run->handled.fetch_add(1) + 1 == n) self->send(done, done_atom::value);
  }};
}

}  // namespace

TEST_CASE("a message an actor sends waits one turn of that actor, not its whole mailbox") {
  // busy's ping runs when busy's turn (actor_turn_messages) ends, after 100 of its 5,000
  // messages; with CAF's unbounded turn it would run after all 5,000.
  constexpr int n = 5000;
  one_worker_config cfg;
  caf::actor_system sys{cfg};
  auto run = std::make_shared<turn_run>();
  caf::scoped_actor waiter{sys};
  auto other = sys.spawn(pinged, run);
  auto worker = sys.spawn(busy, run, other, caf::actor{waiter}, n);
  for (int i = 0; i < n; ++i)
    caf::anon_send(worker, work_atom::value, i);
  run->all_sent = true;
  bool done = false;
  waiter->receive([&](done_atom) { done = true; }, caf::after(std::chrono::seconds(30)) >> [] {});
  REQUIRE(done);
  int before_ping = run->handled_before_ping;
  CHECK(before_ping == static_cast<int>(fusee::app::actor_turn_messages));
  CHECK(before_ping < n / 5);  // a turn far shorter than the mailbox
  caf::anon_send_exit(worker, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(other, caf::exit_reason::user_shutdown);
}
