#pragma once
// A client of etcd's v3 API through its HTTP/JSON gateway, on the core's io_uring runtime.
//
// Why the gateway and not gRPC: it is the same v3 API on the same client port, over HTTP/1.1 that the
// runtime already speaks (src/client/connection.h), with no gRPC or protobuf build; membership traffic
// is a few small calls a second per node, where JSON costs nothing that matters.
//
// Every call has a deadline (`call_timeout_ms` for connect, send and the whole answer together); a call
// that fails for any reason closes the connection, and the next call opens a fresh one. Calls are not
// retried here: the caller (membership.h) decides what a failure means.
//
// Lifecycle: owned by one core and used from it only (not thread-safe); calls from several coroutines
// of the core wait their turn (one at a time on the connection).
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "base/result.h"
#include "client/connection.h"
#include "cluster/etcd_codec.h"
#include "http/chunked.h"
#include "io/semaphore.h"
#include "io/socket.h"
#include "io/task.h"

namespace fjord::cluster {

struct etcd_options {
    io::endpoint where{"127.0.0.1", 2379};
    std::int64_t call_timeout_ms = 2000;  // deadline of one call, connect included
    std::size_t max_response_bytes =
        4 * 1024 * 1024;  // a longer answer fails with entity_too_large
};

// "http://HOST:PORT" (IP literal or localhost; no https yet) into an endpoint.
base::result<io::endpoint> parse_etcd_url(std::string_view url);

class etcd_client {
public:
    explicit etcd_client(etcd_options options);

    // Keys in [key, range_end) (just `key` when range_end is empty), at most `limit` (0: all), as the
    // store is now or (`revision` > 0) was at that revision.
    io::task<base::result<range_result>> range(std::string key, std::string range_end = {},
                                               std::int64_t limit = 0, std::int64_t revision = 0);
    // Every key under `prefix`, read in pages of one revision: no answer is larger than
    // max_response_bytes however much the prefix holds (a page too large is asked for again in
    // halves, down to one key; the size is remembered and grows back). At most max_prefix_pages.
    io::task<base::result<range_result>> range_prefix(std::string prefix);
    static constexpr std::int64_t prefix_page_keys = 256;
    static constexpr std::size_t max_prefix_pages = 100'000;
    // The new revision.
    io::task<base::result<std::int64_t>> put(std::string key, std::string value,
                                             std::int64_t lease = 0);
    io::task<base::result<std::int64_t>> remove(std::string key);  // keys deleted (0 or 1)
    io::task<base::result<txn_result>> txn(txn_request request);

    io::task<base::result<lease_grant>> grant_lease(std::int64_t ttl_s);
    // The lease's remaining TTL, 0 when it no longer exists.
    io::task<base::result<std::int64_t>> keep_alive(std::int64_t lease);
    io::task<base::result<void>> revoke_lease(std::int64_t lease);

    // A watch of [key, range_end) from `start_revision`, holding this client's connection (give a
    // watch a client of its own). open_watch sends the request and reads the answer's head;
    // next_watch_message returns the stream's next message, or fails, closing the watch (timed_out
    // when none came within `timeout_ms`: open another from the next revision wanted).
    io::task<base::result<void>> open_watch(std::string key, std::string range_end,
                                            std::int64_t start_revision);
    io::task<base::result<watch_message>> next_watch_message(std::int64_t timeout_ms);
    void close_watch();

    const etcd_options& options() const { return _options; }

private:
    // POSTs `body` to `path` and returns the answer's body; a non-200 answer is gateway_error.
    io::task<base::result<std::string>> call(std::string_view path, std::string body);
    io::task<base::result<std::string>> exchange(std::string_view path, const std::string& body,
                                                 std::int64_t deadline_ms);
    io::task<base::result<std::string>> read_answer(std::int64_t deadline_ms);
    io::task<base::result<void>> send_request(std::string_view path, const std::string& body,
                                              std::int64_t deadline_ms);
    io::task<base::result<void>> watch_head(std::int64_t deadline_ms);
    // Receives more bytes into _buffer; false once the deadline passed.
    io::task<base::result<void>> receive_more(std::int64_t deadline_ms);

    etcd_options _options;
    client::connection _connection;
    std::string _buffer;  // bytes received and not yet used
    // One call at a time on the connection: several requests of a core may ask etcd at once (a
    // bucket this core does not know, a CreateBucket), and their bytes must not interleave.
    io::semaphore _calls{1};
    std::int64_t _page_keys = prefix_page_keys;        // range_prefix's page size (see there)
    std::optional<http::chunked_decoder> _watch_body;  // set while a watch is open
    std::string _watch_text;  // the watch's decoded bytes not yet a whole message
};

}  // namespace fjord::cluster
