#pragma once

// object_client: the native client's request layer. It sends each S3 request on a pooled keep-alive
// connection (connection_pool), retries retryable failures with backoff and jitter within a deadline
// per request (retry.h), and splits large transfers into parts that move in parallel:
//   - put_object_multipart: CreateMultipartUpload, UploadPart for every part (parts_in_flight at once),
//     CompleteMultipartUpload; AbortMultipartUpload when any part fails for good.
//   - get_object_ranges: ranged GETs straight into the caller's memory (ranges_in_flight at once).
// Bodies are never copied: parts are spans of the caller's buffer, ranges land in slices of it.
//
// Lifecycle and threading: owned by one core, created and destroyed there; any number of coroutines
// on that core may use it at once (the pool bounds the connections). Buffers passed in must stay
// alive, and unchanged for a PUT, until the call's task completes. Destroy it only when no call is
// in flight.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "client/connection_pool.h"
#include "client/retry.h"
#include "client/s3_client.h"
#include "io/task.h"

namespace fjord::client {

struct object_client_options {
    client_options client;  // endpoint, credentials, region, per-operation I/O timeout
    pool_options pool;
    retry_options retry;
    put_options put;  // how single PUTs and parts are sent (CRC32C trailer or not)
};

struct multipart_options {
    std::uint64_t part_size_bytes =
        8 * 1024 * 1024;  // every part but the last (S3: at least 5 MiB)
    unsigned parts_in_flight = 4;
};

struct ranged_get_options {
    std::uint64_t range_size_bytes = 8 * 1024 * 1024;
    unsigned ranges_in_flight = 4;
    // The caller knows the object holds every byte asked for: all ranges start at once instead of
    // the first one going alone to learn the object's size.
    bool size_known = false;
    // Every range only while the object has this ETag (without quotes); precondition_failed once it
    // was replaced. Empty: the ranges after the first carry the first one's ETag (so a read never
    // mixes two versions), or, with size_known, none.
    std::string if_match;
};

// Counters of one client, for benchmarks and tests (read on the owning core).
struct request_counters {
    std::uint64_t requests = 0;  // logical requests (each may take several attempts)
    std::uint64_t attempts = 0;
    std::uint64_t retries = 0;
    std::uint64_t gave_up =
        0;  // requests that failed after a retryable failure on the last attempt
};

class object_client {
public:
    explicit object_client(object_client_options options);
    object_client(const object_client&) = delete;
    object_client& operator=(const object_client&) = delete;

    io::task<base::result<void>> create_bucket(std::string bucket);
    io::task<base::result<void>> create_kv_bucket(std::string bucket, kv_bucket_request options);
    // One KV batch request, retried like any other (`consume` runs again from the start of the body
    // on a retry); client/kv_client.h builds the batches.
    io::task<base::result<void>> kv_batch(std::string bucket, std::string op,
                                          std::span<const iovec> body, response_consumer consume);
    // With if_none_match "*", only if the key does not exist (precondition_failed otherwise). With
    // checksum_crc32c (the body's CRC32C, put_options), the server verifies the body against it.
    io::task<base::result<put_result>> put_object(
        std::string bucket, std::string key, std::span<const std::byte> body,
        std::string if_none_match = {}, std::optional<std::uint32_t> checksum_crc32c = {});
    // Whole-object GET into `destination` (entity_too_large if it does not fit).
    io::task<base::result<get_result>> get_object(std::string bucket, std::string key,
                                                  std::span<std::byte> destination);
    // One ranged GET of up to destination.size() bytes from `offset`.
    io::task<base::result<get_result>> get_range(std::string bucket, std::string key,
                                                 std::uint64_t offset,
                                                 std::span<std::byte> destination,
                                                 std::string if_match = {});
    io::task<base::result<std::optional<head_result>>> head_object(std::string bucket,
                                                                   std::string key);
    io::task<base::result<void>> delete_object(std::string bucket, std::string key);
    io::task<base::result<void>> delete_bucket(std::string bucket);
    io::task<base::result<std::vector<bucket_entry>>> list_buckets();
    // One ListObjectsV2 page; the caller follows next_continuation_token while truncated.
    io::task<base::result<list_page>> list_objects(std::string bucket, list_request what);
    // DeleteObjects of 1..1000 keys: the keys the server could not delete (empty when all were).
    io::task<base::result<std::vector<delete_failure>>> delete_objects(
        std::string bucket, std::vector<std::string> keys);

    // Multipart upload of `body` (at least one part, even for an empty body; at most 10,000 parts).
    io::task<base::result<put_result>> put_object_multipart(std::string bucket, std::string key,
                                                            std::span<const std::byte> body,
                                                            multipart_options how);
    // Reads the object's bytes from `offset` into `destination`, up to its size or the object's end,
    // in parallel ranges. The first range goes alone and tells the object's size; the rest follow
    // in parallel. size_bytes is the number of bytes read. An empty object reads as 0 bytes.
    io::task<base::result<get_result>> get_object_ranges(std::string bucket, std::string key,
                                                         std::uint64_t offset,
                                                         std::span<std::byte> destination,
                                                         ranged_get_options how);

    const request_counters& counters() const { return _counters; }
    const object_client_options& options() const { return _options; }
    connection_pool& pool() { return _pool; }

private:
    struct multipart_job;
    struct ranged_job;

    // Runs `attempt(s3_client&)` (a plain callable returning the task of one attempt; never a
    // coroutine lambda) on pooled connections until it succeeds, fails for good, runs out of
    // attempts or would pass the deadline.
    template <class T, class Attempt>
    io::task<base::result<T>> with_retries(Attempt attempt);
    template <class T, class Attempt>
    io::task<base::result<T>> run_attempt(Attempt* attempt, std::int64_t remaining_ms, int* status);
    io::task<void> upload_one_part(multipart_job* job, unsigned index);
    io::task<void> get_one_range(ranged_job* job, std::uint64_t begin, std::uint64_t length);
    io::task<base::result<void>> abort_upload(std::string bucket, std::string key,
                                              std::string upload_id);

    object_client_options _options;
    connection_pool _pool;
    request_counters _counters;
    std::uint64_t _rng_state;
};

}  // namespace fjord::client
