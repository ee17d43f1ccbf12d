#pragma once
// The inter-node data plane's client side: HTTP/1.1 requests to a peer node's RPC endpoints
// (rpc.h), signed with SigV4 by the cluster's root credentials, on the core's io_uring.
//
// A peer_link is one keep-alive connection that carries one request at a time: a small call (whole
// body out, small answer back), an upload (head, then chunks of the body as they are produced, then a
// final frame and the answer), or a download (head and answer first, then the body read in exact
// pieces). Bodies are sent from the caller's memory and received into it. A link that fails, or is
// left in the middle of a message, is closed, and the next request opens a new connection.
//
// A peer_pool keeps a bounded number of links to one node (max_links), hands out the most recently
// used idle one, and makes later callers wait in arrival order when all are busy.
//
// Threading: links and pools belong to one core and are used by one coroutine at a time.
#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "auth/sigv4.h"
#include "base/result.h"
#include "client/connection.h"
#include "io/pool_lease.h"
#include "io/semaphore.h"
#include "io/socket.h"
#include "io/task.h"

namespace fjord::cluster {

// How a link reaches its peer: one connection at a time, every operation bounded by the I/O timeout.
// The data plane's own is a TCP connection on the core's io_uring (client::connection); the
// deterministic simulation (tests/sim/cluster_sim.cc) gives one over its simulated network.
class peer_transport {
public:
    virtual ~peer_transport() = default;
    virtual bool is_open() const = 0;
    virtual io::task<base::result<void>> connect() = 0;
    virtual io::task<base::result<void>> send_all(std::span<iovec> parts) = 0;
    virtual io::task<base::result<std::size_t>> receive_some(std::byte* dst, std::size_t max) = 0;
    virtual io::task<base::result<void>> receive_exact(std::byte* dst, std::size_t len) = 0;
    virtual void set_io_timeout_ms(std::int64_t timeout_ms) = 0;
    virtual void close() = 0;
};
using transport_maker = std::function<std::unique_ptr<peer_transport>(const io::endpoint& where)>;

struct peer_options {
    auth::credentials credentials;  // the cluster's root key pair, the same on every node
    std::string region = "us-east-1";
    std::int64_t connect_timeout_ms = 1'000;  // a node that does not accept in this time is down
    std::int64_t io_timeout_ms = 10'000;      // any one send or receive
    std::size_t max_links = 32;               // connections per peer and core
    std::int64_t idle_reopen_ms = 20'000;     // an idle connection older than this is reopened
    std::size_t max_answer_bytes = 16 * 1024 * 1024;  // the largest small answer accepted
    transport_maker transport;                        // empty: TCP
};

using header_list = std::vector<std::pair<std::string, std::string>>;

struct peer_answer {
    int status = 0;
    std::uint64_t content_length = 0;
    header_list headers;  // the x-fjord-* headers, names lower-case
    std::string body;     // a small answer's body (a call's, an upload's, or any non-2xx one)
    std::string_view header(std::string_view name) const;
    bool ok() const { return status >= 200 && status < 300; }
};

class peer_link {
public:
    peer_link(io::endpoint where, const peer_options& options);
    peer_link(const peer_link&) = delete;
    peer_link& operator=(const peer_link&) = delete;

    // A request with a whole body (maybe empty) and a small answer.
    io::task<base::result<peer_answer>> call(std::string_view method, std::string path,
                                             std::string query, header_list headers,
                                             std::string_view body);
    // An upload: the head (Transfer-Encoding: chunked), then send_chunk() any number of times, then
    // finish() with the last bytes of the body, which reads the answer.
    io::task<base::result<void>> begin_upload(std::string_view method, std::string path,
                                              std::string query, header_list headers);
    io::task<base::result<void>> send_chunk(std::span<iovec> parts);
    io::task<base::result<peer_answer>> finish(std::string_view last_bytes);
    // A download: the answer's head; on a 2xx answer, read its body with read_exact() (all of it,
    // else the link closes when it goes back to its pool); other answers come with their body read.
    io::task<base::result<peer_answer>> begin_download(std::string path, std::string query,
                                                       header_list headers);
    io::task<base::result<void>> read_exact(std::byte* dst, std::size_t len);
    std::uint64_t body_left() const { return _body_left; }

    // Open and between messages: may carry another request.
    bool reusable() const { return _connection->is_open() && _between_messages; }
    void close();
    std::int64_t last_used_ns() const { return _last_used_ns; }
    const io::endpoint& where() const { return _where; }

private:
    std::string format_head(std::string_view method, const std::string& path,
                            const std::string& query, const header_list& headers,
                            std::string_view framing) const;
    io::task<base::result<void>> open_for(bool& fresh);
    io::task<base::result<peer_answer>> read_answer(bool keep_body);
    io::task<base::result<void>> read_small_body(peer_answer& answer, std::uint64_t length);

    io::endpoint _where;
    const peer_options& _options;
    std::string _host;
    std::unique_ptr<peer_transport> _connection;
    std::string _buffer;  // received bytes not yet consumed (the head, then the body's start)
    std::uint64_t _body_left = 0;
    bool _between_messages = true;
    bool _close_after_body = false;  // the answer came with Connection: close
    std::int64_t _last_used_ns = 0;
};

class peer_pool {
public:
    // Returns its link to the pool when reset or destroyed.
    using lease = io::pool_lease<peer_pool, peer_link>;

    peer_pool(io::endpoint where, const peer_options& options);
    ~peer_pool();
    peer_pool(const peer_pool&) = delete;
    peer_pool& operator=(const peer_pool&) = delete;
    io::task<lease> acquire();
    const io::endpoint& where() const { return _where; }

private:
    friend lease;
    void release(peer_link* link);
    io::endpoint _where;
    const peer_options& _options;
    io::semaphore _slots;
    std::vector<std::unique_ptr<peer_link>> _links;
    std::vector<peer_link*> _idle;  // LIFO
};

// "host:port" of an "http://host:port" endpoint; fails for anything else (the data plane speaks
// plain HTTP between nodes for now).
base::result<io::endpoint> peer_endpoint(std::string_view url);

}  // namespace fjord::cluster
