// The threads that read the worker and client sockets: one edge-triggered epoll set shared by
// every thread (leader/follower: whichever thread waits takes the next events), so a thread that
// blocks after its turn (to commit the log: options::after_turn) leaves any others reading; with
// one, nothing is read meanwhile, and connection::seen_through_ns() stands still. A connection is
// served by one thread at a time; its lane is flushed here when the socket becomes writable. No
// CAF here: connections hand what is not theirs to their actors by message.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "protocol/result.hpp"

struct epoll_event;

namespace fusee::server {

class connection;

class io_loop {
public:
  /// How long the threads' turns last (a turn: from a wait's end to the next wait; with one
  /// thread it includes the log's commit, and nothing is read meanwhile). Shared, so a reader may
  /// outlive the loop.
  class turn_clocks {
  public:
    explicit turn_clocks(unsigned threads) : since_(threads) {}
    /// The longest turn (ns) of any thread since the last call, the turns going on at `now`
    /// included; resets it. Any thread.
    int64_t take_longest_ns(int64_t now);

  private:
    friend class io_loop;
    void began(unsigned thread, int64_t now);
    void ended(unsigned thread, int64_t now);
    std::vector<std::atomic<int64_t>> since_;  ///< when each thread's turn began; 0: it waits
    std::atomic<int64_t> longest_{0};
  };

  struct options {
    unsigned threads = 1;
    /// Called by a thread after each turn (the events one epoll_wait returned), outside every
    /// connection: the log commits what the turn queued, on this thread. Or it holds the
    /// commit: a positive result is how long the thread may wait for more events; it is called
    /// again after the next turn or, if none comes, once that time is up.
    std::function<std::chrono::nanoseconds()> after_turn;
    /// How often each connection's on_sweep runs.
    std::chrono::milliseconds sweep_every{1000};
    /// Reads (of up to 64 KiB) of one connection before the others get theirs.
    int reads_per_turn = 16;
  };
  static proto::result<std::unique_ptr<io_loop>> start(options o);
  ~io_loop();
  io_loop(const io_loop&) = delete;
  io_loop& operator=(const io_loop&) = delete;

  /// Serves `c` from now on: reads until its peer closes, flushes its lane when writable. Any
  /// thread. False (and nothing served) if the descriptor cannot be watched.
  bool add(std::shared_ptr<connection> c);
  /// Stops and joins the threads; connections still open are let go without on_closed().
  void stop();
  size_t size() const;
  std::shared_ptr<turn_clocks> turns() const { return turns_; }
  /// True once the kernel refused epoll_pwait2 (ENOSYS, or EPERM from a seccomp profile): the
  /// threads wait in whole milliseconds from then on.
  bool waits_in_ms() const { return no_pwait2_.load(std::memory_order_relaxed); }

private:
  explicit io_loop(options o) : opts_(std::move(o)) {}
  void run(unsigned thread);
  /// epoll_pwait2 for up to `ns` (epoll_wait in whole ms where the kernel refuses it).
  int wait(epoll_event* evs, int64_t ns);
  /// Serves `c` until no events are left for it (or another thread takes them).
  void serve(const std::shared_ptr<connection>& c);
  /// `c` still has bytes after its share of a turn: a fresh edge, taken by whichever thread
  /// waits next, serves it again after the others (so a thread busy committing holds none back).
  void rearm(connection& c);
  /// Reads what the socket has (a bounded amount; `hung_up`: on to the end of the stream); false
  /// once the connection is gone.
  bool read(connection& c, bool& more, bool hung_up);
  void remove(connection& c);
  std::shared_ptr<connection> find(int fd) const;
  void sweep();
  /// Serves the connections of `n` events.
  void take(const epoll_event* evs, int n);
  /// Everything that had come by `t` has been read, by this thread or (within its serve) by the
  /// thread serving it: connection::seen_through_ns() moves on to `t` if it was earlier.
  void seen_through(int64_t t);

  options opts_;
  int ep_ = -1;
  int wake_ = -1;  ///< an eventfd: readable once stop() is called
  std::vector<std::thread> threads_;
  mutable std::mutex mtx_;
  std::unordered_map<int, std::shared_ptr<connection>> conns_;
  std::atomic<int64_t> next_sweep_ns_{0};
  /// connection::seen_through_ns() of every connection: shared, so a session may outlive us.
  std::shared_ptr<std::atomic<int64_t>> seen_through_;
  std::shared_ptr<turn_clocks> turns_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> no_pwait2_{false};
};

}  // namespace fusee::server
