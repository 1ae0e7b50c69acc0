// The node's CAF scheduler: CAF's work sharing that keeps a chain of messages on one worker.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <thread>

#include <caf/actor_system_config.hpp>
#include <caf/policy/work_sharing.hpp>
#include <caf/scheduler/coordinator.hpp>

namespace fusee::app {

/// CAF 0.17's `sharing` policy (one job queue for all workers), except that a job a worker
/// enqueues itself (a message one actor sends another, an actor at the end of its turn) wakes a
/// sleeping worker only when the queue already held work. The worker that enqueued it takes it
/// next, so a chain (directory -> wake record -> scheduler -> endpoint) runs on one thread instead
/// of waking the other for a job it then races for. Jobs from other threads (the I/O threads,
/// curl, the clock) always wake one. A job no worker was woken for waits for the rest of the
/// current actor's turn: up to actor_turn_messages messages, however long they take.
class chained_sharing : public caf::policy::work_sharing {
public:
  /// Only on `self`'s own thread (CAF's contract for exec_later): a send from another thread
  /// through a captured actor pointer would land here and no worker would be woken for it.
  template <class Worker>
  void internal_enqueue(Worker* self, caf::resumable* job) {
    assert(std::this_thread::get_id() == self->get_thread().get_id());
    push(self->parent(), job);
  }

  template <class Worker>
  void resume_job_later(Worker* self, caf::resumable* job) {
    assert(std::this_thread::get_id() == self->get_thread().get_id());
    push(self->parent(), job);
  }

private:
  template <class Coordinator>
  static void push(Coordinator* parent, caf::resumable* job) {
    queue_type one;  // allocated outside the lock, as CAF's own enqueue does
    one.push_back(job);
    auto& shared = d(parent);
    std::unique_lock<std::mutex> guard(shared.lock);
    bool held_work = !shared.queue.empty();
    shared.queue.splice(shared.queue.end(), one);
    if (held_work) shared.cv.notify_one();
  }
};

/// Messages an actor handles per turn before its worker looks at the queue again (CAF's default
/// has no bound): the longest a job chained_sharing woke no worker for waits behind it.
constexpr size_t actor_turn_messages = 100;

/// Makes `cfg`'s actor system run on chained_sharing with turns of actor_turn_messages.
inline void use_chained_sharing(caf::actor_system_config& cfg) {
  cfg.load<caf::scheduler::coordinator<chained_sharing>>();
  cfg.set("scheduler.max-throughput", static_cast<int64_t>(actor_turn_messages));
}

}  // namespace fusee::app
