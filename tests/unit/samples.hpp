// One populated instance of every frame kind, for round trips and robustness tests.
#pragma once

#include <vector>

#include "protocol/messages.hpp"

namespace fusee::test {

inline std::vector<proto::any_message> sample_messages() {
  using namespace fusee::proto;
  auto b = [](std::string_view s) { return bytes(s.begin(), s.end()); };
  request_head none{11, no_shard, epoch_t{0}};
  request_head held{12, shard_id{3}, epoch_t{7}};
  return {
      hello{none,
            1,
            offer_invoked | offer_serve_calls,
            4,
            invocation_id{0x00f3a1c2b4d5e6f7},
            "w-1",
            {"order", "payment"}},
      hello{none, 1, offer_serve_calls, 0, invocation_id{}, "plain", {}},
      append{held, lsn_t{5}, {b("one"), b(""), bytes(300, 0x42)}},
      recover_log{held, lsn_t{0}, 1 << 20},
      checkpoint{held, lsn_t{9}, b("snapshot")},
      load_checkpoint{held},
      ping{none},
      client_hello{none, 1, "cli"},
      call{request_head{13, shard_id{3}, epoch_t{0}}, "start", "order", b(R"({"n":1})"), 30000},
      call_reply{held, 77, 1, b(R"({"ok":true})")},
      relay{held, shard_id{9}, 4, b("msg")},
      message_ack{held, shard_id{9}, epoch_t{2}, 4},
      drain{none, {shard_id{3}, shard_id{9}}},
      idle{none,
           {idle_entry{shard_id{3}, epoch_t{7}, idle_busy | idle_expired, 250, 12, 900, {"x"}},
            idle_entry{shard_id{9}, epoch_t{1}, 0, nothing_due, 0, 0, {}}}},
      release{held},
      make_client_hello_ok(14, 16),
      ok{15, {}},
      err{16, static_cast<uint16_t>(err_code::stale_epoch), "epoch 6 is no longer live"},
      lease{17, 16, 1000, 5000, 0, {grant_entry{shard_id{3}, epoch_t{7}, lsn_t{4}}}},
      grant{0, {grant_entry{shard_id{9}, epoch_t{2}, lsn_t{0}}}},
      durable{0,
              {position{shard_id{3}, epoch_t{7}, lsn_t{8}},
               position{shard_id{9}, epoch_t{2}, lsn_t{1}}}},
      log_page{18, shard_id{3}, lsn_t{1}, {b("r1"), b("r2")}, 1, lsn_t{8}},
      checkpoint_data{19, lsn_t{0}, {}},
      relayed_call{0, 77, shard_id{3}, "signal", "order", b("{}")},
      call_result{13, static_cast<uint8_t>(call_status::holder_lost), b(R"({"error":"lost"})")},
      message{0, shard_id{9}, shard_id{3}, epoch_t{7}, 4, b("msg")},
      ack{0, shard_id{3}, epoch_t{7}, 4},
      revoked{0, {shard_epoch{shard_id{3}, epoch_t{7}}}, "liveness timeout"},
      io_failed{0, shard_id{3}, epoch_t{7}, "No space left on device"},
      cluster_map_frame{5,
                        std::string(64, 'e'),
                        "b",
                        {map_node{"a", "127.0.0.1:7400", "127.0.0.1:7402", {{0, 7}, {12, 12}}},
                         map_node{"b", "127.0.0.1:7500", "", {{8, 11}, {13, 15}}}}},
      auth_hello{none, 1, bytes(32, 0x11)},
      auth_response{none, bytes(32, 0x22)},
      auth_challenge{11, bytes(32, 0x33)},
      auth_ok{11, 2, "ci", bytes(32, 0x44)},
  };
}

}  // namespace fusee::test
