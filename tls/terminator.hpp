// Ends TLS for a listener on a thread of its own: it takes accepted TCP sockets, runs each TLS
// 1.3 handshake, and hands on one end of a socketpair per connection, so the code behind it
// (a session broker, libmicrohttpd) reads and writes plaintext as it always did. Bytes are moved
// both ways with at most one read (16 KiB) held per direction: a side that stops reading stops
// the other. Without a TLS context it only relays plain TCP, with the same bounds: the front of
// a listener CAF serves itself (the inspector's).
// Threading: add() may be called from any thread; `deliver` runs on the terminator's thread,
// `dropped` there too, or in add() for a connection it refuses.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "logging/warning_limiter.hpp"
#include "tls/context.hpp"

namespace fusee::tls {

/// A connection whose handshake completed.
struct handed_over {
  int fd = -1;           ///< the plaintext end, nonblocking; its owner closes it
  std::string peer;      ///< host:port of the TLS peer
  std::string peer_ip;   ///< its address alone
  proto::bytes binding;  ///< exporter(), for token proofs
};

/// `ip` (a numeric address) with an IPv4-mapped IPv6 address (::ffff:a.b.c.d) as plain IPv4.
std::string unmapped(const std::string& ip);

class terminator {
public:
  struct options {
    /// Inbound TLS; null: no TLS, the bytes are relayed as they are (a connection is open, and
    /// its plaintext side made, as soon as the thread takes it; `handed_over::binding` empty).
    /// Relayed, a connection is "in its handshake" until its peer's first byte: it counts under
    /// max_per_peer and is closed after handshake_timeout_ms until then.
    ctx_ptr ctx;
    uint32_t handshake_timeout_ms = 10000;
    /// A TLS peer that takes none of the bytes waiting for it this long is closed: it would
    /// otherwise hold its place, and the plaintext side (which may have closed meanwhile), for
    /// ever. libmicrohttpd's own idle time-out is as long.
    uint32_t stalled_peer_ms = 30000;
    /// Sent, in plaintext, to a peer whose first byte is not a TLS record (then closed): e.g.
    /// an ERR frame or an HTTP 400 saying that this listener speaks TLS.
    std::string plaintext_answer;
    std::function<void(handed_over)> deliver;
    /// Instead of a socketpair (and `deliver`): the plaintext side is a connection this opens
    /// (e.g. to a loopback port where CAF's middleman listens); -1 (and why) drops the
    /// connection.
    std::function<int(std::string* why)> open_plain;
    /// For add_outbound(): this side's certificate and the CA that signs the far side's.
    ctx_ptr client_ctx;
    /// Inbound: the client's certificate must also name one of these (IP addresses or host
    /// names); empty: any certificate the CA signed will do.
    std::vector<std::string> peer_names;
    /// A connection given to add() that will never be delivered (failed, timed out, closed).
    std::function<void(const std::string& peer_ip)> dropped;
    std::string what;  ///< names the listener in logs ("workers", "HTTP API", "admin")
    /// Inbound connections open at once (in their handshake or handed over); more (or more than
    /// max_per_peer) are closed as they come, said once a minute, counted in refused() and told
    /// to `dropped`. 0: no limit (the owner admits them itself, as the worker listener does).
    uint32_t max_connections = 0;
    /// Names the limit in the warning when it is reached ("limits.max_http_connections").
    std::string limit_name;
    /// Inbound handshakes going on at once from one address (a stranger's may not take every
    /// place; nodes behind one address link after theirs); 0: no limit.
    uint32_t max_per_peer = 0;
    /// Known peers (a cluster's nodes), filled by add_known(): connections from their addresses
    /// (IP literals) have places of their own, not counted under max_connections, so strangers
    /// who fill theirs leave these alone, and one peer cannot take another's.
    std::unordered_map<std::string, uint32_t> known_peers;  ///< address -> index of its places
    std::vector<uint32_t> known_places;                     ///< places by that index
    /// Adds a peer at `addresses` (IPv4-mapped IPv6 ones as IPv4) with `places` of its own;
    /// peers that share an address (nodes on one host) share their places, added together.
    void add_known(const std::vector<std::string>& addresses, uint32_t places);
    std::string known_limit_name;  ///< names the known peers' places in the warning
  };

  static std::unique_ptr<terminator> start(options o);
  ~terminator();

  /// Takes an accepted TCP socket (any mode; made nonblocking) from `peer`; closes it at once
  /// when max_connections are open. A TLS peer that takes none of the bytes waiting for it for
  /// stalled_peer_ms is closed.
  void add(int fd, std::string peer, std::string peer_ip);
  /// Takes a TCP socket connected to `peer` and the plaintext socket whose bytes go there: this
  /// side runs the client's handshake (client_ctx), checking `server_name` in its certificate.
  void add_outbound(int tcp, int plain, std::string peer, std::string server_name);

  /// The known peer whose places connections from `ip` take (an index of options::known_places).
  std::optional<uint32_t> peer_of(const std::string& ip) const;
  /// Known peers' addresses after start (a host that resolves anew): from here on connections
  /// from each of `addresses` take the places of `peer`, which is set to a new peer with `places`
  /// if it has none (its host did not resolve at start). An address another peer had moves.
  /// Returns the addresses that were not `peer`'s before.
  std::vector<std::string> assign(const std::vector<std::string>& addresses,
                                  std::optional<uint32_t>& peer, uint32_t places);
  /// Known peers' addresses no longer theirs (a host that stopped resolving to them): new
  /// connections from there are strangers' (one open already keeps its place until it ends).
  /// Returns the addresses forgotten.
  std::vector<std::string> forget(const std::vector<std::string>& gone);
  /// Whether connections from `ip` count in a known peer's places.
  bool knows(const std::string& ip) const;

  uint64_t handshakes() const { return handshakes_.load(); }
  uint64_t failures() const { return failures_.load(); }    ///< handshakes that failed
  uint64_t timeouts() const { return timeouts_.load(); }    ///< handshakes cut by the timeout
  uint64_t plaintext() const { return plaintext_.load(); }  ///< peers that did not speak TLS
  uint64_t refused() const { return refused_.load(); }  ///< closed for max_connections/_per_peer
  uint64_t stalled() const { return stalled_.load(); }  ///< closed by stalled_peer_ms

  struct conn;

private:
  terminator() = default;
  void run();
  void pump(conn& c);
  /// Moves `c`'s TLS handshake on (the first byte checked first): true once it is done and the
  /// peer accepted; false while it goes on or after it failed (then `c` ends or drains).
  bool handshake(conn& c);
  /// Hands `c` to the thread (stamped with the time it arrived).
  void enqueue(std::unique_ptr<conn> c);
  void drop(conn& c, bool delivered);
  /// `c`'s handshake is over (done or not): its place under max_per_peer frees.
  void handshake_ended(conn& c);
  /// The place of a connection from `peer_ip`, if one is free: `known` is set to the index of
  /// its known peer (-1: a stranger) and `places` to that peer's number of places.
  bool take_place(const std::string& peer_ip, int& known, uint32_t& places);
  void give_place(int known);
  /// Logs `line` as a warning unless the same `key` was logged in the last minute.
  void say(const std::string& key, const std::string& line);

  options o_;
  int epoll_ = -1, wake_ = -1;
  std::thread thread_;
  std::mutex mu_;
  std::vector<std::unique_ptr<conn>> incoming_;
  bool stopping_ = false;
  std::atomic<uint64_t> handshakes_{0}, failures_{0}, timeouts_{0}, plaintext_{0}, refused_{0};
  std::atomic<uint32_t> inbound_{0};  ///< strangers' connections add()ed and not yet dropped
  std::atomic<uint64_t> stalled_{0};
  /// Guards per_peer_, known_open_ and o_.known_peers / known_places (assign() and forget() change
  /// them).
  mutable std::mutex per_peer_mu_;
  std::unordered_map<std::string, uint32_t> per_peer_;  ///< with max_per_peer: held per address
  std::vector<uint32_t> known_open_;                    ///< by the index of options::known_places
  server::logging::warning_limiter said_{1000};         ///< say()'s (add() says too, on its thread)
};

}  // namespace fusee::tls
