#pragma once

// A minimal S3 client on the io_uring runtime: one keep-alive HTTP/1.1 connection, requests signed
// with SigV4 (auth::sign_authorization, the signer the server verifies with) and UNSIGNED-PAYLOAD, so
// the body is never hashed. PUT sends the caller's buffer as it is (one gathered sendmsg of head and
// body, no copy in user space); GET receives the body into the caller's buffer (the head goes to a
// small buffer, and only the body bytes that arrived with it are copied out of it).
//
// Lifecycle and threading: owned by one core and used by one coroutine at a time (one request in
// flight; no pipelining). The connection opens on the first request and is re-opened after the server
// closes it or after any error. A request on a reused connection that fails before any response byte
// arrived is retried once on a new connection (the server may have closed it while idle). Every other
// retry (backoff, deadlines) belongs to object_client, which pools s3_clients; last_status() tells it
// whether a failure came with an HTTP status.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <sys/uio.h>
#include <string>
#include <vector>

#include "base/result.h"
#include "client/connection.h"
#include "client/response.h"
#include "io/task.h"
#include "auth/sigv4.h"

namespace fjord::client {

struct client_options {
    io::endpoint endpoint;  // 127.0.0.1:9000 by default
    auth::credentials credentials;
    std::string region = "us-east-1";
    std::int64_t io_timeout_ms = 60'000;        // per connect / send / receive operation
    std::size_t head_buffer_bytes = 16 * 1024;  // also the longest response head accepted
    std::size_t max_error_body_bytes = 64 * 1024;
    int socket_buffer_bytes = 0;        // 0 keeps the kernel's autotuning
    std::shared_ptr<tls::context> tls;  // set: https (a client context); null: plain http
};

struct put_result {
    std::string etag;  // without quotes
};

struct get_result {
    std::uint64_t size_bytes = 0;  // bytes received into the destination
    std::uint64_t object_size_bytes =
        0;  // the whole object's size (from Content-Range for a range)
    std::string etag;
};

// How a PUT or UploadPart body travels.
struct put_options {
    // false: UNSIGNED-PAYLOAD, the body as it is. true: STREAMING-UNSIGNED-PAYLOAD-TRAILER, the body in
    // aws-chunked framing (one chunk) followed by an x-amz-checksum-crc32c trailer, so the server checks
    // a CRC32C of every byte it stores (end-to-end integrity at the cost of a CRC, not a SHA-256).
    bool crc32c_trailer = false;
    // The same framing with an x-amz-checksum-crc64nvme trailer instead (the SDKs' multipart default).
    bool crc64nvme_trailer = false;
    // An If-None-Match header for a PUT ("*": only if the key does not exist; precondition_failed,
    // 412, otherwise). Ignored for parts. A retry after a lost response can see its own write and
    // fail with 412: callers of a conditional PUT treat 412 after a retry as "maybe ours". A 409
    // ConditionalRequestConflict (a cluster's write crossed another and did not happen) is retried.
    std::string if_none_match;
    // The body's CRC32C as the caller computed it (base64 of the big-endian value): sent as
    // x-amz-checksum-crc32c, which the server verifies before it stores anything (bad_digest, 400,
    // otherwise) and keeps with the object. A single PUT only; it replaces the trailer.
    std::string checksum_crc32c;
};

struct completed_part {
    unsigned part_number = 0;  // 1..10000
    std::string etag;          // without quotes
};

struct head_result {
    std::uint64_t size_bytes = 0;
    std::string etag;
};

struct bucket_entry {
    std::string name;
    std::string creation_date;  // ISO 8601, as the server sent it
};

struct object_entry {
    std::string key;
    std::uint64_t size_bytes = 0;
    std::string etag;           // without quotes
    std::string last_modified;  // ISO 8601, as the server sent it
};

// What one ListObjectsV2 request asks for.
struct list_request {
    std::string prefix;
    std::string delimiter;           // empty: no grouping into common prefixes
    std::string continuation_token;  // empty: the first page
    unsigned max_keys = 1000;        // 1..1000
};

// One page of ListObjectsV2.
struct list_page {
    std::vector<object_entry> objects;
    std::vector<std::string> common_prefixes;
    bool truncated = false;
    std::string next_continuation_token;  // set when truncated
};

// A key DeleteObjects could not delete.
struct delete_failure {
    std::string key;
    std::string code;
    std::string message;
};

// The body of a 2xx response, read in order by a consumer (the KV batch API's results): bytes that came
// with the response head first, then the connection.
class response_stream {
public:
    io::task<base::result<void>> read_exact(std::byte* dst, std::size_t len);
    io::task<base::result<void>> skip(std::uint64_t len);
    std::uint64_t remaining_bytes() const { return _remaining; }

private:
    friend class s3_client;
    response_stream(connection& conn, const std::byte* prefix, std::size_t prefix_bytes,
                    std::uint64_t body_bytes)
        : _conn(conn), _prefix(prefix), _prefix_bytes(prefix_bytes), _remaining(body_bytes) {}
    connection& _conn;
    const std::byte* _prefix;
    std::size_t _prefix_bytes;
    std::uint64_t _remaining;
};
using response_consumer = std::function<io::task<base::result<void>>(response_stream&)>;

// A KV bucket's options (x-fjord-kv-* headers of CreateBucket, docs/kv.md).
struct kv_bucket_request {
    std::uint64_t capacity_bytes = 0;  // 0: the server's default
    std::uint64_t ttl_seconds = 0;     // 0: none
    bool ack_from_dram = false;        // false: acknowledged once on NVMe
};

class s3_client {
public:
    explicit s3_client(client_options options);
    s3_client(const s3_client&) = delete;
    s3_client& operator=(const s3_client&) = delete;

    // Succeeds when the bucket exists afterwards, including when this account already owned it.
    io::task<base::result<void>> create_bucket(std::string bucket);
    // CreateBucket of a KV bucket; BucketAlreadyOwnedByYou is an error here (its options may differ).
    io::task<base::result<void>> create_kv_bucket(std::string bucket, kv_bucket_request options);
    // One KV batch request (POST /bucket?fjord-batch=op) with a body gathered from `body`, whose first
    // part is the frame's header and table (signed: base/kv_wire.h); a 2xx response body goes to
    // `consume`, which must read all of it.
    io::task<base::result<void>> kv_batch(std::string bucket, std::string_view op,
                                          std::span<const iovec> body,
                                          const response_consumer& consume);
    io::task<base::result<put_result>> put_object(std::string bucket, std::string key,
                                                  std::span<const std::byte> body,
                                                  put_options how = {});
    // Whole-object GET into `destination`; an object larger than it fails with entity_too_large (and
    // the connection is dropped rather than drained).
    io::task<base::result<get_result>> get_object(std::string bucket, std::string key,
                                                  std::span<std::byte> destination);
    // GET of the bytes [offset, offset + destination.size()) (Range: bytes=a-b). The server may send
    // fewer when the object ends first (size_bytes says how many); object_size_bytes comes from
    // Content-Range. A range that starts at or past the end fails with invalid_range.
    // With if_match (an ETag without quotes), only while the object still has that ETag
    // (precondition_failed, 412, once it was replaced).
    io::task<base::result<get_result>> get_object_range(std::string bucket, std::string key,
                                                        std::uint64_t offset,
                                                        std::span<std::byte> destination,
                                                        std::string if_match = {});
    // nullopt when the key does not exist.
    io::task<base::result<std::optional<head_result>>> head_object(std::string bucket,
                                                                   std::string key);
    // Succeeds when the key does not exist afterwards (S3 answers 204 for a missing key too).
    io::task<base::result<void>> delete_object(std::string bucket, std::string key);

    // Succeeds when the bucket is gone afterwards; BucketNotEmpty while it holds objects or uploads.
    io::task<base::result<void>> delete_bucket(std::string bucket);
    io::task<base::result<std::vector<bucket_entry>>> list_buckets();
    // One ListObjectsV2 page (keys and common prefixes XML-decoded).
    io::task<base::result<list_page>> list_objects(std::string bucket, list_request what);
    // DeleteObjects of up to 1,000 keys in quiet mode (with the Content-MD5 S3 requires): the keys that
    // could not be deleted; an empty vector when all were (a missing key counts as deleted).
    io::task<base::result<std::vector<delete_failure>>> delete_objects(
        std::string bucket, std::vector<std::string> keys);

    // Multipart upload, one request each: returns the upload id / the part's ETag / the object's ETag.
    io::task<base::result<std::string>> create_multipart_upload(std::string bucket,
                                                                std::string key);
    io::task<base::result<std::string>> upload_part(std::string bucket, std::string key,
                                                    std::string upload_id, unsigned part_number,
                                                    std::span<const std::byte> body,
                                                    put_options how = {});
    // `parts` in ascending part-number order.
    io::task<base::result<put_result>> complete_multipart_upload(std::string bucket,
                                                                 std::string key,
                                                                 std::string upload_id,
                                                                 std::vector<completed_part> parts);
    io::task<base::result<void>> abort_multipart_upload(std::string bucket, std::string key,
                                                        std::string upload_id);

    // The admin API of a Fjord server (docs/security.md, "Users"; the root user's): adds or changes a
    // user (secret set) or removes one; lists the users' access keys.
    io::task<base::result<void>> set_user(std::string access_key,
                                          std::optional<std::string> secret);
    io::task<base::result<std::vector<std::string>>> list_users();

    const client_options& options() const { return _options; }
    // The HTTP status of the last request's final response; 0 when it failed before one arrived (a
    // transport error: refused, reset, timed out).
    int last_status() const { return _last_status; }
    // Bounds each later connect / send / receive (object_client shortens it to fit a deadline).
    void set_io_timeout_ms(std::int64_t timeout_ms) { _connection.set_io_timeout_ms(timeout_ms); }
    bool connection_open() const { return _connection.is_open(); }
    void close_connection() { _connection.close(); }

private:
    struct response {
        int status = 0;
        std::string etag;
        std::uint64_t content_length = 0;
        std::optional<std::uint64_t> range_total_bytes;  // the "/total" of Content-Range
        // The body of a non-2xx response (or of a 2xx one when capture_body), up to max_error_body_bytes.
        std::string error_body;
    };
    // What one request sends and where a 2xx body goes.
    struct request {
        std::string_view method;
        std::string raw_path;
        std::string raw_query;  // after '?', already encoded; may be empty
        std::span<const std::byte> body;
        std::span<std::byte> destination;     // empty: a 2xx body (if any) is read and dropped
        bool body_expected = true;            // false for HEAD
        bool capture_body = false;            // keep a small 2xx body (an XML result) in error_body
        std::size_t capture_limit_bytes = 0;  // ... up to this many bytes (0: max_error_body_bytes)
        std::string content_md5;              // a Content-MD5 header value, or empty
        std::string range;                    // a Range header value, or empty
        bool crc32c_trailer = false;          // aws-chunked body with a CRC32C trailer
        bool crc64nvme_trailer = false;       // ... or with a CRC64NVME trailer
        std::string if_none_match;            // an If-None-Match header value, or empty
        std::string if_match;                 // an ETag (without quotes) for If-Match, or empty
        std::string checksum_crc32c;          // an x-amz-checksum-crc32c value, or empty
        std::span<const iovec> body_parts;    // a gathered body (instead of `body`)
        const response_consumer* consumer = nullptr;                      // reads a 2xx body
        std::vector<std::pair<std::string, std::string>> extra_headers;   // unsigned
        std::vector<std::pair<std::string, std::string>> signed_headers;  // lower-case names
    };

    std::string format_head(const request& req, std::uint64_t content_length) const;
    io::task<base::result<response>> perform(request req);
    io::task<base::result<response>> attempt(const request& req, bool& response_started);
    io::task<base::result<response>> read_response(const request& req, bool& response_started);
    io::task<void> read_error_until_close(const std::byte* prefix, std::size_t prefix_bytes,
                                          response& out);
    io::task<base::result<void>> read_body(const request& req, std::size_t prefix_bytes,
                                           response& out);

    client_options _options;
    std::string _host_header;
    connection _connection;
    std::vector<char> _head_buffer;
    std::size_t _head_bytes = 0;     // bytes in _head_buffer
    std::size_t _head_consumed = 0;  // of which the parsed head
    response_head _head;
    int _last_status = 0;
};

// Largest ListObjectsV2 / ListBuckets / DeleteObjects result document the client accepts.
constexpr std::size_t max_result_document_bytes = 8 * 1024 * 1024;

// "/bucket/key" percent-encoded as SigV4 expects (the key keeps its '/').
std::string object_path(std::string_view bucket, std::string_view key);

}  // namespace fjord::client
