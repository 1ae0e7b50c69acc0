// The sending side of one connection: the one object that owns the order of its bytes. Both
// writers of a connection use it: the session broker (LEASE, GRANT, RELAYED_CALL, OK, ...) and the
// log's writer thread (DURABLE, LOG_PAGE, ...), which sends right after the fdatasync instead of
// waking the broker's event loop (one thread hop less on the hot path; docs/architecture.md).
//
// Order contract: the bytes of the frames given to send() reach the socket in the order of the
// send() calls, each frame whole. A frame goes straight to the kernel (non-blocking) only when
// nothing is waiting; whatever the kernel does not take at once waits in the lane, and every later
// frame waits behind it. Waiting bytes reach the socket only through the owner (the session
// broker): it takes them with drain() and writes them with CAF's buffered writes, and reports
// with transferred() what CAF wrote. Until all of it is written, nothing goes straight out.
//
// Bound: a connection whose peer stops reading must not make the server buffer without limit.
// Once more than `limit` bytes wait behind the frame being written (the oldest one not yet
// wholly in the kernel), the next frame is refused and drain() reports over_limit: the owner ends
// the connection. So a connection never holds more than its head frame, the limit and one frame
// more. A frame larger than the limit goes through when it is the head (or what is queued behind
// the head stays under the limit); two such frames queued back to back exceed it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace fusee::server {

class out_lane {
public:
  /// Keeps its own duplicate of `fd`: the number stays ours until close(), even after the broker
  /// closes its copy, so a send can never reach a connection that reused the number.
  out_lane(int fd, uint64_t limit);
  ~out_lane();
  out_lane(const out_lane&) = delete;
  out_lane& operator=(const out_lane&) = delete;

  enum class outcome {
    written,     ///< every byte is in the kernel's socket buffer
    queued,      ///< waiting in the lane; the owner has already been asked to drain
    wake_owner,  ///< waiting (or refused: over the limit): the owner must be asked to drain
    closed,      ///< the connection is closing; the frame is dropped
  };

  /// Sends `frame` after everything given before it. Any thread.
  outcome send(const std::vector<uint8_t>& frame);

  enum class drained {
    ok,          ///< `out` holds the waiting bytes (maybe none): write them, then transferred()
    over_limit,  ///< the peer stopped reading: end the connection
    closed,
  };

  /// The owner takes every waiting byte, to write it through its own buffer. They count as
  /// waiting until transferred() reports them written.
  drained drain(std::vector<uint8_t>& out);

  /// The owner's buffer wrote `n` bytes to the socket.
  void transferred(uint64_t n);

  /// Bytes given to send() and not yet in the kernel.
  uint64_t waiting() const;
  /// Of those, the bytes behind the frame being written (what the limit applies to).
  uint64_t waiting_behind_head() const;
  uint64_t limit() const { return limit_; }
  /// Frames and bytes given to send() and accepted (not refused or dropped), ever.
  struct totals {
    uint64_t frames = 0;
    uint64_t bytes = 0;
  };
  totals accepted() const;

  /// No more writes through this lane (closes the duplicate).
  void close();
  /// Ends the connection at once (shutdown of the socket): bytes still buffered for it anywhere,
  /// CAF's buffer included, are dropped instead of waiting for a peer that does not read.
  void abort();

private:
  outcome wake();

  mutable std::mutex mtx_;
  int fd_;
  const uint64_t limit_;
  bool open_ = true;
  bool over_ = false;             ///< the limit was hit: everything is refused from now on
  bool owner_told_ = false;       ///< a drain is due (the owner was told, or is draining)
  std::vector<uint8_t> pending_;  ///< waiting, not yet taken by drain()
  // Bytes ever queued (not sent straight) and ever reported written by the owner: waiting is the
  // difference; nothing waits when they are equal.
  uint64_t queued_total_ = 0;
  uint64_t written_total_ = 0;
  std::deque<uint64_t> frame_ends_;  ///< queued_total_ at the end of each frame still waiting
  uint64_t frames_accepted_ = 0;
  uint64_t bytes_accepted_ = 0;
};

}  // namespace fusee::server
