// One accepted socket as the I/O threads see it: its descriptor and frame decoder, the lane every
// writer sends through, and what the threads keep up to date for its session (last read, partial
// frame, counters). A subclass says what the frames mean (session.cpp). No CAF here.
//
// Threading: on_frames, on_bad_stream and on_closed run on an I/O thread, one thread at a time per
// connection, in stream order; on_sweep may run beside them on another I/O thread. The atomics are
// readable from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "actors/net/out_lane.hpp"
#include "protocol/frame.hpp"

namespace fusee::server {

class io_loop;

class connection {
public:
  /// Takes `fd` (a connected, non-blocking socket) and `spare` (a descriptor for the lane's
  /// duplicate, or -1); bodies over `max_frame` bytes end the stream with TOO_LARGE; more than
  /// `write_limit` bytes waiting for a peer that does not read end it too (out_lane.hpp).
  connection(int fd, uint64_t write_limit, uint32_t max_frame, int spare = -1);
  virtual ~connection();
  connection(const connection&) = delete;
  connection& operator=(const connection&) = delete;

  const std::shared_ptr<out_lane>& lane() const { return lane_; }

  /// The whole frames of one read, in order (the vector may be taken).
  virtual void on_frames(std::vector<proto::frame>& frames) = 0;
  /// The stream broke (a bad or oversized frame): nothing after it is read.
  virtual void on_bad_stream(proto::error e) = 0;
  /// The peer closed (`read_error` 0) or a read failed (its errno); the connection leaves its
  /// loop after this.
  virtual void on_closed(int read_error) = 0;
  /// About once per io_loop::options::sweep_every, for deadlines.
  virtual void on_sweep(std::chrono::steady_clock::time_point) {}

  /// steady_clock nanoseconds of the last read that brought bytes.
  std::atomic<int64_t> last_rx_ns{0};
  /// steady_clock nanoseconds up to which what the peer sent has been read: when the I/O threads
  /// began their last look that reached every ready socket, published once it ended (io_loop).
  /// It stands still while none looks (the only I/O thread committing the log), so a silence
  /// measured up to here is the peer's, not the server's. Load it before last_rx_ns: a read by the
  /// thread that published it is then seen (another thread's, within its serve, may show a few
  /// µs later). now_ns() outside a loop.
  int64_t seen_through_ns() const {
    return seen_through_ ? seen_through_->load(std::memory_order_acquire) : now_ns();
  }
  /// Bodies over this many bytes end the stream with TOO_LARGE: `max_frame` at first; a subclass
  /// may lower it and raise it again (any thread; it applies to frames whose header the I/O
  /// thread reads after the store).
  std::atomic<uint32_t> frame_limit;
  /// steady_clock nanoseconds since which part of a frame is buffered; 0: none.
  std::atomic<int64_t> partial_since_ns{0};
  std::atomic<uint64_t> frames_in{0};
  std::atomic<uint64_t> bytes_in{0};

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

private:
  friend class io_loop;
  /// The loop's, set by io_loop::add before it is first read (liveness asks only once a HELLO was
  /// read, and the loop reads only what it was given).
  std::shared_ptr<const std::atomic<int64_t>> seen_through_;
  int fd_;
  std::shared_ptr<out_lane> lane_;
  proto::frame_decoder decoder_;
  std::atomic<bool> owned_{false};   ///< an I/O thread is serving it
  std::atomic<uint32_t> events_{0};  ///< epoll events not served yet
  bool failed_ = false;              ///< the stream broke: reads are dropped
  bool removed_ = false;             ///< out of the loop (its descriptor closed)
};

}  // namespace fusee::server
