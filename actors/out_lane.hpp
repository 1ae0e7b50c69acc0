// The sending side of one connection, shared by its session broker and the log's writer thread,
// so DURABLE frames leave on the writer thread right after the fdatasync instead of waking the
// broker's event loop (one thread hop less on the hot path; docs/architecture.md).
//
// Order contract: frames reach the socket in the order try_send() calls are made. While any
// bytes are queued in the broker's own (CAF) write buffer, or handed to the broker by message,
// try_send() refuses to write directly and counts the frame as queued, so nothing overtakes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <mutex>
#include <vector>

namespace fusee::server {

class out_lane {
public:
  /// Keeps its own duplicate of `fd`: the number stays ours until close(), even after the broker
  /// closes its copy, so a send can never reach a connection that reused the number.
  explicit out_lane(int fd);
  ~out_lane();
  out_lane(const out_lane&) = delete;
  out_lane& operator=(const out_lane&) = delete;

  enum class outcome {
    sent,      ///< all bytes are in the kernel's socket buffer
    queue_it,  ///< `rest` (counted as queued) must go through the broker's buffer
    closed,    ///< the connection is closing; drop it
  };

  /// Writes the whole `frame` now if nothing is queued and it fits in the socket buffer;
  /// otherwise copies it to `rest` and counts it as queued: the caller must hand `rest` to the
  /// broker's buffer. Frames are never split between the two paths. Any thread.
  outcome try_send(const std::vector<uint8_t>& frame, std::vector<uint8_t>* rest);

  /// The broker wrote `n` bytes of its queue to the socket (data_transferred_msg).
  void transferred(uint64_t n);

  /// No more writes through this lane (closes the duplicate).
  void close();

private:
  std::mutex mtx_;
  int fd_;
  bool open_ = true;
  uint64_t queued_ = 0;  ///< bytes handed to the broker and not yet written by it
};

}  // namespace fusee::server
