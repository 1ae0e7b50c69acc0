// The records a workflow runtime journals to its shard's log (opaque bytes to the server), and
// the checkpoint that stands for a prefix of them. One description per record kind drives the
// encoder and the decoder (journal.cpp), so the layout cannot drift between writer and reader.
//
// Record = kind:u8 then the fields below in order, with the protocol's primitives (str = varint
// length + UTF-8; JSON values are str holding JSON text). A checkpoint = "FWC1" then u32 count
// then that many records (each as `bytes`): the records that rebuild the shard's state.
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "protocol/result.hpp"
#include "protocol/wire.hpp"

namespace fusee::worker {

/// No shard: the record came from a call, not from another shard's message.
inline constexpr uint32_t from_call = 0xFFFFFFFFu;

/// The journaled operations of a workflow, by the order its code asked for them (`seq`).
enum class op_kind : uint8_t {
  step = 1,
  sleep = 2,
  wait = 3,  ///< wait_for(signal, timeout)
  send = 4,
  child = 5,  ///< start_child
  now = 6,
  random = 7,
};
const char* op_name(op_kind k);

enum class run_status : uint8_t { running = 0, completed = 1, failed = 2, cancelled = 3 };
const char* status_name(run_status s);

namespace rec {

/// A workflow run began (from a `start` call or a child start message `from`/`outbox`).
struct started {
  std::string workflow, type, input;  ///< input: JSON text
  std::string parent;                 ///< the parent workflow of a child; empty otherwise
  uint32_t from = from_call;
  uint64_t outbox = 0;
  uint64_t at_ms = 0;  ///< unix ms
};

/// Operation `seq` finished: its journaled result. `ok = 0` means a step that failed for good
/// (value = the error text); for a wait, ok = 1 means a signal arrived (value = its payload,
/// consumed from the inbox) and ok = 0 that the time-out came first.
struct op_done {
  std::string workflow;
  uint32_t seq = 0;
  op_kind op = op_kind::step;
  std::string name;
  uint8_t ok = 1;
  std::string value;  ///< JSON text
};

/// A durable timer for operation `seq` (a sleep, or a wait's time-out).
struct timer_set {
  std::string workflow;
  uint32_t seq = 0;
  op_kind op = op_kind::sleep;
  std::string name;
  uint64_t due_ms = 0;  ///< unix ms
};

/// A signal for `workflow` (from a call or a message); kept in its inbox until a wait takes it.
struct signal {
  std::string workflow, name, payload;
  uint32_t from = from_call;
  uint64_t outbox = 0;
  uint64_t at_ms = 0;  ///< unix ms it arrived (how long a message's dedup entry is kept)
  /// A call's idempotency key (empty: none). The record's last field, absent when empty: records
  /// written before it existed decode with none.
  std::string key;
};

/// Operation `seq` (a send or a child start) put a message in the shard's outbox.
struct sent {
  std::string workflow;
  uint32_t seq = 0;
  op_kind op = op_kind::send;
  std::string name;
  uint64_t outbox = 0;
  uint32_t target = 0;
  std::string payload;  ///< the message (JSON text)
};

/// The target's holder acknowledged outbox message `outbox`: never resent.
struct acked {
  uint64_t outbox = 0;
};

/// The run ended. value: the result (completed), the error (failed), the reason (cancelled).
struct finished {
  std::string workflow;
  run_status status = run_status::completed;
  std::string value;  ///< JSON text
  uint64_t at_ms = 0;
};

/// A message from another shard that had no effect here (its target was unknown or finished),
/// kept so a resend is recognised.
struct seen {
  uint32_t from = 0;
  uint64_t outbox = 0;
  uint64_t at_ms = 0;  ///< unix ms it arrived
};

/// Attempt `attempt` of step `seq` failed with `error`; the next one is due at `due_ms`. Kept
/// until the step's op_done, so a new holder goes on with the next attempt at its time.
struct retry {
  std::string workflow;
  uint32_t seq = 0;
  std::string name;
  uint32_t attempt = 0;
  uint64_t due_ms = 0;  ///< unix ms
  std::string error;
};

/// A finished run past its retention period is forgotten: its id may start a new run.
struct forgotten {
  std::string workflow;
};

/// The idempotency key of a signal `workflow` took from a call at `at_ms` (unix ms): a
/// checkpoint's form of a `signal` record's key, kept so a retry is recognised for the retention
/// period. `digest`: signal_digest of the signal's name and payload (a key reused for another
/// signal is told from a retry).
struct signal_key {
  std::string workflow, key;
  uint64_t at_ms = 0;
  uint64_t digest = 0;
};

}  // namespace rec

using record =
    std::variant<rec::started, rec::op_done, rec::timer_set, rec::signal, rec::sent, rec::acked,
                 rec::finished, rec::seen, rec::retry, rec::forgotten, rec::signal_key>;

/// FNV-1a 64 of a signal's name, a 0 byte and its payload's JSON text (as the runtime dumps it).
uint64_t signal_digest(const std::string& name, const std::string& payload);

proto::bytes encode(const record& r);
/// Decodes one record; an error names the kind and field that did not decode.
proto::result<record> decode_record(proto::byte_view data);

proto::bytes encode_checkpoint(const std::vector<record>& records);
proto::result<std::vector<record>> decode_checkpoint(proto::byte_view data);

}  // namespace fusee::worker
