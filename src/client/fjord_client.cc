// The C ABI over object_client. Each reactor thread runs one `serve_jobs` coroutine that sleeps in an
// io_uring read of its own eventfd; a calling thread queues a job (under that core's mutex), writes
// the eventfd and waits on the job's condition variable. The job runs as a coroutine on the reactor,
// so a C call never blocks a reactor thread and many calls share each thread's connection pool.

#include "client/fjord_client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "client/object_client.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace {

using namespace fjord;

thread_local std::string t_last_error;

enum class job_kind { create_bucket, put, get, head, remove, multipart_put };

// One call from a C thread: arguments in, results out, and the handshake that hands it back.
struct job {
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
    std::mutex mutex;
    std::condition_variable finished;
    bool done = false;
};

// One reactor thread's inbox and client. The queue and `stopping` are shared with calling threads
// under `mutex`; `client` is created, used and destroyed on the reactor thread only.
struct core_state {
    int event_fd = -1;
    std::uint64_t event_value = 0;  // the eventfd read's destination
    std::mutex mutex;
    std::deque<job*> queue;
    bool stopping = false;
    std::unique_ptr<client::object_client> client;
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

io::task<void> run_job(core_state* core, job* j) {
    client::object_client& c = *core->client;
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
    std::lock_guard lock(j->mutex);
    j->done = true;
    j->finished.notify_one();
}

}  // namespace

struct fjord_client {
    client::object_client_options options;
    std::vector<std::unique_ptr<core_state>> cores;
    std::unique_ptr<io::reactor_group> group;
    std::thread runner;
    std::atomic<unsigned> next_core{0};
    std::atomic<unsigned> cores_running{0};
};

namespace {

io::task<void> serve_jobs(fjord_client* owner, core_state* core) {
    core->client = std::make_unique<client::object_client>(owner->options);
    for (bool stop = false; !stop;) {  // one round per wake-up, until destroy asks to stop
        int fd = core->event_fd;
        std::uint64_t* value = &core->event_value;
        int rc = co_await io::make_op(
            [fd, value](io_uring_sqe* s) { io_uring_prep_read(s, fd, value, sizeof *value, 0); });
        FJORD_ASSERT(rc == sizeof *value || rc == -EAGAIN || rc == -EINTR, "eventfd read failed");
        std::deque<job*> batch;
        {
            std::lock_guard lock(core->mutex);
            batch.swap(core->queue);
            stop = core->stopping;
        }
        for (job* j : batch) io::spawn(run_job(core, j));
    }
    core->client.reset();  // no call is in flight: destroy's contract
    if (owner->cores_running.fetch_sub(1) == 1) owner->group->stop();
}

int run_call(fjord_client* c, job& j) {
    if (!c) return -EINVAL;
    core_state& core =
        *c->cores[c->next_core.fetch_add(1, std::memory_order_relaxed) % c->cores.size()];
    {
        std::lock_guard lock(core.mutex);
        core.queue.push_back(&j);
    }
    std::uint64_t one = 1;
    ssize_t n = ::write(core.event_fd, &one, sizeof one);
    (void)n;  // EAGAIN: the counter is already non-zero, so the reactor wakes anyway
    std::unique_lock lock(j.mutex);
    j.finished.wait(lock, [&j] { return j.done; });
    t_last_error = j.error;
    return j.rc;
}

int fail_call(int rc, std::string message) {
    t_last_error = std::move(message);
    return rc;
}

bool parse_endpoint(const char* text, io::endpoint& out) {
    std::string value = text;
    if (value.rfind("https://", 0) == 0) return false;
    if (value.rfind("http://", 0) == 0) value = value.substr(7);
    while (!value.empty() && value.back() == '/') value.pop_back();
    if (value.find(':') == std::string::npos) value += ":80";
    auto parsed = io::parse_endpoint(value);
    if (!parsed) return false;
    out = *parsed;
    return true;
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
    if (auto probe = io::probe_kernel_features(); !probe)
        return fail_call(-ENOSYS, probe.err().message);
    auto c = std::make_unique<fjord_client>();
    client::object_client_options& o = c->options;
    if (!parse_endpoint(config->endpoint, o.client.endpoint))
        return fail_call(-EINVAL,
                         std::string("not an http://IP:port endpoint: ") + config->endpoint);
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
    unsigned threads = config->threads ? config->threads : 1;
    if (threads > 64) return fail_call(-EINVAL, "at most 64 threads");
    for (unsigned i = 0; i < threads; ++i) {
        auto core = std::make_unique<core_state>();
        core->event_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (core->event_fd < 0) {
            int e = errno;
            for (auto& made : c->cores) ::close(made->event_fd);
            return fail_call(-e, "eventfd failed");
        }
        c->cores.push_back(std::move(core));
    }
    c->group = std::make_unique<io::reactor_group>(threads);
    c->cores_running.store(threads);
    fjord_client* raw = c.get();
    c->runner = std::thread([raw] {
        raw->group->run(
            [raw](unsigned core) { io::spawn(serve_jobs(raw, raw->cores[core].get())); });
    });
    *out = c.release();
    return 0;
}

void fjord_client_destroy(fjord_client* client) {
    if (!client) return;
    for (auto& core : client->cores) {
        {
            std::lock_guard lock(core->mutex);
            core->stopping = true;
        }
        std::uint64_t one = 1;
        ssize_t n = ::write(core->event_fd, &one, sizeof one);
        (void)n;
    }
    client->runner.join();
    for (auto& core : client->cores) ::close(core->event_fd);
    delete client;
}

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
