#include "client/object_client.h"

#include <algorithm>
#include <utility>
#include <vector>

#include "base/clock.h"
#include "base/encoding.h"
#include "io/ops.h"
#include "io/wait_group.h"

namespace fjord::client {

namespace {
constexpr std::uint64_t max_parts = 10'000;  // the S3 limit
constexpr std::int64_t ns_per_ms = 1'000'000;
}  // namespace

struct object_client::multipart_job {
    std::string bucket, key, upload_id;
    std::span<const std::byte> body;
    std::uint64_t part_size_bytes = 0;
    std::vector<completed_part> parts;
    std::optional<base::error> failure;  // the first part that failed for good
};

struct object_client::ranged_job {
    std::string bucket, key;
    std::uint64_t offset = 0;  // of destination[0] in the object
    std::span<std::byte> destination;
    std::string if_match;  // every range's If-Match, or empty
    std::optional<base::error> failure;
};

object_client::object_client(object_client_options options)
    : _options(std::move(options)), _pool(_options.client, _options.pool) {
    FJORD_ASSERT(_options.retry.max_attempts >= 1);
    _rng_state = _options.retry.jitter_seed;
    if (_rng_state == 0)
        _rng_state = static_cast<std::uint64_t>(base::monotonic_now_ns()) ^
                     reinterpret_cast<std::uintptr_t>(this);
    _rng_state |= 1;
}

template <class T, class Attempt>
io::task<base::result<T>> object_client::run_attempt(Attempt* attempt, std::int64_t remaining_ms,
                                                     int* status) {
    connection_pool::lease lease = co_await _pool.acquire();
    lease->set_io_timeout_ms(
        std::max<std::int64_t>(1, std::min(_options.client.io_timeout_ms, remaining_ms)));
    ++_counters.attempts;
    base::result<T> r = co_await (*attempt)(*lease);
    *status = lease->last_status();
    co_return r;
}

template <class T, class Attempt>
io::task<base::result<T>> object_client::with_retries(Attempt attempt) {
    const retry_options& policy = _options.retry;
    const std::int64_t deadline_ns =
        base::monotonic_now_ns() + policy.request_deadline_ms * ns_per_ms;
    ++_counters.requests;
    for (unsigned n = 1;; ++n) {  // bounded by max_attempts
        std::int64_t remaining_ms = (deadline_ns - base::monotonic_now_ns()) / ns_per_ms;
        int status = 0;
        base::result<T> r = co_await run_attempt<T>(&attempt, remaining_ms, &status);
        if (r) co_return r;
        bool retryable = is_retryable(r.err(), status);
        if (!retryable) co_return r;
        std::int64_t wait_ms = backoff_ms(policy, n, _rng_state);
        if (n >= policy.max_attempts ||
            base::monotonic_now_ns() + wait_ms * ns_per_ms >= deadline_ns) {
            ++_counters.gave_up;
            base::error last = r.err();
            last.message +=
                " (gave up after " + std::to_string(n) + " attempt" + (n == 1 ? "" : "s") + ")";
            co_return base::fail(std::move(last));
        }
        ++_counters.retries;
        co_await io::sleep_for(wait_ms);
    }
}

io::task<base::result<void>> object_client::create_bucket(std::string bucket) {
    co_return co_await with_retries<void>(
        [bucket](s3_client& c) { return c.create_bucket(bucket); });
}

io::task<base::result<void>> object_client::create_kv_bucket(std::string bucket,
                                                             kv_bucket_request options) {
    co_return co_await with_retries<void>(
        [bucket, options](s3_client& c) { return c.create_kv_bucket(bucket, options); });
}

io::task<base::result<void>> object_client::kv_batch(std::string bucket, std::string op,
                                                     std::span<const iovec> body,
                                                     response_consumer consume) {
    co_return co_await with_retries<void>([bucket, op, body, &consume](s3_client& c) {
        return c.kv_batch(bucket, op, body, consume);
    });
}

io::task<base::result<put_result>> object_client::put_object(
    std::string bucket, std::string key, std::span<const std::byte> body, std::string if_none_match,
    std::optional<std::uint32_t> checksum_crc32c) {
    put_options how = _options.put;
    how.if_none_match = std::move(if_none_match);
    if (checksum_crc32c) {
        const std::uint32_t v = *checksum_crc32c;
        const char be[4] = {static_cast<char>(v >> 24), static_cast<char>(v >> 16),
                            static_cast<char>(v >> 8), static_cast<char>(v)};
        how.checksum_crc32c = base::base64_encode(std::string_view(be, 4));
    }
    co_return co_await with_retries<put_result>(
        [bucket, key, body, how](s3_client& c) { return c.put_object(bucket, key, body, how); });
}

io::task<base::result<get_result>> object_client::get_object(std::string bucket, std::string key,
                                                             std::span<std::byte> destination) {
    co_return co_await with_retries<get_result>([bucket, key, destination](s3_client& c) {
        return c.get_object(bucket, key, destination);
    });
}

io::task<base::result<get_result>> object_client::get_range(std::string bucket, std::string key,
                                                            std::uint64_t offset,
                                                            std::span<std::byte> destination,
                                                            std::string if_match) {
    co_return co_await with_retries<get_result>(
        [bucket, key, offset, destination, if_match](s3_client& c) {
            return c.get_object_range(bucket, key, offset, destination, if_match);
        });
}

io::task<base::result<std::optional<head_result>>> object_client::head_object(std::string bucket,
                                                                              std::string key) {
    co_return co_await with_retries<std::optional<head_result>>(
        [bucket, key](s3_client& c) { return c.head_object(bucket, key); });
}

io::task<base::result<void>> object_client::delete_object(std::string bucket, std::string key) {
    co_return co_await with_retries<void>(
        [bucket, key](s3_client& c) { return c.delete_object(bucket, key); });
}

io::task<base::result<void>> object_client::delete_bucket(std::string bucket) {
    co_return co_await with_retries<void>(
        [bucket](s3_client& c) { return c.delete_bucket(bucket); });
}

io::task<base::result<std::vector<bucket_entry>>> object_client::list_buckets() {
    co_return co_await with_retries<std::vector<bucket_entry>>(
        [](s3_client& c) { return c.list_buckets(); });
}

io::task<base::result<list_page>> object_client::list_objects(std::string bucket,
                                                              list_request what) {
    co_return co_await with_retries<list_page>(
        [bucket, what](s3_client& c) { return c.list_objects(bucket, what); });
}

io::task<base::result<std::vector<delete_failure>>> object_client::delete_objects(
    std::string bucket, std::vector<std::string> keys) {
    co_return co_await with_retries<std::vector<delete_failure>>(
        [bucket, keys](s3_client& c) { return c.delete_objects(bucket, keys); });
}

io::task<base::result<void>> object_client::abort_upload(std::string bucket, std::string key,
                                                         std::string upload_id) {
    co_return co_await with_retries<void>([bucket, key, upload_id](s3_client& c) {
        return c.abort_multipart_upload(bucket, key, upload_id);
    });
}

// ---- multipart upload ----

io::task<void> object_client::upload_one_part(multipart_job* job, unsigned index) {
    if (job->failure) co_return;  // another part failed for good: start no more
    std::uint64_t begin = index * job->part_size_bytes;
    std::span<const std::byte> slice =
        job->body.subspan(begin, std::min(job->part_size_bytes, job->body.size() - begin));
    unsigned number = index + 1;
    put_options how = _options.put;
    std::string bucket = job->bucket, key = job->key, upload_id = job->upload_id;
    auto r = co_await with_retries<std::string>(
        [bucket, key, upload_id, number, slice, how](s3_client& c) {
            return c.upload_part(bucket, key, upload_id, number, slice, how);
        });
    if (!r) {
        if (!job->failure) {
            base::error err = r.err();
            err.message = "part " + std::to_string(number) + ": " + err.message;
            job->failure = std::move(err);
        }
        co_return;
    }
    job->parts[index] = completed_part{number, std::move(*r)};
}

io::task<base::result<put_result>> object_client::put_object_multipart(
    std::string bucket, std::string key, std::span<const std::byte> body, multipart_options how) {
    if (how.part_size_bytes == 0 || how.parts_in_flight == 0)
        co_return base::fail(base::errc::invalid_argument,
                             "part size and parts in flight must be positive");
    std::uint64_t count =
        std::max<std::uint64_t>(1, (body.size() + how.part_size_bytes - 1) / how.part_size_bytes);
    if (count > max_parts)
        co_return base::fail(base::errc::invalid_argument,
                             std::to_string(count) + " parts: more than 10,000");
    auto id = co_await with_retries<std::string>(
        [bucket, key](s3_client& c) { return c.create_multipart_upload(bucket, key); });
    if (!id) co_return id.as_failure();

    multipart_job job{
        bucket, key, *id, body, how.part_size_bytes, std::vector<completed_part>(count), {}};
    {
        io::wait_group group(how.parts_in_flight);
        for (unsigned i = 0; i < count && !job.failure; ++i)
            co_await group.spawn(upload_one_part(&job, i));
        co_await group.wait();
    }
    if (job.failure) {
        (void)co_await abort_upload(bucket, key, *id);  // best effort: the upload expires otherwise
        co_return base::fail(std::move(*job.failure));
    }
    std::vector<completed_part> parts = std::move(job.parts);
    std::string upload_id = *id;
    auto done = co_await with_retries<put_result>([bucket, key, upload_id, parts](s3_client& c) {
        return c.complete_multipart_upload(bucket, key, upload_id, parts);
    });
    if (!done) (void)co_await abort_upload(bucket, key, upload_id);
    co_return done;
}

// ---- parallel ranged download ----

io::task<void> object_client::get_one_range(ranged_job* job, std::uint64_t begin,
                                            std::uint64_t length) {
    if (job->failure) co_return;
    auto r = co_await get_range(job->bucket, job->key, job->offset + begin,
                                job->destination.subspan(begin, length), job->if_match);
    if (!r) {
        if (!job->failure) job->failure = r.err();
    } else if (r->size_bytes != length && !job->failure) {
        job->failure =
            base::error{base::errc::invalid_range,
                        "range at " + std::to_string(job->offset + begin) + " returned " +
                            std::to_string(r->size_bytes) + " of " + std::to_string(length) +
                            " bytes (the object changed or is shorter)"};
    }
}

io::task<base::result<get_result>> object_client::get_object_ranges(
    std::string bucket, std::string key, std::uint64_t offset, std::span<std::byte> destination,
    ranged_get_options how) {
    if (how.range_size_bytes == 0 || how.ranges_in_flight == 0)
        co_return base::fail(base::errc::invalid_argument,
                             "range size and ranges in flight must be positive");
    if (destination.empty()) co_return get_result{};
    get_result out;
    std::uint64_t wanted = destination.size();
    std::uint64_t first_bytes = 0;  // read before the parallel phase
    if (!how.size_known) {
        std::uint64_t first_length = std::min<std::uint64_t>(how.range_size_bytes, wanted);
        auto first =
            co_await get_range(bucket, key, offset, destination.first(first_length), how.if_match);
        if (!first && first.code() == base::errc::invalid_range && offset == 0)
            co_return co_await get_object(bucket, key,
                                          destination);  // an empty object has no byte 0
        if (!first) co_return first.as_failure();
        out = *first;
        wanted = std::min<std::uint64_t>(
            wanted, out.object_size_bytes > offset ? out.object_size_bytes - offset : 0);
        first_bytes = out.size_bytes;
        if (first_bytes < std::min(first_length, wanted))
            co_return base::fail(base::errc::invalid_range, "the first range came back short");
    }
    std::string if_match = how.if_match.empty() && !how.size_known ? out.etag : how.if_match;
    ranged_job job{bucket, key, offset, destination, std::move(if_match), {}};
    {
        io::wait_group group(how.ranges_in_flight);
        for (std::uint64_t at = first_bytes; at < wanted && !job.failure;
             at += how.range_size_bytes)
            co_await group.spawn(
                get_one_range(&job, at, std::min(how.range_size_bytes, wanted - at)));
        co_await group.wait();
    }
    if (job.failure) co_return base::fail(std::move(*job.failure));
    out.size_bytes = wanted;
    if (how.size_known) out.object_size_bytes = 0;  // not learned
    co_return out;
}

}  // namespace fjord::client
