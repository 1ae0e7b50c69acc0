// The sending side of one connection: the one object that owns the order of its bytes. Every
// writer of a connection uses it from its own thread: the session actor (LEASE, GRANT,
// RELAYED_CALL, OK, ...), the thread that commits the log (DURABLE, LOG_PAGE, ...: sent right after
// the fdatasync, no hand-off) and the I/O threads (OK to a PING, refusals of the log's requests).
//
// Order contract: the bytes of the frames given to send() reach the socket in the order of the
// send() calls, each frame whole. A frame goes straight to the kernel (non-blocking) only when
// nothing is waiting; whatever the kernel does not take at once waits in the lane, and every later
// frame waits behind it. Waiting bytes leave through flush(), which the connection's I/O thread
// calls when the socket becomes writable (and every send() tries first), always oldest first.
//
// Bound: a connection whose peer stops reading must not make the server buffer without limit.
// Once more than `limit` bytes wait behind the frame being written (the oldest one not yet
// wholly in the kernel), the next frame is refused: send() reports over_limit once (its caller
// ends the connection) and drops everything from then on. So a connection never holds more than
// its head frame, the limit and one frame more. A frame larger than the limit goes through when
// it is the head (or what is queued behind the head stays under the limit).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <mutex>
#include <vector>

namespace fusee::server {

class out_lane {
public:
  /// Keeps its own duplicate of `fd`: the number stays ours until close(), even after the I/O
  /// thread closes its copy, so a send can never reach a connection that reused the number. With
  /// `spare` (a descriptor of ours, taken), the duplicate reuses its number (so it needs no new
  /// one: the accept loop reserves it before accepting).
  out_lane(int fd, uint64_t limit, int spare = -1);
  /// False if the duplicate could not be made (out of descriptors): nothing can be sent.
  bool usable() const { return fd_ >= 0; }
  ~out_lane();
  out_lane(const out_lane&) = delete;
  out_lane& operator=(const out_lane&) = delete;

  enum class outcome {
    written,     ///< every byte is in the kernel's socket buffer
    queued,      ///< waiting in the lane; flush() sends it once the socket takes more
    over_limit,  ///< refused: the peer stopped reading (reported once: end the connection)
    closed,      ///< the connection is closing (or went over its limit); the frame is dropped
  };

  /// Sends `frame` after everything given before it. Any thread.
  outcome send(const std::vector<uint8_t>& frame);

  /// Writes waiting bytes until the kernel takes no more; true if some still wait (the caller
  /// watches the socket for writability). Any thread.
  bool flush();

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
  /// Bytes of accepted frames the kernel has taken, ever (accepted().bytes minus waiting()).
  uint64_t taken() const;
  /// The errno of the write that broke the connection; 0 while none has.
  int failure() const;

  /// No more writes: what the kernel holds is still delivered, then the peer sees the connection
  /// end (shutdown of both directions, so the I/O thread's next read ends too); the duplicate is
  /// closed. Waiting bytes get one last try.
  void close();
  /// Ends the connection at once: bytes still waiting are dropped.
  void abort();

private:
  /// Writes pending_ from its front; false if the connection broke. Under mtx_.
  bool write_pending();
  /// Writes data[sent...size) until the kernel takes no more, advancing `sent`; false if the
  /// connection broke. Under mtx_.
  bool write_from(const uint8_t* data, size_t size, size_t& sent);
  /// A write failed: shut the socket down, drop what waits. Under mtx_.
  void broke();
  /// Ends the lane: drops what waits, shuts down and closes the duplicate. Under mtx_.
  void end();

  mutable std::mutex mtx_;
  int fd_;
  const uint64_t limit_;
  bool open_ = true;
  bool over_ = false;                ///< the limit was hit: everything is refused from now on
  int failure_ = 0;                  ///< errno of the write that broke the connection
  std::vector<uint8_t> pending_;     ///< waiting bytes; pending_[sent_...] not yet in the kernel
  size_t sent_ = 0;                  ///< bytes of pending_ already written
  uint64_t written_total_ = 0;       ///< bytes of waiting frames ever written (for frame_ends_)
  uint64_t queued_total_ = 0;        ///< bytes ever queued (not sent straight)
  std::deque<uint64_t> frame_ends_;  ///< queued_total_ at the end of each frame still waiting
  uint64_t frames_accepted_ = 0;
  uint64_t bytes_accepted_ = 0;
};

}  // namespace fusee::server
