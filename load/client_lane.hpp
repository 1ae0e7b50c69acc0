// One simulated client connection of a load run: a sender that starts workflows (open loop: at
// their scheduled times whatever the answers do; closed loop: a fixed number unanswered), and a
// receiver that matches the answers, sends each run's signal when asked to, and reconnects and
// resends what was not answered when the server is killed.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
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

private:
  bool send_start(uint64_t i);
  bool send_signal(uint64_t i);
  void send_loop();
  bool reconnect();
  void receive_loop();
  /// A start of this lane was answered (closed loop: the next may leave).
  void answered();

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
  std::mutex flight_mtx_;  ///< closed loop: starts sent and not answered
  std::condition_variable flight_cv_;
  uint32_t in_flight_ = 0;
  std::thread sender_, receiver_;
};

}  // namespace fusee::load
