// The C ABI over object_client, on client_runtime's reactor threads: a C call becomes a job that a
// reactor thread runs as a coroutine while the calling thread waits for it, so a C call never blocks a
// reactor thread and many calls share each thread's connection pool.

#include "client/fjord_client.h"

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>

#include "client/object_client.h"
#include "client/runtime.h"

namespace {

using namespace fjord;

thread_local std::string t_last_error;

enum class job_kind { create_bucket, put, get, head, remove, multipart_put };

// One call from a C thread: arguments in, results out.
struct job final : client::waited_job {
    job(job_kind k, std::string b, std::string k2 = {}, std::span<const std::byte> src = {},
        std::span<std::byte> dst = {}, std::uint64_t off = 0)
        : kind(k),
          bucket(std::move(b)),
          key(std::move(k2)),
          source(src),
          destination(dst),
          offset(off) {}
    io::task<void> run(client::object_client& c) override;
    job_kind kind;
    std::string bucket, key;
    std::span<const std::byte> source;
    std::span<std::byte> destination;
    std::uint64_t offset = 0;
    std::uint64_t part_size_bytes = 8 << 20;
    unsigned in_flight = 4;
    int rc = 0;
    std::string error;
    fjord_object_info info{};
};

int errno_of(base::errc code) {
    switch (code) {
        case base::errc::not_found:
        case base::errc::no_such_bucket:
        case base::errc::no_such_key:
        case base::errc::no_such_upload: return -ENOENT;
        case base::errc::access_denied:
        case base::errc::signature_does_not_match:
        case base::errc::invalid_access_key_id:
        case base::errc::request_time_too_skewed:
        case base::errc::expired_request: return -EACCES;
        case base::errc::invalid_argument:
        case base::errc::invalid_bucket_name:
        case base::errc::key_too_long: return -EINVAL;
        case base::errc::timed_out:
        case base::errc::request_timeout: return -ETIMEDOUT;
        case base::errc::entity_too_large: return -EFBIG;
        case base::errc::storage_full: return -ENOSPC;
        case base::errc::invalid_range: return -ERANGE;
        default: return -EIO;
    }
}

void copy_etag(fjord_object_info& info, const std::string& etag) {
    std::size_t n = std::min(etag.size(), sizeof info.etag - 1);
    std::memcpy(info.etag, etag.data(), n);
    info.etag[n] = '\0';
}

template <class T>
bool record(job* j, const base::result<T>& r) {
    if (r) return true;
    j->rc = errno_of(r.code());
    j->error = r.err().message;
    return false;
}

io::task<void> job::run(client::object_client& c) {
    job* j = this;
    switch (j->kind) {
        case job_kind::create_bucket: record(j, co_await c.create_bucket(j->bucket)); break;
        case job_kind::put: {
            auto r = co_await c.put_object(j->bucket, j->key, j->source);
            if (record(j, r)) j->info.size_bytes = j->source.size(), copy_etag(j->info, r->etag);
            break;
        }
        case job_kind::multipart_put: {
            auto r = co_await c.put_object_multipart(
                j->bucket, j->key, j->source,
                client::multipart_options{j->part_size_bytes, j->in_flight});
            if (record(j, r)) j->info.size_bytes = j->source.size(), copy_etag(j->info, r->etag);
            break;
        }
        case job_kind::get: {
            auto r = co_await c.get_object_ranges(
                j->bucket, j->key, j->offset, j->destination,
                client::ranged_get_options{j->part_size_bytes, j->in_flight});
            if (record(j, r)) j->info.size_bytes = r->size_bytes, copy_etag(j->info, r->etag);
            break;
        }
        case job_kind::head: {
            auto r = co_await c.head_object(j->bucket, j->key);
            if (!record(j, r)) break;
            if (!*r)
                j->rc = -ENOENT, j->error = "no such key";
            else
                j->info.size_bytes = (*r)->size_bytes, copy_etag(j->info, (*r)->etag);
            break;
        }
        case job_kind::remove: record(j, co_await c.delete_object(j->bucket, j->key)); break;
    }
}

}  // namespace

struct fjord_client {
    std::unique_ptr<client::client_runtime> runtime;
};

namespace {

int run_call(fjord_client* c, job& j) {
    if (!c) return -EINVAL;
    c->runtime->run_and_wait(j);
    t_last_error = j.error;
    return j.rc;
}

int fail_call(int rc, std::string message) {
    t_last_error = std::move(message);
    return rc;
}

void fill_info(fjord_object_info* info, const job& j) {
    if (info && j.rc == 0) *info = j.info;
}

bool names_ok(const char* bucket, const char* key) { return bucket && *bucket && key && *key; }

}  // namespace

extern "C" {

int fjord_client_create(const fjord_client_config* config, fjord_client** out) {
    if (!config || !out || !config->endpoint || !config->access_key || !config->secret_key)
        return fail_call(-EINVAL, "endpoint, access key and secret key are required");
    *out = nullptr;
    client::object_client_options o;
    if (auto set = client::configure_endpoint(o.client, config->endpoint,
                                              config->ca_cert ? config->ca_cert : "");
        !set)
        return fail_call(-EINVAL, set.err().message);
    o.client.credentials = {config->access_key, config->secret_key};
    if (config->region && *config->region) o.client.region = config->region;
    if (config->io_timeout_ms)
        o.client.io_timeout_ms = static_cast<std::int64_t>(config->io_timeout_ms);
    if (config->max_connections_per_thread)
        o.pool.max_connections = config->max_connections_per_thread;
    if (config->max_attempts) o.retry.max_attempts = config->max_attempts;
    if (config->request_timeout_ms)
        o.retry.request_deadline_ms = static_cast<std::int64_t>(config->request_timeout_ms);
    o.put.crc32c_trailer = config->crc32c_trailer != 0;
    auto started =
        client::client_runtime::start(std::move(o), config->threads ? config->threads : 1);
    if (!started)
        return fail_call(started.code() == base::errc::invalid_argument ? -EINVAL : -ENOSYS,
                         started.err().message);
    *out = new fjord_client{std::move(*started)};
    return 0;
}

void fjord_client_destroy(fjord_client* client) { delete client; }

int fjord_create_bucket(fjord_client* client, const char* bucket) {
    if (!bucket || !*bucket) return fail_call(-EINVAL, "bucket name required");
    job j{job_kind::create_bucket, bucket};
    return run_call(client, j);
}

int fjord_put(fjord_client* client, const char* bucket, const char* key, const void* data,
              uint64_t size, fjord_object_info* info) {
    if (!names_ok(bucket, key) || (!data && size > 0))
        return fail_call(-EINVAL, "bucket, key and data required");
    job j{job_kind::put, bucket, key, {static_cast<const std::byte*>(data), size}};
    int rc = run_call(client, j);
    fill_info(info, j);
    return rc;
}

int fjord_multipart_put(fjord_client* client, const char* bucket, const char* key, const void* data,
                        uint64_t size, const fjord_transfer_config* transfer,
                        fjord_object_info* info) {
    if (!names_ok(bucket, key) || (!data && size > 0))
        return fail_call(-EINVAL, "bucket, key and data required");
    job j{job_kind::multipart_put, bucket, key, {static_cast<const std::byte*>(data), size}};
    if (transfer && transfer->part_size_bytes) j.part_size_bytes = transfer->part_size_bytes;
    if (transfer && transfer->in_flight) j.in_flight = transfer->in_flight;
    int rc = run_call(client, j);
    fill_info(info, j);
    return rc;
}

int fjord_get(fjord_client* client, const char* bucket, const char* key, uint64_t offset,
              void* destination, uint64_t capacity, const fjord_transfer_config* transfer,
              fjord_object_info* info) {
    if (!names_ok(bucket, key) || (!destination && capacity > 0))
        return fail_call(-EINVAL, "bucket, key and destination required");
    job j{job_kind::get, bucket, key, {}, {static_cast<std::byte*>(destination), capacity}, offset};
    if (transfer && transfer->part_size_bytes) j.part_size_bytes = transfer->part_size_bytes;
    if (transfer && transfer->in_flight) j.in_flight = transfer->in_flight;
    int rc = run_call(client, j);
    fill_info(info, j);
    return rc;
}

int fjord_head(fjord_client* client, const char* bucket, const char* key, fjord_object_info* info) {
    if (!names_ok(bucket, key)) return fail_call(-EINVAL, "bucket and key required");
    job j{job_kind::head, bucket, key};
    int rc = run_call(client, j);
    fill_info(info, j);
    return rc;
}

int fjord_delete(fjord_client* client, const char* bucket, const char* key) {
    if (!names_ok(bucket, key)) return fail_call(-EINVAL, "bucket and key required");
    job j{job_kind::remove, bucket, key};
    return run_call(client, j);
}

const char* fjord_last_error(void) { return t_last_error.c_str(); }

}  // extern "C"
