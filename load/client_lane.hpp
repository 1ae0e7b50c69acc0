// One simulated client connection of a load run: a sender that starts workflows (open loop: at
// their scheduled times whatever the answers do; closed loop: a fixed number unanswered), and a
// receiver that matches the answers, sends each run's signal when asked to, and reconnects and
// resends what was not answered when the server is killed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/connection.hpp"
#include "load/observations.hpp"
#include "load/scenario.hpp"

namespace fusee::load {

class client_lane {
public:
  /// Lane `lane` of s.connections sends starts lane, lane + connections, ... below `starts`.
  client_lane(observations* obs, const scenario& s, uint32_t lane, uint64_t starts);
  ~client_lane() { stop(); }

  /// Connects (CLIENT_HELLO) and tells the shard count; an error text on failure. A connection
  /// that breaks later is made again (and what was not answered sent again) by the receiver.
  std::string connect(const std::string& server, uint32_t* shards);
  void start();
  void stop();
  /// The sender has sent all it will (open: every start; closed: the duration is over).
  bool sender_done() const { return sender_done_; }
  uint64_t reconnects() const { return reconnects_; }
  /// Why the connection is down and not yet made again ("" while it is up).
  std::string down_reason() const {
    std::lock_guard lk{down_mtx_};
    return down_reason_;
  }

private:
  bool send_start(uint64_t i);
  bool send_signal(uint64_t i);
  void send_loop();
  bool reconnect();
  void receive_loop();
  /// A start of this lane was answered (closed loop: the next may leave).
  void answered();
  /// Sends again what an answer with `status` asked to: at once when the holder was lost (the
  /// call parks for the next), else after a pause (resend_pause).
  void resend(uint8_t status, uint64_t i, bool signal);
  void resend_due();

  observations* obs_;
  const scenario& s_;
  uint32_t lane_;
  uint64_t starts_;
  std::atomic<uint32_t> shards_{1};
  std::string server_;
  std::mutex mtx_;  ///< guards conn_ (swapped on reconnect) and writes to it
  std::shared_ptr<client::connection> conn_;
  /// By i / connections (this lane's starts only); receiver thread only. Bit 1: the start was
  /// sent again, bit 2: the signal was.
  std::vector<uint8_t> resent_;
  uint8_t& resent(uint64_t i) { return resent_[i / s_.connections]; }
  std::atomic<bool> stop_{false}, sender_done_{false};
  std::atomic<uint64_t> reconnects_{0};
  mutable std::mutex down_mtx_;
  std::string down_reason_;
  /// Receiver thread only: calls to send again once `at` has passed. The pause keeps a call that
  /// is answered "not run" at once (its shard's node is down) from being sent thousands of times
  /// a second.
  struct pending_resend {
    clock_type::time_point at;
    uint64_t i;
    bool signal;
  };
  std::deque<pending_resend> resends_;
  std::mutex flight_mtx_;  ///< closed loop: starts sent and not answered
  std::condition_variable flight_cv_;
  uint32_t in_flight_ = 0;
  std::thread sender_, receiver_;
};

}  // namespace fusee::load
