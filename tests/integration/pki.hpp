// Certificates made with the openssl CLI for the TLS tests (as docs/operations.md "Securing a
// node" makes them): a CA, node and client certificates, a stranger CA's, an expired one.
#pragma once

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <doctest/doctest.h>

#include "client/connection.hpp"
#include "server_process.hpp"

namespace fusee::test {

/// A CA, a node certificate for 127.0.0.1 and localhost, a client certificate, the same from a
/// second CA nobody trusts, an expired node certificate, and two that name a peer only in their
/// CN.
struct pki {
  temp_dir dir;
  std::filesystem::path at(const std::string& name) const { return dir.path() / name; }

  void openssl(std::vector<std::string> args) {
    args.insert(args.begin(), "/usr/bin/openssl");
    auto [rc, out] = run_process(args, at("openssl.log"), std::chrono::seconds(30));
    REQUIRE_MESSAGE(rc == 0, out);
  }
  void make_ca(const std::string& name) {
    openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", at(name + ".key"), "-out", at(name + ".pem"), "-days", "2", "-subj",
             "/CN=" + name});
  }
  /// Certificate `name` (its CN, unless `cn` is given) signed by `ca`, naming `san`.
  void make_cert(const std::string& name, const std::string& ca, const std::string& san,
                 const std::string& days = "2", const std::string& cn = "") {
    openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", at(name + ".key"), "-out", at(name + ".csr"), "-subj",
             "/CN=" + (cn.empty() ? name : cn)});
    std::ofstream{at(name + ".ext")} << "subjectAltName=" << san << "\n";
    openssl({"x509", "-req", "-in", at(name + ".csr"), "-CA", at(ca + ".pem"), "-CAkey",
             at(ca + ".key"), "-CAcreateserial", "-out", at(name + ".pem"), "-days", days,
             "-extfile", at(name + ".ext")});
  }
  pki() {
    make_ca("ca");
    make_ca("rogue-ca");
    make_cert("node", "ca", "IP:127.0.0.1,IP:127.0.0.2,IP:127.0.0.3,DNS:localhost");
    make_cert("client", "ca", "DNS:worker-1");
    make_cert("rogue", "rogue-ca", "DNS:worker-2");
    make_cert("rogue-node", "rogue-ca", "IP:127.0.0.1");
    make_cert("expired", "ca", "IP:127.0.0.1", "0");  // not after = now: expired a second later
    // Names only in their subject's CN (no DNS name among their subjectAltNames, where OpenSSL
    // would fall back to the CN): a host name, and a cluster node's address.
    make_cert("cn-host", "ca", "email:cn-host@example.com", "2", "fusee-node");
    make_cert("cn-ip", "ca", "email:cn-ip@example.com", "2", "127.0.0.1");
  }
  /// [tls] with `cert` (and, when `mutual`, client certificates signed by `ca` required).
  std::string tls_toml(const std::string& cert, bool mutual, const std::string& ca = "ca") const {
    return "[tls]\ncert_file = \"" + at(cert + ".pem").string() + "\"\nkey_file = \"" +
           at(cert + ".key").string() + "\"\n" +
           (mutual ? "ca_file = \"" + at(ca + ".pem").string() + "\"\n" : "");
  }
  client::security client(const std::string& name = "client", const std::string& ca = "ca") const {
    client::security s;
    s.tls.ca_file = at(ca + ".pem");
    if (!name.empty()) {
      s.tls.cert_file = at(name + ".pem");
      s.tls.key_file = at(name + ".key");
    }
    return s;
  }
};

}  // namespace fusee::test
