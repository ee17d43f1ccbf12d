// fjord._native: the Python binding of the native client (src/client) with nanobind.
//
// A Runtime owns a client_runtime (its io_uring reactor threads and their connection pools). Every
// call submits an Operation, a job that runs as a coroutine on a reactor thread; Python waits for it
// with the GIL released, or, for the asynchronous calls, a completion thread of the Python package
// collects finished operations from the Runtime's completion queue (wait_completed) and resolves
// their futures. Buffers are passed as (address, length): the Python side keeps the object that owns
// the memory alive, and pinned (Py_buffer held), until the operation finished. Nothing is copied.

#include <nanobind/nanobind.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/checksum.h"
#include "client/kv_client.h"
#include "client/object_client.h"
#include "client/runtime.h"

namespace nb = nanobind;
using namespace fjord;

namespace {

enum class op_kind {
    create_bucket,
    delete_bucket,
    list_buckets,
    put,
    multipart_put,
    get,
    head,
    remove,
    list,
    delete_objects,
    create_kv_bucket,
    kv_exists,
    kv_get,
    kv_put
};

// Finished asynchronous operations, by id, for the package's completion thread.
struct completion_queue {
    std::mutex mutex;
    std::condition_variable cv;
    std::deque<std::uint64_t> done;
    bool closed = false;
};

struct operation final : client::runtime_job {
    op_kind kind;
    std::uint64_t id = 0;
    std::string bucket, key, if_none_match;
    std::optional<std::uint32_t> checksum_crc32c;
    std::span<const std::byte> source;
    std::span<std::byte> destination;
    std::uint64_t offset = 0;
    client::multipart_options multipart;
    client::ranged_get_options ranged;
    client::list_request listing;
    std::vector<std::string> keys;
    client::kv_bucket_request kv_bucket;
    client::kv_batch_options kv_batch;
    std::vector<std::span<const std::byte>> sources;
    std::vector<std::span<std::byte>> destinations;

    std::optional<base::error> error;
    client::kv_exists_result kv_found;
    std::vector<client::kv_outcome> kv_outcomes;
    std::string etag;
    std::uint64_t size_bytes = 0, object_size_bytes = 0;
    bool found = true;
    client::list_page page;
    std::vector<client::bucket_entry> buckets;
    std::vector<client::delete_failure> failures;

    std::mutex mutex;
    std::condition_variable cv;
    bool done = false;
    std::shared_ptr<operation> self;          // keeps it alive while it runs
    std::shared_ptr<completion_queue> queue;  // set for asynchronous operations

    template <class T>
    bool take(const base::result<T>& r) {
        if (!r) error = r.err();
        return r.has_value();
    }
    io::task<void> run(client::object_client& c) override;
    void finished() override;

    bool wait(std::optional<double> timeout_s) {
        nb::gil_scoped_release unlocked;
        std::unique_lock lock(mutex);
        if (!timeout_s) {
            cv.wait(lock, [this] { return done; });
            return true;
        }
        return cv.wait_for(lock, std::chrono::duration<double>(*timeout_s),
                           [this] { return done; });
    }
    bool is_done() {
        std::lock_guard lock(mutex);
        return done;
    }
};

io::task<void> operation::run(client::object_client& c) {
    switch (kind) {
        case op_kind::create_bucket: take(co_await c.create_bucket(bucket)); break;
        case op_kind::delete_bucket: take(co_await c.delete_bucket(bucket)); break;
        case op_kind::list_buckets: {
            auto r = co_await c.list_buckets();
            if (take(r)) buckets = std::move(*r);
            break;
        }
        case op_kind::put: {
            auto r = co_await c.put_object(bucket, key, source, if_none_match, checksum_crc32c);
            if (take(r)) etag = std::move(r->etag), size_bytes = source.size();
            break;
        }
        case op_kind::multipart_put: {
            auto r = co_await c.put_object_multipart(bucket, key, source, multipart);
            if (take(r)) etag = std::move(r->etag), size_bytes = source.size();
            break;
        }
        case op_kind::get: {
            auto r = co_await c.get_object_ranges(bucket, key, offset, destination, ranged);
            if (take(r)) {
                etag = std::move(r->etag);
                size_bytes = r->size_bytes;
                object_size_bytes = r->object_size_bytes;
            }
            break;
        }
        case op_kind::head: {
            auto r = co_await c.head_object(bucket, key);
            if (!take(r)) break;
            found = r->has_value();
            if (found) size_bytes = (*r)->size_bytes, etag = std::move((*r)->etag);
            break;
        }
        case op_kind::remove: take(co_await c.delete_object(bucket, key)); break;
        case op_kind::list: {
            auto r = co_await c.list_objects(bucket, listing);
            if (take(r)) page = std::move(*r);
            break;
        }
        case op_kind::delete_objects: {
            auto r = co_await c.delete_objects(bucket, keys);
            if (take(r)) failures = std::move(*r);
            break;
        }
        case op_kind::create_kv_bucket: take(co_await c.create_kv_bucket(bucket, kv_bucket)); break;
        case op_kind::kv_exists: {
            auto r = co_await client::kv_exists(c, bucket, keys);
            if (take(r)) kv_found = std::move(*r);
            break;
        }
        case op_kind::kv_get: {
            auto r = co_await client::kv_get_into(c, bucket, keys, destinations, kv_batch);
            if (take(r)) kv_outcomes = std::move(*r);
            break;
        }
        case op_kind::kv_put: {
            auto r = co_await client::kv_put_from(c, bucket, keys, sources, kv_batch);
            if (take(r)) kv_outcomes = std::move(*r);
            break;
        }
    }
}

void operation::finished() {
    std::shared_ptr<operation> keep = std::move(self);  // this may end with `keep`, at the return
    std::shared_ptr<completion_queue> q = queue;
    {
        std::lock_guard lock(mutex);
        done = true;
        cv.notify_all();
    }
    if (q) {
        std::lock_guard lock(q->mutex);
        q->done.push_back(id);
        q->cv.notify_one();
    }
}

// (kind, message, HTTP status, S3 code, request id): the kind is the error table's name.
nb::object error_tuple(const operation& op) {
    if (!op.error) return nb::none();
    const base::error& e = *op.error;
    std::string code =
        e.remote_code.empty() ? std::string(base::errc_s3_code(e.code)) : e.remote_code;
    return nb::make_tuple(std::string(base::errc_name(e.code)), e.message, e.remote_status, code,
                          e.request_id);
}

nb::object result_of(const operation& op) {
    switch (op.kind) {
        case op_kind::kv_exists: {
            nb::list sizes;
            for (const auto& size : op.kv_found.sizes)
                sizes.append(size ? nb::object(nb::int_(*size)) : nb::none());
            return nb::make_tuple(sizes, op.kv_found.leading_hits);
        }
        case op_kind::kv_get:
        case op_kind::kv_put: {
            nb::list out;
            for (const auto& o : op.kv_outcomes)
                out.append(nb::make_tuple(static_cast<int>(o.status), o.size_bytes, o.error_code));
            return out;
        }
        case op_kind::create_kv_bucket:
        case op_kind::create_bucket:
        case op_kind::delete_bucket:
        case op_kind::remove: return nb::none();
        case op_kind::list_buckets: {
            nb::list out;
            for (const auto& b : op.buckets) out.append(nb::make_tuple(b.name, b.creation_date));
            return out;
        }
        case op_kind::put:
        case op_kind::multipart_put: return nb::make_tuple(op.etag, op.size_bytes);
        case op_kind::get: return nb::make_tuple(op.size_bytes, op.object_size_bytes, op.etag);
        case op_kind::head:
            if (!op.found) return nb::none();
            return nb::make_tuple(op.size_bytes, op.etag);
        case op_kind::list: {
            nb::list objects, prefixes;
            for (const auto& o : op.page.objects)
                objects.append(nb::make_tuple(o.key, o.size_bytes, o.etag, o.last_modified));
            for (const auto& p : op.page.common_prefixes) prefixes.append(p);
            return nb::make_tuple(objects, prefixes, op.page.truncated,
                                  op.page.next_continuation_token);
        }
        case op_kind::delete_objects: {
            nb::list out;
            for (const auto& f : op.failures) out.append(nb::make_tuple(f.key, f.code, f.message));
            return out;
        }
    }
    return nb::none();
}

class runtime {
public:
    runtime(const std::string& endpoint, const std::string& access_key,
            const std::string& secret_key, const std::string& region, unsigned threads,
            unsigned max_connections, unsigned max_attempts, std::uint64_t request_timeout_ms,
            std::uint64_t io_timeout_ms, bool crc32c, const std::string& ca_cert) {
        client::object_client_options o;
        if (auto set = client::configure_endpoint(o.client, endpoint, ca_cert); !set)
            throw nb::value_error(set.err().message.c_str());
        o.client.credentials = {access_key, secret_key};
        if (!region.empty()) o.client.region = region;
        if (io_timeout_ms) o.client.io_timeout_ms = static_cast<std::int64_t>(io_timeout_ms);
        if (max_connections) o.pool.max_connections = max_connections;
        if (max_attempts) o.retry.max_attempts = max_attempts;
        if (request_timeout_ms)
            o.retry.request_deadline_ms = static_cast<std::int64_t>(request_timeout_ms);
        o.put.crc32c_trailer = crc32c;
        auto started = client::client_runtime::start(std::move(o), threads);
        if (!started) throw nb::value_error(started.err().message.c_str());
        _runtime = std::move(*started);
        _queue = std::make_shared<completion_queue>();
    }
    ~runtime() { close(); }

    // Lets the operations in flight finish, then stops the threads. The runtime is taken out under
    // the GIL, so no other thread can submit to it from here on.
    void close() {
        std::unique_ptr<client::client_runtime> closing = std::move(_runtime);
        if (!closing) return;
        {
            nb::gil_scoped_release unlocked;
            closing.reset();
        }
        {
            std::lock_guard lock(_queue->mutex);
            _queue->closed = true;
            _queue->cv.notify_all();
        }
        _pins.clear();  // every operation has finished
    }
    // In a forked child: the threads, and whatever locks they held at the fork, are the parent's.
    // Leak the runtime and the completion queue without touching them; a fresh closed queue remains.
    void forget() {
        (void)_runtime.release();
        (void)new std::shared_ptr<completion_queue>(std::move(_queue));
        _queue = std::make_shared<completion_queue>();
        _queue->closed = true;
        _pins.clear();
    }
    bool closed() const { return !_runtime; }
    // Closed, every operation finished and every completion taken: wait_completed has nothing more.
    bool drained() {
        std::lock_guard lock(_queue->mutex);
        return _queue->closed && _queue->done.empty();
    }

    // `keep` (the memory the operation reads or writes, and its owner) stays referenced here until
    // unpin(id): whatever happens to the caller's frame (an exception between the submission and the
    // wait), the memory outlives the operation. An operation nobody waits for leaks its pin until
    // close().
    std::shared_ptr<operation> submit(std::shared_ptr<operation> op, bool asynchronous,
                                      nb::object keep) {
        if (!_runtime) throw nb::value_error("the client is closed");
        op->id = ++_next_id;
        if (asynchronous) op->queue = _queue;
        if (!keep.is_none()) _pins[nb::int_(op->id)] = keep;
        op->self = op;
        _runtime->submit(op.get());
        return op;
    }
    // Drops an operation's pin; only once the operation is done.
    void unpin(std::uint64_t id) {
        nb::int_ key(id);
        if (_pins.contains(key)) nb::del(_pins[key]);
    }

    // Ids of finished asynchronous operations; waits up to timeout_s for the first. Empty once closed
    // and drained.
    std::vector<std::uint64_t> wait_completed(double timeout_s) {
        nb::gil_scoped_release unlocked;
        std::unique_lock lock(_queue->mutex);
        _queue->cv.wait_for(lock, std::chrono::duration<double>(timeout_s),
                            [this] { return !_queue->done.empty() || _queue->closed; });
        std::vector<std::uint64_t> out(_queue->done.begin(), _queue->done.end());
        _queue->done.clear();
        return out;
    }

private:
    std::unique_ptr<client::client_runtime> _runtime;
    std::shared_ptr<completion_queue> _queue;
    nb::dict _pins;              // operation id -> what it keeps alive; under the GIL
    std::uint64_t _next_id = 0;  // under the GIL
};

std::shared_ptr<operation> make_op(op_kind kind, std::string bucket, std::string key = {}) {
    auto op = std::make_shared<operation>();
    op->kind = kind;
    op->bucket = std::move(bucket);
    op->key = std::move(key);
    return op;
}

const std::byte* as_source(std::uintptr_t address) {
    return reinterpret_cast<const std::byte*>(address);
}
std::byte* as_destination(std::uintptr_t address) { return reinterpret_cast<std::byte*>(address); }

// A batch get (into the buffers) or put (from them): one (address, length) per key.
std::shared_ptr<operation> kv_batch_op(op_kind kind, std::string bucket,
                                       std::vector<std::string> keys,
                                       const std::vector<std::uintptr_t>& addresses,
                                       const std::vector<std::uint64_t>& lengths,
                                       client::kv_batch_options batch) {
    if (addresses.size() != keys.size() || lengths.size() != keys.size())
        throw nb::value_error("one buffer per key");
    auto op = make_op(kind, std::move(bucket));
    op->keys = std::move(keys);
    for (std::size_t i = 0; i < addresses.size(); ++i) {
        if (kind == op_kind::kv_get)
            op->destinations.emplace_back(as_destination(addresses[i]), lengths[i]);
        else
            op->sources.emplace_back(as_source(addresses[i]), lengths[i]);
    }
    op->kv_batch = batch;
    return op;
}

}  // namespace

NB_MODULE(_native, m) {
    m.doc() = "Fjord's native S3 client (io_uring), bound with nanobind. Use the `fjord` package.";

    nb::class_<operation>(m, "Operation")
        .def("wait", &operation::wait, nb::arg("timeout_s") = nb::none(),
             "Waits (GIL released) until the operation finished; False on timeout.")
        .def("done", &operation::is_done)
        .def_ro("id", &operation::id)
        .def("error", [](const operation& op) { return error_tuple(op); })
        .def("result", [](const operation& op) { return result_of(op); });

    nb::class_<runtime>(m, "Runtime")
        .def(nb::init<const std::string&, const std::string&, const std::string&,
                      const std::string&, unsigned, unsigned, unsigned, std::uint64_t,
                      std::uint64_t, bool, const std::string&>(),
             nb::arg("endpoint"), nb::arg("access_key"), nb::arg("secret_key"), nb::arg("region"),
             nb::arg("threads"), nb::arg("max_connections"), nb::arg("max_attempts"),
             nb::arg("request_timeout_ms"), nb::arg("io_timeout_ms"), nb::arg("crc32c"),
             nb::arg("ca_cert"))
        .def("close", &runtime::close)
        .def("forget", &runtime::forget)
        .def_prop_ro("closed", &runtime::closed)
        .def_prop_ro("drained", &runtime::drained)
        .def("wait_completed", &runtime::wait_completed, nb::arg("timeout_s"))
        .def("unpin", &runtime::unpin, nb::arg("id"))
        .def(
            "create_bucket",
            [](runtime& rt, std::string bucket, bool async_) {
                return rt.submit(make_op(op_kind::create_bucket, std::move(bucket)), async_,
                                 nb::none());
            },
            nb::arg("bucket"), nb::arg("asynchronous") = false)
        .def(
            "create_kv_bucket",
            [](runtime& rt, std::string bucket, std::uint64_t capacity_bytes,
               std::uint64_t ttl_seconds, bool ack_from_dram, bool async_) {
                auto op = make_op(op_kind::create_kv_bucket, std::move(bucket));
                op->kv_bucket = {capacity_bytes, ttl_seconds, ack_from_dram};
                return rt.submit(op, async_, nb::none());
            },
            nb::arg("bucket"), nb::arg("capacity_bytes") = 0, nb::arg("ttl_seconds") = 0,
            nb::arg("ack_from_dram") = false, nb::arg("asynchronous") = false)
        .def(
            "kv_exists",
            [](runtime& rt, std::string bucket, std::vector<std::string> keys, bool async_) {
                auto op = make_op(op_kind::kv_exists, std::move(bucket));
                op->keys = std::move(keys);
                return rt.submit(op, async_, nb::none());
            },
            nb::arg("bucket"), nb::arg("keys"), nb::arg("asynchronous") = false)
        .def(
            "kv_get",
            [](runtime& rt, std::string bucket, std::vector<std::string> keys,
               std::vector<std::uintptr_t> addresses, std::vector<std::uint64_t> lengths,
               std::uint64_t request_bytes, unsigned in_flight, bool async_, nb::object keep) {
                return rt.submit(kv_batch_op(op_kind::kv_get, std::move(bucket), std::move(keys),
                                             addresses, lengths, {request_bytes, in_flight}),
                                 async_, keep);
            },
            nb::arg("bucket"), nb::arg("keys"), nb::arg("addresses"), nb::arg("lengths"),
            nb::arg("request_bytes"), nb::arg("in_flight"), nb::arg("asynchronous") = false,
            nb::arg("keep") = nb::none())
        .def(
            "kv_put",
            [](runtime& rt, std::string bucket, std::vector<std::string> keys,
               std::vector<std::uintptr_t> addresses, std::vector<std::uint64_t> lengths,
               std::uint64_t request_bytes, unsigned in_flight, bool async_, nb::object keep) {
                return rt.submit(kv_batch_op(op_kind::kv_put, std::move(bucket), std::move(keys),
                                             addresses, lengths, {request_bytes, in_flight}),
                                 async_, keep);
            },
            nb::arg("bucket"), nb::arg("keys"), nb::arg("addresses"), nb::arg("lengths"),
            nb::arg("request_bytes"), nb::arg("in_flight"), nb::arg("asynchronous") = false,
            nb::arg("keep") = nb::none())
        .def(
            "delete_bucket",
            [](runtime& rt, std::string bucket, bool async_) {
                return rt.submit(make_op(op_kind::delete_bucket, std::move(bucket)), async_,
                                 nb::none());
            },
            nb::arg("bucket"), nb::arg("asynchronous") = false)
        .def(
            "list_buckets",
            [](runtime& rt, bool async_) {
                return rt.submit(make_op(op_kind::list_buckets, {}), async_, nb::none());
            },
            nb::arg("asynchronous") = false)
        .def(
            "put",
            [](runtime& rt, std::string bucket, std::string key, std::uintptr_t address,
               std::uint64_t length, bool multipart, std::uint64_t part_size, unsigned in_flight,
               std::string if_none_match, bool async_, nb::object keep,
               std::optional<std::uint32_t> crc32c) {
                if (multipart && crc32c)
                    throw nb::value_error("a caller's CRC32C goes with a single PUT only");
                auto op = make_op(multipart ? op_kind::multipart_put : op_kind::put,
                                  std::move(bucket), std::move(key));
                op->source = {as_source(address), length};
                op->multipart = {part_size, in_flight};
                op->if_none_match = std::move(if_none_match);
                op->checksum_crc32c = crc32c;
                return rt.submit(op, async_, keep);
            },
            nb::arg("bucket"), nb::arg("key"), nb::arg("address"), nb::arg("length"),
            nb::arg("multipart"), nb::arg("part_size"), nb::arg("in_flight"),
            nb::arg("if_none_match") = "", nb::arg("asynchronous") = false,
            nb::arg("keep") = nb::none(), nb::arg("crc32c") = nb::none())
        .def(
            "get",
            [](runtime& rt, std::string bucket, std::string key, std::uint64_t offset,
               std::uintptr_t address, std::uint64_t capacity, std::uint64_t range_size,
               unsigned in_flight, bool size_known, std::string if_match, bool async_,
               nb::object keep) {
                auto op = make_op(op_kind::get, std::move(bucket), std::move(key));
                op->offset = offset;
                op->destination = {as_destination(address), capacity};
                op->ranged = {range_size, in_flight, size_known, std::move(if_match)};
                return rt.submit(op, async_, keep);
            },
            nb::arg("bucket"), nb::arg("key"), nb::arg("offset"), nb::arg("address"),
            nb::arg("capacity"), nb::arg("range_size"), nb::arg("in_flight"),
            nb::arg("size_known") = false, nb::arg("if_match") = "",
            nb::arg("asynchronous") = false, nb::arg("keep") = nb::none())
        .def(
            "head",
            [](runtime& rt, std::string bucket, std::string key, bool async_) {
                return rt.submit(make_op(op_kind::head, std::move(bucket), std::move(key)), async_,
                                 nb::none());
            },
            nb::arg("bucket"), nb::arg("key"), nb::arg("asynchronous") = false)
        .def(
            "delete",
            [](runtime& rt, std::string bucket, std::string key, bool async_) {
                return rt.submit(make_op(op_kind::remove, std::move(bucket), std::move(key)),
                                 async_, nb::none());
            },
            nb::arg("bucket"), nb::arg("key"), nb::arg("asynchronous") = false)
        .def(
            "list",
            [](runtime& rt, std::string bucket, std::string prefix, std::string delimiter,
               std::string token, unsigned max_keys, bool async_) {
                auto op = make_op(op_kind::list, std::move(bucket));
                op->listing = {std::move(prefix), std::move(delimiter), std::move(token), max_keys};
                return rt.submit(op, async_, nb::none());
            },
            nb::arg("bucket"), nb::arg("prefix") = "", nb::arg("delimiter") = "",
            nb::arg("token") = "", nb::arg("max_keys") = 1000, nb::arg("asynchronous") = false)
        .def(
            "delete_objects",
            [](runtime& rt, std::string bucket, std::vector<std::string> keys, bool async_) {
                auto op = make_op(op_kind::delete_objects, std::move(bucket));
                op->keys = std::move(keys);
                return rt.submit(op, async_, nb::none());
            },
            nb::arg("bucket"), nb::arg("keys"), nb::arg("asynchronous") = false);

    m.def(
        "crc32c",
        [](std::uintptr_t address, std::uint64_t length, std::uint32_t crc) {
            nb::gil_scoped_release unlocked;
            return base::crc32c({as_source(address), length}, crc);
        },
        nb::arg("address"), nb::arg("length"), nb::arg("crc") = 0,
        "CRC32C (Castagnoli) of memory, continuing `crc` (ISA-L; the GIL is released).");

    // Pins a buffer-protocol object's memory: (address, length, readonly) and a handle whose release()
    // (or garbage collection) gives the buffer back.
    struct pinned {
        Py_buffer view{};
        bool held = false;
        ~pinned() { release(); }
        void release() {
            if (held) PyBuffer_Release(&view), held = false;
        }
    };
    nb::class_<pinned>(m, "Pinned")
        .def("release", &pinned::release)
        .def_prop_ro("address",
                     [](const pinned& p) { return reinterpret_cast<std::uintptr_t>(p.view.buf); })
        .def_prop_ro("nbytes",
                     [](const pinned& p) { return static_cast<std::uint64_t>(p.view.len); })
        .def_prop_ro("readonly", [](const pinned& p) { return p.view.readonly != 0; });
    m.def(
        "pin",
        [](nb::handle obj, bool writable) {
            auto p = std::make_unique<pinned>();
            int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
            if (PyObject_GetBuffer(obj.ptr(), &p->view, flags) != 0) throw nb::python_error();
            p->held = true;
            return p.release();
        },
        nb::arg("obj"), nb::arg("writable"), nb::rv_policy::take_ownership,
        "Pins a C-contiguous buffer-protocol object (writable when asked) for native I/O.");
}
