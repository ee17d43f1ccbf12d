#pragma once

// TLS without I/O of its own (OpenSSL underneath). A session turns ciphertext the caller received into
// plaintext, and plaintext into ciphertext the caller sends; the caller owns every socket operation, so
// the server's io_uring connection loop, the simulation and the client drive the same code.
//
//   session s = ...;                      // server side: session::accept; client side: session::connect
//   s.handshake()                         // until it says done; between calls:
//   send(s.output()), s.output_sent(n)    //   whatever it produced, then
//   receive into s.input_space(), s.input_added(n)   // when it needs more
//   s.read(dst, max) / s.write(src, len)  // the same pattern for application bytes
//
// Ciphertext goes straight from the kernel into the session's input buffer and straight out of its
// output buffer (a BIO of our own over both, not a memory BIO that would copy once more).
//
// Threading: a context is immutable once built and may be shared by every core; a session belongs to one
// core. server_credentials is thread-safe (reload from the signal thread, current() from any core).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"

struct ssl_ctx_st;
struct ssl_st;
struct bio_st;

namespace fjord::tls {

// An OpenSSL SSL_CTX: TLS 1.2 and 1.3 only.
class context {
public:
    // A server's certificate chain (PEM, leaf first) and private key (PEM).
    static base::result<std::shared_ptr<context>> server(const std::string& cert_path,
                                                         const std::string& key_path);
    // A client's: peers are verified against the CA certificates in ca_path (PEM), or against the
    // system's store when ca_path is empty; verify = false accepts any certificate (tests only).
    static base::result<std::shared_ptr<context>> client(const std::string& ca_path, bool verify);
    ~context();
    context(const context&) = delete;
    context& operator=(const context&) = delete;
    ssl_ctx_st* native() const { return _ctx; }
    bool is_server() const { return _server; }

private:
    context(ssl_ctx_st* ctx, bool server) : _ctx(ctx), _server(server) {}
    ssl_ctx_st* _ctx;
    bool _server;
};

// The server's current context, rebuilt from its files by reload() (SIGHUP). Connections accepted
// after a reload use the new certificate; those already open keep the one they started with.
class server_credentials {
public:
    static base::result<std::unique_ptr<server_credentials>> load(std::string cert_path,
                                                                  std::string key_path);
    // Reads the files again; on failure the current context stays and the error is returned.
    base::result<void> reload();
    std::shared_ptr<context> current() const;
    const std::string& cert_path() const { return _cert_path; }

private:
    server_credentials(std::string cert, std::string key)
        : _cert_path(std::move(cert)), _key_path(std::move(key)) {}
    std::string _cert_path;
    std::string _key_path;
    mutable std::mutex _mutex;
    std::shared_ptr<context> _current;
};

class session {
public:
    static base::result<std::unique_ptr<session>> accept(std::shared_ptr<context> ctx);
    // host_name is sent as SNI and checked against the certificate (an IP literal is checked as one).
    static base::result<std::unique_ptr<session>> connect(std::shared_ptr<context> ctx,
                                                          const std::string& host_name);
    ~session();
    session(const session&) = delete;
    session& operator=(const session&) = delete;

    // Advances the handshake: true once it is complete, false while it needs more input (send output()
    // first: the peer may be waiting for it). A failure is final.
    base::result<bool> handshake();
    bool handshake_done() const { return _handshake_done; }

    // Plaintext into dst: bytes produced, or 0 when more input is needed (or the peer closed: see
    // peer_closed()). Reads as many records as the input holds, up to max.
    base::result<std::size_t> read(std::byte* dst, std::size_t max);
    // Encrypts up to len bytes of src into output(); returns how many it took (all of them, up to an
    // internal bound per call, so the output stays bounded).
    base::result<std::size_t> write(const std::byte* src, std::size_t len);
    // Queues a close_notify alert in output().
    void close_notify();
    bool peer_closed() const { return _peer_closed; }

    // Ciphertext to send, and how much of it went.
    std::span<const std::byte> output() const {
        return {_out.data() + _out_start, _out.size() - _out_start};
    }
    void output_sent(std::size_t n);
    // Gives back the buffers' memory while nothing is pending in them (a connection between requests
    // keeps neither a large response's records nor its input buffer).
    void shrink();
    // Room for received ciphertext (small while the connection is idle, 64 KiB once receives fill it),
    // and how much arrived there.
    std::span<std::byte> input_space();
    void input_added(std::size_t n) {
        _in_end += n;
        _last_receive_filled = n == _offered;
    }
    // "TLSv1.3 TLS_AES_128_GCM_SHA256", for logs and tests.
    std::string description() const;

    static constexpr std::size_t max_plaintext_per_write = 256 * 1024;

private:
    explicit session(std::shared_ptr<context> ctx) : _ctx(std::move(ctx)) {}
    base::result<std::unique_ptr<session>> static make(std::shared_ptr<context> ctx);
    friend struct bio_glue;
    std::shared_ptr<context> _ctx;
    ssl_st* _ssl = nullptr;
    std::vector<std::byte> _in;
    std::size_t _in_start = 0;
    std::size_t _in_end = 0;
    std::size_t _offered = 0;           // the size of the last input_space()
    bool _last_receive_filled = false;  // it was filled: the peer sends in bulk
    std::vector<std::byte> _out;
    std::size_t _out_start = 0;
    bool _handshake_done = false;
    bool _peer_closed = false;
};

// The OpenSSL error queue as text (and cleared), for messages.
std::string take_errors();

}  // namespace fjord::tls
