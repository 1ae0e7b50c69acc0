// Connects the log to the actors: it turns the log's reports into frames for sessions and
// messages for the directory. Every method runs on the committing thread (the log's writer thread,
// an I/O thread, or the directory's for a grant the log made at once) and only sends.
#pragma once

#include <memory>
#include <mutex>
#include <unordered_map>

#include "actors/directory_interface.hpp"
#include "actors/wal/wal_writer.hpp"

namespace fusee::server {

class out_lane;

class log_sink final : public wal_sink {
public:
  void set_directory(directory_actor d);
  void add_session(session_id s, session_actor a, std::shared_ptr<out_lane> lane);
  void remove_session(session_id s);
  /// The open sessions (for the inspector), in no particular order.
  std::vector<std::pair<session_id, session_actor>> sessions();

  void on_durable(session_id s, std::vector<proto::position> positions) override;
  void on_refused(session_id s, uint64_t request_id, proto::error e) override;
  void on_granted(std::vector<grant_done> grants) override;
  void on_revoked(std::vector<revocation_done> revoked, std::string failure) override;
  void on_answer(session_id s, proto::any_message answer) override;
  void on_io_failed(session_id s, shard_id shard, epoch_t epoch, std::string message) override;
  void on_failed(std::string failure) override;

private:
  void send_frame(session_id s, const proto::any_message& m);
  directory_actor directory();

  std::mutex mtx_;
  directory_actor directory_;
  struct target {
    session_actor actor;
    std::shared_ptr<out_lane> lane;
  };
  std::unordered_map<session_id, target> sessions_;
};

}  // namespace fusee::server
