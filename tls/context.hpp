// TLS 1.3 contexts from certificate, key and CA files, and the pieces both sides share: readable
// errors and the exporter value token proofs are bound to. OpenSSL only, no CAF, no sockets.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <openssl/ssl.h>

#include "protocol/result.hpp"
#include "protocol/wire.hpp"

namespace fusee::tls {

/// A listener's files: its certificate chain and key, and a CA that, when given, requires and
/// checks client certificates (mutual TLS).
struct server_files {
  std::string cert_file, key_file, ca_file;
  bool enabled() const { return !cert_file.empty(); }
};

/// A connecting side's files: the CA that signs the listener's certificate (empty: the system's
/// store), its own certificate and key for mutual TLS, and the name to check in the listener's
/// certificate (empty: the host it dialled).
struct client_files {
  std::string ca_file, cert_file, key_file, server_name;
  bool enabled() const { return !ca_file.empty() || !cert_file.empty(); }
};

using ctx_ptr = std::shared_ptr<SSL_CTX>;

/// TLS 1.3 only, no session tickets. Errors name the file and say what is wrong with it.
proto::result<ctx_ptr> server_context(const server_files& files);
proto::result<ctx_ptr> client_context(const client_files& files);

/// Makes the handshake on `ssl` (a client's) check that the far side's certificate names
/// `name`: an IP address (iPAddress) or a host name (dNSName, also sent as SNI). Here and in
/// peer_named() only subjectAltNames count, never the subject's CN (OpenSSL's fallback for a
/// certificate without DNS names), so a name in a CN does not make a peer.
void expect_peer_name(SSL* ssl, const std::string& name);

/// True if the certificate the far side showed on `ssl` names any of `names` (IP addresses or
/// host names): how a node tells a peer node from another holder of the same CA's certificate.
bool peer_named(SSL* ssl, const std::vector<std::string>& names);

/// The OpenSSL error queue as one line (and empties it).
std::string drain_errors();

/// Why a handshake or read/write on `ssl` failed, for a person: certificate problems first
/// ("the server's certificate: certificate has expired"), then the alert or library reason.
std::string failure(SSL* ssl, int ret, bool client_side);

/// The TLS exporter value (RFC 8446 §7.5, label "EXPORTER-fusee-auth", 32 bytes) that token
/// proofs are bound to: equal on both ends of one TLS session, unknown anywhere else.
proto::bytes exporter(SSL* ssl);

}  // namespace fusee::tls
