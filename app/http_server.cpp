#include "app/http_server.hpp"

#include <algorithm>
#include <cstring>

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>

namespace fusee::app {

struct http_server::impl {
  MHD_Daemon* daemon = nullptr;
  handler h;
  size_t max_body = 0;
  ~impl() {
    if (daemon) MHD_stop_daemon(daemon);
  }
};

namespace {

struct request_state {
  http_exchange ex;
  bool too_large = false;
};

MHD_Result collect_header(void* cls, MHD_ValueKind, const char* key, const char* value) {
  auto* ex = static_cast<http_exchange*>(cls);
  std::string k{key};
  std::transform(k.begin(), k.end(), k.begin(), [](unsigned char c) { return std::tolower(c); });
  ex->headers[k] = value ? value : "";
  return MHD_YES;
}

MHD_Result respond(MHD_Connection* conn, const http_reply& r) {
  auto* resp = MHD_create_response_from_buffer(r.body.size(), const_cast<char*>(r.body.data()),
                                               MHD_RESPMEM_MUST_COPY);
  MHD_add_response_header(resp, "Content-Type", r.content_type.c_str());
  auto rc = MHD_queue_response(conn, r.status, resp);
  MHD_destroy_response(resp);
  return rc;
}

MHD_Result on_request(void* cls, MHD_Connection* conn, const char* url, const char* method,
                      const char*, const char* upload, size_t* upload_size, void** con_cls) {
  auto* self = static_cast<http_server::impl*>(cls);
  auto* st = static_cast<request_state*>(*con_cls);
  if (st == nullptr) {  // first call: headers only
    st = new request_state;
    st->ex.method = method;
    st->ex.path = url;
    MHD_get_connection_values(conn, MHD_HEADER_KIND, collect_header, &st->ex);
    *con_cls = st;
    return MHD_YES;
  }
  if (*upload_size > 0) {  // body chunks
    if (st->ex.body.size() + *upload_size > self->max_body)
      st->too_large = true;
    else
      st->ex.body.append(upload, *upload_size);
    *upload_size = 0;
    return MHD_YES;
  }
  if (st->too_large)
    return respond(conn, http_reply{413, "application/json", R"({"error":"body too large"})"});
  return respond(conn, self->h(st->ex));
}

void on_completed(void*, MHD_Connection*, void** con_cls, MHD_RequestTerminationCode) {
  delete static_cast<request_state*>(*con_cls);
  *con_cls = nullptr;
}

}  // namespace

std::unique_ptr<http_server> http_server::start(const std::string& host, uint16_t port, handler h,
                                                std::string* err, size_t max_body) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) {
    *err = "admin/HTTP listen host must be a numeric IPv4 address, not " + host;
    return nullptr;
  }
  std::unique_ptr<http_server> s{new http_server};
  s->impl_ = std::make_unique<impl>();
  s->impl_->h = std::move(h);
  s->impl_->max_body = max_body;
  s->impl_->daemon =
      MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
                           MHD_USE_POLL | MHD_USE_ERROR_LOG,
                       port, nullptr, nullptr, &on_request, s->impl_.get(), MHD_OPTION_SOCK_ADDR,
                       &addr, MHD_OPTION_NOTIFY_COMPLETED, &on_completed, nullptr,
                       MHD_OPTION_CONNECTION_TIMEOUT, 30u, MHD_OPTION_END);
  if (s->impl_->daemon == nullptr) {
    *err =
        "cannot serve HTTP on " + host + ":" + std::to_string(port) + ": " + std::strerror(errno);
    return nullptr;
  }
  auto* info = MHD_get_daemon_info(s->impl_->daemon, MHD_DAEMON_INFO_BIND_PORT);
  s->port_ = info ? info->port : port;
  return s;
}

http_server::~http_server() = default;

}  // namespace fusee::app
