#pragma once
// The JSON of etcd's v3 HTTP gateway (/v3/kv/*, /v3/lease/*): request bodies and response parsing, with
// no I/O, so every shape etcd answers with is unit-tested (tests/unit/cluster/etcd_codec_test.cc). Keys
// and values travel base64-encoded; 64-bit integers arrive as JSON strings and fields that hold their
// default value (0, false, empty) are left out, as the gateway's protobuf-to-JSON mapping does.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"

namespace fjord::cluster {

// One key of a range answer.
struct etcd_kv {
    std::string key;
    std::string value;
    std::int64_t create_revision = 0;
    std::int64_t mod_revision = 0;
    std::int64_t version = 0;
    std::int64_t lease = 0;
};

struct range_result {
    std::int64_t revision = 0;  // the store's revision when it answered
    std::vector<etcd_kv> kvs;
    std::int64_t count = 0;  // keys in the range, even when `limit` cut `kvs`
    bool more = false;
};

struct lease_grant {
    std::int64_t id = 0;
    std::int64_t ttl_s = 0;
};

// A comparison of a transaction: the key's create or mod revision equals a number (0: the key is absent).
struct txn_compare {
    enum class target { create, mod };
    target what = target::create;
    std::string key;
    std::int64_t revision = 0;
};

struct txn_put {
    std::string key;
    std::string value;
    std::int64_t lease = 0;  // 0: no lease
};

// If every compare holds: the puts and deletes (single keys); otherwise a range of `read_on_failure`.
struct txn_request {
    std::vector<txn_compare> compares;
    std::vector<txn_put> puts;
    std::vector<std::string> deletes;
    std::string read_on_failure;  // empty: nothing read when the compares fail
};

struct txn_result {
    std::int64_t revision = 0;
    bool succeeded = false;
    std::vector<etcd_kv> read;  // the failure branch's range
};

// One event of a watch: the key's new value (kv.value, kv.lease) or its deletion (the key and the
// revision of the deletion only).
struct watch_event {
    etcd_kv kv;
    bool deleted = false;
};

// One message of a watch's stream (/v3/watch answers newline-separated {"result": {...}} objects).
struct watch_message {
    std::int64_t revision = 0;  // the store's revision when it was sent
    bool created = false;       // the answer to the create request
    bool canceled = false;      // etcd ended the watch (compacted past its start, or an error)
    std::int64_t compact_revision = 0;  // canceled because compacted: the oldest revision kept
    std::string cancel_reason;
    // The changes, in order; etcd never splits one revision's events over two messages.
    std::vector<watch_event> events;
    std::int64_t last_mod_revision = 0;  // the newest of the events' revisions (0: no events)
};

// The first key after every key that starts with `prefix` (etcd's range_end for a prefix scan).
std::string prefix_end(std::string_view prefix);

// `revision` > 0 reads the store as it was at that revision (the pages of one consistent read).
std::string range_body(std::string_view key, std::string_view range_end, std::int64_t limit,
                       std::int64_t revision = 0);
std::string put_body(std::string_view key, std::string_view value, std::int64_t lease);
std::string delete_range_body(std::string_view key, std::string_view range_end);
std::string lease_grant_body(std::int64_t ttl_s);
std::string lease_id_body(std::int64_t lease);  // keepalive and revoke
std::string txn_body(const txn_request& txn);
// A watch of [key, range_end) from `start_revision` (0: from now).
std::string watch_create_body(std::string_view key, std::string_view range_end,
                              std::int64_t start_revision);

// Responses. A body that is not the JSON expected is bad_request with what was wrong.
base::result<range_result> parse_range(std::string_view json);
base::result<std::int64_t> parse_revision(std::string_view json);  // put: the new revision
base::result<std::int64_t> parse_deleted(std::string_view json);   // deleterange: keys deleted
base::result<lease_grant> parse_lease_grant(std::string_view json);
// keepalive: the lease's remaining TTL; 0 when the lease no longer exists (expired or revoked).
base::result<std::int64_t> parse_keepalive(std::string_view json);
base::result<txn_result> parse_txn(std::string_view json);
base::result<watch_message> parse_watch_message(std::string_view json);

// The error a non-200 gateway answer stands for: its gRPC code mapped onto the error table (NotFound:
// not_found; Unavailable and DeadlineExceeded: service_unavailable, timed_out; others: internal), with
// etcd's message in the text.
base::error gateway_error(int http_status, std::string_view json);

}  // namespace fjord::cluster
