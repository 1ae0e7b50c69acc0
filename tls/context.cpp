#include "tls/context.hpp"

#include <openssl/err.h>
#include <openssl/x509v3.h>

namespace fusee::tls {

namespace {

proto::error bad(std::string message) {
  return proto::error{proto::err_code::io, std::move(message)};
}

ctx_ptr make(const SSL_METHOD* method) {
  ctx_ptr ctx{SSL_CTX_new(method), SSL_CTX_free};
  if (!ctx) return ctx;
  SSL_CTX_set_min_proto_version(ctx.get(), TLS1_3_VERSION);
  SSL_CTX_set_max_proto_version(ctx.get(), TLS1_3_VERSION);
  SSL_CTX_set_options(ctx.get(), SSL_OP_NO_TICKET);
  SSL_CTX_set_num_tickets(ctx.get(), 0);  // no resumption: every connection is a full handshake
  SSL_CTX_set_mode(ctx.get(), SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  return ctx;
}

/// Loads a certificate chain and its key; the message names the file that failed.
std::optional<proto::error> load_identity(SSL_CTX* ctx, const std::string& cert,
                                          const std::string& key) {
  if (SSL_CTX_use_certificate_chain_file(ctx, cert.c_str()) != 1)
    return bad("cannot load the certificate " + cert + ": " + drain_errors());
  if (SSL_CTX_use_PrivateKey_file(ctx, key.c_str(), SSL_FILETYPE_PEM) != 1)
    return bad("cannot load the key " + key + ": " + drain_errors());
  if (SSL_CTX_check_private_key(ctx) != 1)
    return bad("the key " + key + " does not belong to the certificate " + cert);
  return std::nullopt;
}

}  // namespace

/// Host names are matched against a certificate's subjectAltNames only, never its subject's CN.
constexpr unsigned san_only = X509_CHECK_FLAG_NEVER_CHECK_SUBJECT;

void expect_peer_name(SSL* ssl, const std::string& name) {
  auto* param = SSL_get0_param(ssl);
  if (X509_VERIFY_PARAM_set1_ip_asc(param, name.c_str()) == 1) return;
  ERR_clear_error();  // not an address: a host name
  SSL_set_tlsext_host_name(ssl, name.c_str());
  SSL_set_hostflags(ssl, san_only);
  SSL_set1_host(ssl, name.c_str());
}

bool peer_named(SSL* ssl, const std::vector<std::string>& names) {
  X509* cert = SSL_get1_peer_certificate(ssl);
  if (cert == nullptr) return false;
  bool found = false;
  for (auto& n : names)
    if (X509_check_ip_asc(cert, n.c_str(), 0) == 1 ||
        X509_check_host(cert, n.c_str(), n.size(), san_only, nullptr) == 1)
      found = true;
  X509_free(cert);
  return found;
}

std::string drain_errors() {
  std::string out;
  while (auto e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    if (!out.empty()) out += "; ";
    const char* reason = ERR_reason_error_string(e);
    out += reason != nullptr ? reason : buf;
  }
  return out.empty() ? "no detail from OpenSSL" : out;
}

proto::result<ctx_ptr> server_context(const server_files& files) {
  auto ctx = make(TLS_server_method());
  if (!ctx) return bad("cannot create a TLS context: " + drain_errors());
  if (auto err = load_identity(ctx.get(), files.cert_file, files.key_file)) return *err;
  if (!files.ca_file.empty()) {
    if (SSL_CTX_load_verify_locations(ctx.get(), files.ca_file.c_str(), nullptr) != 1)
      return bad("cannot load the CA " + files.ca_file + ": " + drain_errors());
    SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return ctx;
}

proto::result<ctx_ptr> client_context(const client_files& files) {
  auto ctx = make(TLS_client_method());
  if (!ctx) return bad("cannot create a TLS context: " + drain_errors());
  if (files.cert_file.empty() != files.key_file.empty())
    return bad("a client certificate and its key go together (cert_file and key_file)");
  if (!files.cert_file.empty())
    if (auto err = load_identity(ctx.get(), files.cert_file, files.key_file)) return *err;
  int ok = files.ca_file.empty()
               ? SSL_CTX_set_default_verify_paths(ctx.get())
               : SSL_CTX_load_verify_locations(ctx.get(), files.ca_file.c_str(), nullptr);
  if (ok != 1)
    return bad("cannot load the CA " + (files.ca_file.empty() ? "store" : files.ca_file) + ": " +
               drain_errors());
  SSL_CTX_set_verify(ctx.get(), SSL_VERIFY_PEER, nullptr);
  return ctx;
}

std::string failure(SSL* ssl, int ret, bool client_side) {
  long verify = SSL_get_verify_result(ssl);
  auto errors = drain_errors();
  if (verify != X509_V_OK)
    return std::string(client_side ? "the server's certificate was refused: "
                                   : "the client's certificate was refused: ") +
           X509_verify_cert_error_string(verify);
  if (errors.find("peer did not return a certificate") != std::string::npos)
    return "the client sent no certificate (this listener requires one: mutual TLS)";
  if (errors.find("alert") != std::string::npos &&
      errors.find("certificate required") == std::string::npos)
    return std::string(client_side ? "the server" : "the client") +
           " ended the TLS exchange: " + errors +
           (client_side ? "" : " (it does not trust this node's certificate, or the name in it)");
  if (errors.find("certificate required") != std::string::npos)
    return client_side ? "permission denied: the server requires a client certificate; add "
                         "cert_file and key_file"
                       : "the client sent no certificate (this listener requires one)";
  if (errors.find("wrong version number") != std::string::npos ||
      errors.find("packet length too long") != std::string::npos ||
      errors.find("http request") != std::string::npos)
    return client_side ? "the server does not speak TLS here (" + errors + ")"
                       : "the client does not speak TLS (" + errors + ")";
  int code = SSL_get_error(ssl, ret);
  if (code == SSL_ERROR_SYSCALL || code == SSL_ERROR_ZERO_RETURN)
    return "the connection was closed during the TLS exchange" +
           (errors == "no detail from OpenSSL" ? std::string{} : " (" + errors + ")");
  return errors;
}

proto::bytes exporter(SSL* ssl) {
  static constexpr char label[] = "EXPORTER-fusee-auth";
  proto::bytes out(32);
  if (SSL_export_keying_material(ssl, out.data(), out.size(), label, sizeof(label) - 1, nullptr, 0,
                                 0) != 1)
    out.clear();
  return out;
}

}  // namespace fusee::tls
