// One worker connection: HELLO and its LEASE, the shards it holds (a shard_runner each), their
// recovery, and the frames in and out. runtime (one worker per thread) and fleet (many workers on
// one thread) drive it turn by turn.
//
// Threading: every member runs on the owner's thread, except the keep-alive thread's PINGs, which
// share the socket's writes under write_mu_.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include "client/connection.hpp"
#include "worker/append_window.hpp"
#include "worker/runtime.hpp"
#include "worker/shard_runner.hpp"

namespace fusee::worker {

/// What a worker's log line says (after "shard N: ") when the server answers IO_FAILED: its log
/// failed, and nothing more of the shard can be made durable until it restarts. Tools watching
/// workers' lines look for it.
inline constexpr std::string_view server_log_failed = "the server could not write its log: ";

/// Leaves out of an IDLE's entries the missing workflow types that might not fit one frame of
/// the node's (at least 1 MiB, and proto::idle_bytes_per_shard per shard of an invocation: the
/// node's cap on an invocation's shards); returns how many it left out. The room is shared out a
/// type per shard at a time: every shard's first type is tried before any shard's second.
size_t fit_idle_types(std::vector<proto::idle_entry>& entries);

/// The wait before a long-lived worker connects again: 100 ms doubling to 5 s after a connect
/// that failed or a connection that served under a second (a server that keeps closing it, say
/// for a frame it refuses, must not become a tight loop); none, and back to 100 ms, after one
/// that served longer.
class reconnect_backoff {
public:
  std::chrono::milliseconds after_failed_connect() { return grow(); }
  std::chrono::milliseconds after_connection(std::chrono::steady_clock::duration served) {
    if (served < std::chrono::seconds(1)) return grow();
    next_ = std::chrono::milliseconds(100);
    return std::chrono::milliseconds(0);
  }

private:
  std::chrono::milliseconds grow() {
    auto wait = next_;
    next_ = std::min<std::chrono::milliseconds>(next_ * 2, std::chrono::seconds(5));
    return wait;
  }
  std::chrono::milliseconds next_{100};
};

class session final : public runner_env {
  using clock = std::chrono::steady_clock;

public:
  /// `keep_alive_thread`: a thread of its own PINGs while the loop is busy (one worker per
  /// thread); without it the owner calls ping_if_quiet() often enough (fleet).
  session(const registry& types, const worker_options& options, bool keep_alive_thread = true);
  ~session();
  session(const session&) = delete;
  session& operator=(const session&) = delete;

  // -- runner_env ---------------------------------------------------------------------------
  uint64_t now_ms() override;
  uint64_t random() override { return rng_(); }
  void before_step() override { flush(); }
  bool turn_over() override {
    return options_.max_turn_ms != 0 &&
           clock::now() - turn_began_ > std::chrono::milliseconds(options_.max_turn_ms);
  }
  uint64_t next_request_id() override { return next_id_++; }
  void log(const std::string& line) override;

  /// Connects and says HELLO, waiting up to hello_timeout_ms for the LEASE (or until `stop` is
  /// set); an error says why the server could not be reached or refused.
  proto::result<void> connect(uint32_t offers, proto::invocation_id invocation,
                              const std::atomic<bool>* stop = nullptr);
  /// The same in two parts for a loop that must not block: connects and sends HELLO; then,
  /// each time the socket is readable, lease_answer() is nullopt until the LEASE (or the
  /// refusal) has come.
  proto::result<void> begin_connect(uint32_t offers, proto::invocation_id invocation);
  std::optional<proto::result<void>> lease_answer();
  /// The server itself answered the HELLO with ERR UNAUTHORIZED (a token whose scope may not
  /// hold shards): connecting again with the same token cannot succeed.
  bool hello_refused() const { return hello_refused_; }

  /// One turn: waits up to `wait` for frames, handles all that came, runs what is due, sends.
  /// False once the connection is gone.
  bool turn(std::chrono::milliseconds wait);

  /// How long the next turn may wait: until the next timer or `cap`.
  std::chrono::milliseconds next_wait(std::chrono::milliseconds cap);

  /// Sends DRAIN for every held shard and serves until its OK: calls routed before it are
  /// answered. Then answers waiting `result` calls and lets the disk catch up (bounded).
  bool drain(std::chrono::milliseconds limit);

  /// A long-lived worker stopping: DRAIN (calls routed before it are answered), a checkpoint of
  /// every shard with new records, the disk caught up; false when not every checkpoint was
  /// confirmed within `limit` (each phase gets that long). The connection stays open.
  bool stop_serving(std::chrono::milliseconds limit);

  /// Serves until every shard has nothing waiting for the disk.
  bool settle(std::chrono::milliseconds limit);

  /// IDLE with each shard's report; waits for its OK.
  bool report_idle(bool expired, std::chrono::milliseconds limit);

  /// Checkpoints the shards with at least `at_least` new records; the CHECKPOINT request ids,
  /// whose OKs await_oks() can wait for when `awaited`.
  std::vector<uint64_t> checkpoint_if(uint64_t at_least, bool awaited = false);

  /// Checkpoints the shards whose rule says so (shard_runner::checkpoint_due).
  void checkpoint_due();

  /// Waits for the OK of each of `ids` (checkpoints durable), at most `limit` in all.
  bool await_oks(const std::vector<uint64_t>& ids, std::chrono::milliseconds limit);

  bool all_quiet() const;
  bool all_started() const;
  uint64_t next_wake() const;
  size_t held() const { return shards_.size(); }
  uint64_t steps() const;
  /// Steps run on shard `s` under this lease (0 while it recovers).
  uint64_t steps_of(uint32_t s) const;
  size_t running() const;
  uint32_t remaining_ms() const { return remaining_ms_; }
  clock::time_point last_received() const { return last_received_; }
  const std::string& lost() const { return lost_; }
  /// Closes the connection at once: no DRAIN, nothing more sent (also what a crash looks like).
  void close();
  uint64_t calls() const { return calls_; }
  /// From HELLO sent to LEASE received (the server's share of taking the leases).
  clock::duration lease_wait() const { return lease_wait_; }
  /// The CLUSTER_MAP that came before the LEASE (HELLO offered CLUSTER_MAP), if any.
  const std::optional<proto::cluster_map_frame>& cluster_map() const { return cluster_map_; }
  int fd() const { return conn_.fd(); }
  /// The last turn stopped after its batch of frames with more possibly received: turn again
  /// soon (the socket may not say so).
  bool more_received() const { return more_; }

  /// PINGs when nothing was sent for half the ping interval (the server's idea of alive).
  void ping_if_quiet();

private:
  /// The answer to HELLO: a LEASE, or the server's ERR (or the connection's failure).
  proto::result<void> take_answer(proto::result<proto::any_message> answer);
  proto::result<void> take_lease(proto::result<proto::lease> lease);
  void take(const proto::grant_entry& g);

  runner_settings settings() const;
  /// Each shard's queued records as APPENDs, while fewer than max_appends_in_flight are out.
  void send_appends();

  void read_log(uint32_t s, uint64_t after);

  void recovered(uint32_t s, uint64_t last);

  void drop(uint32_t s, const std::string& why, bool release);

  shard_runner* held(proto::shard_id s, std::optional<proto::epoch_t> epoch = std::nullopt);

  void handle(proto::any_message& m);

  template <class T>
  void on(T&) {}  // requests never come from the server (decode_response refuses them)

  void on(proto::durable& d);
  void on(proto::grant& g);
  /// The runner a recovery answer is for (nullptr: not ours, or the shard is gone meanwhile).
  shard_runner* recovering(uint64_t id, uint32_t& s);

  void on(proto::checkpoint_data& c);
  void on(proto::log_page& page);
  void on(proto::relayed_call& c);
  void on(proto::message& m);
  void on(proto::ack& a);
  void on(proto::revoked& r);
  // A shard this worker cannot go on with is given back (RELEASE), so the server can route its
  // calls to another worker instead of to one that would ignore them.
  void on(proto::io_failed& f);
  void on(proto::ok& o);
  void on(proto::err& e);

  bool await_ok(uint64_t id, std::chrono::milliseconds limit);

  void send(const proto::any_message& m) { proto::append_frame(out_, m); }
  uint64_t expect_ok(uint64_t id);

  /// APPENDs for the shards with records (within max_appends_in_flight), then the frames that
  /// may leave; one write.
  void flush();

  clock::duration since_sent() const;

  /// The keep-alive thread: pings whenever the connection has been quiet for half the ping
  /// interval, whatever the loop is doing (a long step body, a large recovery or snapshot), so
  /// the leases outlive them.
  void keep_alive();

  void stop_keep_alive();

  struct recovery {
    clock::time_point since;
    uint64_t durable = 0;  // the grant's durable LSN
    uint64_t last = 0;     // the checkpoint's LSN
  };

  const registry& types_;
  const worker_options options_;
  bool keep_alive_thread_;
  std::mt19937_64 rng_;
  client::connection conn_;
  uint32_t shard_count_ = 1;
  std::chrono::milliseconds ping_interval_{1000};
  uint32_t remaining_ms_ = 0;
  std::atomic<uint64_t> next_id_{100};
  std::map<uint32_t, std::unique_ptr<shard_runner>> shards_;
  uint32_t tick_from_ = UINT32_MAX;  ///< the shard ticked first last turn
  /// The APPENDs out (options_.max_appends_in_flight bounds them); the shard the next flush
  /// starts from when the window was full.
  append_window window_;
  uint32_t flush_from_ = 0;
  std::map<uint32_t, recovery> recovering_;
  std::map<uint32_t, uint64_t> steps_at_lease_, open_us_;
  std::map<uint64_t, proto::shard_epoch> pending_;  // recovery requests: id -> lease
  std::set<uint64_t> awaited_;                      // ids whose OK await_ok() will want
  std::vector<uint64_t> oks_;
  proto::bytes out_;
  std::atomic<clock::rep> last_sent_{0};  // steady clock ticks of the last write
  clock::time_point last_received_ = clock::now();
  std::mutex write_mu_;  // the socket's writes: the loop and the keep-alive thread
  std::mutex ka_mu_;
  std::condition_variable ka_cv_;
  bool ka_stop_ = false;
  std::thread keepalive_;
  std::string lost_;
  bool hello_refused_ = false;
  uint64_t calls_ = 0;
  bool more_ = false;
  clock::time_point turn_began_ = clock::now();  ///< when turn() last read the connection
  clock::duration lease_wait_{};
  std::optional<proto::cluster_map_frame> cluster_map_;
  /// Keeps `m` if it is a CLUSTER_MAP (true).
  bool took_cluster_map(proto::any_message& m);
  clock::time_point hello_at_{};
};

}  // namespace fusee::worker
