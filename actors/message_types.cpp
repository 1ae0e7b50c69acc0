#include "actors/message_types.hpp"

#include "actors/call_gateway.hpp"
#include "actors/cluster/cluster_interface.hpp"
#include "actors/directory_interface.hpp"

namespace fusee::server {

void add_server_types(caf::actor_system_config& cfg) {
  // directory and sessions
  cfg.add_message_type<origin>("fusee.origin");
  cfg.add_message_type<hello_request>("fusee.hello_request");
  cfg.add_message_type<drain_request>("fusee.drain_request");
  cfg.add_message_type<shard_report>("fusee.shard_report");
  cfg.add_message_type<idle_request>("fusee.idle_request");
  cfg.add_message_type<call_request>("fusee.call_request");
  cfg.add_message_type<call_reply_request>("fusee.call_reply_request");
  cfg.add_message_type<relay_request>("fusee.relay_request");
  cfg.add_message_type<ack_request>("fusee.ack_request");
  cfg.add_message_type<release_request>("fusee.release_request");
  cfg.add_message_type<session_ended>("fusee.session_ended");
  cfg.add_message_type<grant_done>("fusee.grant_done");
  cfg.add_message_type<grants_made>("fusee.grants_made");
  cfg.add_message_type<revocation_done>("fusee.revocation_done");
  cfg.add_message_type<revocations_done>("fusee.revocations_done");
  cfg.add_message_type<log_failed>("fusee.log_failed");
  cfg.add_message_type<call_expired>("fusee.call_expired");
  cfg.add_message_type<proto::frame>("fusee.frame");
  cfg.add_message_type<inbound>("fusee.inbound");
  // between the nodes of a cluster
  cfg.add_message_type<proto::bytes>("fusee.bytes");  // frames (CALL_RESULT) cross nodes
  cfg.add_message_type<remote_message>("fusee.remote_message");
  cfg.add_message_type<remote_ack>("fusee.remote_ack");
  cfg.add_message_type<cluster_ready>("fusee.cluster_ready");
  cfg.add_message_type<withheld_shards>("fusee.withheld_shards");
  cfg.add_message_type<peer_hello>("fusee.peer_hello");
  cfg.add_message_type<peer_welcome>("fusee.peer_welcome");
  cfg.add_message_type<cluster_member>("fusee.cluster_member");
  cfg.add_message_type<std::vector<cluster_member>>("fusee.cluster_member_list");
  cfg.add_message_type<node_report>("fusee.node_report");
  cfg.add_message_type<std::vector<node_report>>("fusee.node_report_list");
  cfg.add_message_type<cluster_reply>("fusee.cluster_reply");
  // the HTTP API's call gateway
  cfg.add_message_type<gateway_call>("fusee.gateway_call");
  cfg.add_message_type<gateway_deadline>("fusee.gateway_deadline");
  // invoker
  cfg.add_message_type<lease_end>("fusee.lease_end");
  cfg.add_message_type<resting_record>("fusee.resting_record");
  cfg.add_message_type<shard_status>("fusee.shard_status");
  cfg.add_message_type<bind_request>("fusee.bind_request");
  cfg.add_message_type<bind_result>("fusee.bind_result");
  cfg.add_message_type<shard_reported>("fusee.shard_reported");
  cfg.add_message_type<invocation_leased>("fusee.invocation_leased");
  cfg.add_message_type<invocation_ended>("fusee.invocation_ended");
  cfg.add_message_type<fence_request>("fusee.fence_request");
  cfg.add_message_type<endpoint_trouble>("fusee.endpoint_trouble");
  cfg.add_message_type<http_result>("fusee.http_result");
  cfg.add_message_type<std::vector<endpoint_actor>>("fusee.endpoint_actor_list");
  // introspection (these cross the middleman: `fusee inspect`)
  cfg.add_message_type<stat_value>("fusee.stat_value");
  cfg.add_message_type<histogram>("fusee.histogram");
  cfg.add_message_type<actor_stats>("fusee.actor_stats");
  cfg.add_message_type<shard_lease_view>("fusee.shard_lease_view");
  cfg.add_message_type<shard_invoker_view>("fusee.shard_invoker_view");
  cfg.add_message_type<std::vector<shard_invoker_view>>("fusee.shard_invoker_view_list");
  cfg.add_message_type<shard_details_request>("fusee.shard_details_request");
  cfg.add_message_type<lease_details>("fusee.lease_details");
  cfg.add_message_type<inspect_query>("fusee.inspect_query");
  cfg.add_message_type<kind_summary>("fusee.kind_summary");
  cfg.add_message_type<state_count>("fusee.state_count");
  cfg.add_message_type<inspect_reply>("fusee.inspect_reply");
}

}  // namespace fusee::server
