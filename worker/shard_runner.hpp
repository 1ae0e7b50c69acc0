// One leased shard in a worker: its workflow runs (state rebuilt from the journal, coroutines
// replayed from it), the calls and messages addressed to it, and what must leave the process.
//
// Contract: single-threaded (the runtime's loop thread). Every state change is a journal record
// that is applied here and appended at once (`commit`), so recovery rebuilds exactly the state
// the records describe. Code runs ahead of the disk: records are queued for APPEND and runs go
// on; what leaves the process (call replies, RELAY, MESSAGE_ACK, CHECKPOINT) is held until the
// records it depends on are durable. No I/O here: the runtime takes records and frames out.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "protocol/ids.hpp"
#include "protocol/messages.hpp"
#include "worker/journal.hpp"
#include "worker/workflow.hpp"

namespace fusee::worker {

/// What a shard runner needs from its runtime.
struct runner_env {
  virtual ~runner_env() = default;
  virtual uint64_t now_ms() = 0;  ///< unix ms
  virtual uint64_t random() = 0;
  /// Called before a step body runs: send the records (within the connection's window of
  /// APPENDs) and frames that are ready, so the disk works while the body does.
  virtual void before_step() = 0;
  virtual uint64_t next_request_id() = 0;
  /// A line for the operator (stderr in the programs).
  virtual void log(const std::string& line) = 0;
  /// True once the runtime's loop has run this long without reading its connection: the next
  /// operation parks, so that revocations, a lost connection, cancels and the budget are seen
  /// between a run's long steps (worker_options::max_turn_ms). Never, by default.
  virtual bool turn_over() { return false; }
};

/// A step whose outcome record became durable (runner_settings::on_step_durable). The references
/// are valid during the call only.
struct step_durable {
  const std::string& workflow;
  const std::string& step;
  std::chrono::nanoseconds since_body;  ///< from the body's return to the DURABLE
  uint64_t epoch;                       ///< the lease it became durable under
};

/// A `describe` lists a running run's latest steps, this many at most (`steps_omitted` counts
/// the earlier ones).
inline constexpr size_t describe_steps = 100;

struct runner_settings {
  uint32_t shard_count = 1;
  /// A checkpoint is written once this many records were appended since the last one.
  uint64_t checkpoint_every = 1000;
  /// ...or once its oldest record not in a checkpoint is this old (0: never), so the server can
  /// retire log segments of quiet shards too.
  uint64_t checkpoint_after_ms = 60000;
  /// The longest a `result` call may wait for its run to end.
  uint64_t max_result_wait_ms = 600000;
  /// How soon an invoked worker wants to run again while messages it sent are unacknowledged.
  uint64_t resend_after_ms = 1000;
  /// How often a holder sends an unacknowledged message again.
  uint64_t resend_every_ms = 30000;
  /// An operation (a step's body, now(), a sleep, a send, ...), and a timer, time-out or step
  /// retry that came due, waits before it writes its record while this many of the shard's
  /// records are not yet durable (its run parks until DURABLEs bring them below): a workflow
  /// looping over operations whose results are ready at once, or many timers due together, hand
  /// the worker's loop back its turn (to read DURABLEs, calls and signals, and to see a stop or
  /// the end of its budget), and records wait in memory only so many at a time.
  uint64_t max_records_ahead = 4096;  ///< 0: no bound
  /// Finished runs are forgotten by the first checkpoint this long after they ended (their ids
  /// can then start new runs), and so are the marks that recognise a resent message or a
  /// signal's idempotency key; 0 keeps them forever.
  uint64_t retention_ms = 7ull * 24 * 3600 * 1000;
  /// The longest answer to a call (a CALL_REPLY's body): a longer one would make a frame over
  /// the protocol's limit, which the server refuses by closing the connection (every lease on
  /// it lost). Such an answer is replaced by an error ("too_large"). Tests set less.
  uint64_t max_reply_bytes = proto::max_record_size;
  /// Told when a step's outcome is durable (the DURABLE covering its record came), with the
  /// time since the body returned; called on the runner's thread. Unset costs nothing. Load
  /// tools use it to know which steps must never run again and how long durability took.
  std::function<void(const step_durable&)> on_step_durable;
};

class shard_runner {
public:
  shard_runner(proto::shard_id shard, proto::epoch_t epoch, const registry& types, runner_env& env,
               runner_settings settings);
  ~shard_runner();
  shard_runner(const shard_runner&) = delete;
  shard_runner& operator=(const shard_runner&) = delete;

  proto::shard_id shard() const { return shard_; }
  proto::epoch_t epoch() const { return epoch_; }

  // -- recovery, before start() ----------------------------------------------------------------
  /// The checkpoint (CHECKPOINT_DATA) covering records up to `lsn`.
  proto::result<void> restore(uint64_t lsn, proto::byte_view data);
  /// One recovered record, in LSN order.
  proto::result<void> replay(uint64_t lsn, proto::byte_view record);
  /// Recovery is done: the shard's records end at `last_lsn`, all durable. Resumes the runs,
  /// resends unacknowledged messages and handles the calls and messages that came meanwhile.
  void start(uint64_t last_lsn);
  bool started() const { return started_; }

  // -- events -------------------------------------------------------------------------------
  void on_call(uint64_t relay, const std::string& method, proto::byte_view args);
  void on_message(uint32_t from, uint64_t from_epoch, uint64_t outbox, proto::byte_view payload);
  void on_ack(uint64_t outbox);
  void on_durable(uint64_t lsn);
  /// Runs what is due: timers, step retries, the deadlines of `result` waits.
  void tick();
  /// Leaving (before DRAIN): `result` calls waiting for a run, and those still to come, are
  /// answered with its current state at once; from now on tick() fires no timer, time-out or
  /// step retry and resends nothing (the shard's next holder does, from the journal).
  void leave();
  bool leaving() const { return leaving_; }

  // -- what leaves ---------------------------------------------------------------------------
  bool has_records() const { return !records_.empty(); }
  /// The queued records from the first as one APPEND of at most `max_bytes` of records (at
  /// least one record; 0: no byte limit) and within
  /// proto::batch_takes (our journal's records, 3 bytes and more, never meet its count).
  proto::append take_append(size_t max_bytes = 0);
  /// Frames that may go out now (their records are durable). The caller sends and clears.
  std::vector<proto::any_message>& ready_frames() { return ready_; }

  /// Snapshots the state now as a checkpoint; it goes out once its LSN is durable. Returns the
  /// CHECKPOINT's request id (its OK says the checkpoint is durable), 0 when nothing is new.
  uint64_t checkpoint();
  uint64_t records_since_checkpoint() const { return last_lsn() - checkpoint_lsn_; }
  /// The rule of a long-lived worker: checkpoint_every records since the last checkpoint, or
  /// some that are checkpoint_after_ms old at `now_ms`.
  bool checkpoint_due(uint64_t now_ms) const;

  // -- state ------------------------------------------------------------------------------------
  uint64_t last_lsn() const { return next_lsn_ - 1; }
  uint64_t durable_lsn() const { return durable_; }
  /// The earliest unix ms at which tick() has something to do (UINT64_MAX: nothing).
  uint64_t next_wake_ms() const;
  /// What IDLE reports as due: next_wake_ms(), or a resend of unacknowledged messages.
  uint64_t next_due_ms() const;
  /// Nothing is waiting for the disk (every record appended is durable) and nothing will leave
  /// without a new event or timer.
  bool quiet() const;
  /// Types of running workflows this worker has no code for.
  std::vector<std::string> missing_types() const;
  uint64_t steps() const { return steps_; }
  size_t running() const;

  struct run_state;  // one workflow run (shard_runner.cpp)

private:
  friend class context;
  friend struct run_access;

  uint64_t commit(record r);
  void apply(const record& r);
  void gate(proto::any_message m);
  void reply(uint64_t relay, bool ok, const json& body);
  void run_start(run_state& run);
  template <class Which>
  void answer_waits(Which which);
  void resume(run_state& run);
  void after_resume(run_state& run);
  void deliver_signals(run_state& run);
  bool attempt_step(run_state& run);
  /// Too many records not yet durable for an operation to write another (max_records_ahead).
  bool backlogged() const {
    return settings_.max_records_ahead != 0 && last_lsn() - durable_ >= settings_.max_records_ahead;
  }
  /// An operation's live part `op` (true: its result is set) now, or, when backlogged(), the
  /// loop's turn is over (runner_env::turn_over) or other operations are parked (first parked,
  /// first run), parked (described by what()) for resume_parked(): false then. Every operation
  /// writes a record, so none runs ahead of the bound: a loop of steps, now(), sleep(0) or sends
  /// yields to the worker's loop, which reads its connection before the next. Nothing is built for
  /// parking unless it parks.
  template <class What, class Op>
  bool now_or_parked(run_state& run, What what, Op op);
  /// Does `run`'s parked operation now: one it did not co_await, when it asks for the next
  /// (run_state::begin_op) or ends.
  void unpark_now(run_state& run);
  /// `run` waits (described as `what`, waiting) and resume_parked() runs `op`, the operation's
  /// live part (true: its result is set), later.
  void park(run_state& run, const std::string& what, std::function<bool()> op);
  /// Runs the operations parked by backlogged(), first parked first, while it allows (none once
  /// leaving: the next holder runs them). A run that parks again goes to the back, so a long
  /// loop on a shard takes turns with the shard's other runs.
  void resume_parked();
  /// The live parts of sleep() and wait_for() (after the journal had no result): true when the
  /// result is set now.
  bool begin_sleep(run_state& run, uint32_t seq, std::chrono::milliseconds d);
  bool begin_wait(run_state& run, uint32_t seq, const std::string& name,
                  std::chrono::milliseconds timeout);
  bool journal_value(run_state& run, op_kind op);
  op_awaitable<void> send_op(run_state& run, workflow_run* w, op_kind op, const std::string& name,
                             const std::string& target_id, json message);
  void handle_call(uint64_t relay, const std::string& method, proto::byte_view args);
  void handle_message(uint32_t from, uint64_t from_epoch, uint64_t outbox,
                      proto::byte_view payload);
  json describe(const run_state& run) const;
  json status_of(const run_state& run) const;
  std::vector<record> snapshot() const;

  proto::shard_id shard_;
  proto::epoch_t epoch_;
  const registry& types_;
  runner_env& env_;
  runner_settings settings_;

  bool started_ = false;
  bool leaving_ = false;
  uint64_t next_lsn_ = 1;
  uint64_t durable_ = 0;
  uint64_t checkpoint_lsn_ = 0;
  uint64_t uncheckpointed_since_ms_ = 0;  // when the first record after checkpoint_lsn_ came
  uint64_t checkpoint_retry_lsn_ = 0;     // after a checkpoint too large to send, not before this
  uint64_t steps_ = 0;
  size_t parked_ = 0;  // runs whose operation waits (backlogged(), the turn over, or behind others)
  std::deque<std::string> parked_ids_;  // their ids, first parked first (a cancelled one stays)
  std::vector<proto::bytes> records_;   // committed, not yet taken for APPEND
  uint64_t records_first_ = 1;
  std::deque<std::pair<uint64_t, proto::any_message>> gated_;  // by LSN, ascending
  std::vector<proto::any_message> ready_;
  // Steps committed and not yet durable, by LSN, while on_step_durable is set.
  struct step_watch {
    uint64_t lsn;
    std::string workflow, step;
    std::chrono::steady_clock::time_point at;
  };
  std::deque<step_watch> step_watch_;

  std::map<std::string, std::unique_ptr<run_state>> runs_;
  struct outbox_entry {
    uint32_t target = 0;
    std::string payload;
    uint64_t sent_ms = 0;  // when it last went out (this process)
  };
  void resend(uint64_t id, outbox_entry& m);
  /// The newest unacknowledged message for run `workflow` (as its payload names it) on shard
  /// `target`, if any: a signal sent now names it as its "after".
  std::optional<uint64_t> last_unacknowledged(uint32_t target, const std::string& workflow) const;
  std::map<uint64_t, outbox_entry> outbox_;
  uint64_t next_outbox_ = 1;
  // (from shard, outbox id) of messages taken -> when: a resend is recognised for the retention
  // period, then forgotten.
  std::map<std::pair<uint32_t, uint64_t>, uint64_t> seen_;
  void saw(uint32_t from, uint64_t outbox, uint64_t at_ms);
  // (workflow, idempotency key) of signals taken from calls -> when, and which signal: a retried
  // call is recognised for the retention period (or until its run is forgotten), then forgotten.
  struct key_mark {
    uint64_t at_ms = 0;
    uint64_t digest = 0;  ///< signal_digest of the signal taken
  };
  std::map<std::pair<std::string, std::string>, key_mark> signal_keys_;
  void took_key(const std::string& workflow, const std::string& key, uint64_t at_ms,
                uint64_t digest);
  void forget_signal_keys(const std::string& workflow);

  struct result_wait {
    uint64_t relay = 0;
    std::string workflow;
    uint64_t deadline_ms = 0;
  };
  std::vector<result_wait> result_waits_;

  // Events that arrived while recovering, handled by start().
  struct early_event {
    bool is_call = true;
    uint64_t relay = 0;
    std::string method;
    uint32_t from = 0;
    uint64_t from_epoch = 0, outbox = 0;
    proto::bytes body;
  };
  std::vector<early_event> early_;
};

}  // namespace fusee::worker
