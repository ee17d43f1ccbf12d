#pragma once

// Helpers shared by the engine tests: options for a small test engine, opening it, running a coroutine on
// a reactor group with every core attached, and writing, committing and reading whole objects.

#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "base/units.h"
#include "io/reactor.h"
#include "io/task.h"
#include "store/engine.h"
#include "store_test_util.h"

namespace fjord::store {

// The engine's private steps (commits, reclaims, its write scheduler), for its tests: engine.h befriends
// this, and nothing outside tests/ names it. steps(e).commit_put(...) is e's commit_put.
struct engine_test_access {
    engine& e;
#define FJORD_ENGINE_STEP(name)                                                                    \
    template <class... Args>                                                                       \
    decltype(auto) name(Args&&... args) {                                                          \
        return e.name(std::forward<Args>(args)...);                                                \
    }
    FJORD_ENGINE_STEP(commit_put)
    FJORD_ENGINE_STEP(commit_remove)
    FJORD_ENGINE_STEP(commit_delete)
    FJORD_ENGINE_STEP(commit_remove_version)
    FJORD_ENGINE_STEP(commit_part)
    FJORD_ENGINE_STEP(commit_complete)
    FJORD_ENGINE_STEP(commit_abort)
    FJORD_ENGINE_STEP(reclaim)
    FJORD_ENGINE_STEP(reclaim_segments)
    FJORD_ENGINE_STEP(share_segments)
    FJORD_ENGINE_STEP(writes)
    FJORD_ENGINE_STEP(copy_admission)
    FJORD_ENGINE_STEP(new_object_id)
#undef FJORD_ENGINE_STEP
};
inline engine_test_access steps(engine* e) { return {*e}; }
inline engine_test_access steps(engine& e) { return {e}; }

}  // namespace fjord::store

namespace fjord::store::engine_testing {

using base::MiB;

constexpr unsigned test_cores = 2;
inline const write_conditions no_conditions{};

// Note for GCC 12: a lambda with non-trivially destructible captures, or a braced aggregate temporary,
// inside a co_await expression is destroyed twice (a double free). Lambdas passed to io::invoke_on are
// therefore named first, and conditions are passed as named objects.

inline engine_options test_options(const std::string& dir) {
    engine_options o;
    o.data_dirs = {dir};
    o.cores = test_cores;
    o.buffers = io::buffer_pool_options{1 * MiB, 16};
    return o;
}

inline std::unique_ptr<engine> open_engine(const engine_options& options) {
    auto opened = engine::open(options);
    if (!opened) {
        ADD_FAILURE() << "engine::open: " << opened.err().message;
        return nullptr;
    }
    return std::move(*opened);
}

// Runs body(engine) on core 0 of a fresh reactor group (every core attached first) until it returns.
inline void run_engine(engine& e, const std::function<io::task<void>(engine*)>& body,
                       unsigned cores = test_cores) {
    io::reactor_group group(cores);
    group.run([&](unsigned core) {
        e.attach_core(core, io::reactor::current().ring());
        if (core == 0) io::spawn(testing::run_then_stop(body(&e), &group));
    });
}

inline object_record metadata_only(const std::string& etag) {
    object_record r;
    r.etag = etag;
    r.content_type = "application/octet-stream";
    r.headers = {{"x-amz-meta-test", etag}};
    return r;
}

// Writes `data` into a new data file on this core and commits it under bucket/key. A failed commit removes
// the new file; a replaced record's files are reclaimed. Returns the replaced record.
inline io::task<base::result<std::optional<object_record>>> put_object(
    engine* e, std::string bucket, std::string key, std::string data, std::string etag,
    write_conditions conditions, object_record* committed = nullptr) {
    object_writer writer(e->drives(), e->pool(), steps(e).new_object_id(), e->data_file_settings(),
                         &steps(e).writes(), &e->spares());
    auto opened = co_await writer.open(data.size());
    if (!opened) {
        co_await writer.discard();
        co_return opened.as_failure();
    }
    const std::uint64_t size = data.size();
    testing::string_source source(std::move(data), size + 17);
    auto written = co_await writer.write_from(source, max_data_file_bytes);
    if (!written) {
        co_await writer.discard();
        co_return written.as_failure();
    }
    auto sealed = co_await writer.seal();
    if (!sealed) {
        co_await writer.discard();
        co_return sealed.as_failure();
    }
    object_record record;
    record.size_bytes = size;
    record.modified_ms = 1700000000000;
    record.etag = std::move(etag);
    record.content_type = "text/plain";
    record.checksum_algorithm = "CRC32C";
    record.checksum_value = "AAAAAA==";
    record.segments.push_back(*sealed);
    if (committed) *committed = record;
    auto outcome = co_await steps(e).commit_put(bucket, key, record, conditions);
    if (!outcome) {
        co_await steps(e).reclaim(record);
        co_return outcome.as_failure();
    }
    if (*outcome) co_await steps(e).reclaim(**outcome);
    co_return std::move(*outcome);
}

inline io::task<base::result<std::string>> read_back(engine* e, object_record record) {
    testing::string_sink sink;
    auto r = co_await read_object(e->drives(), e->pool(), record, 0, record.size_bytes, sink,
                                  e->data_file_settings());
    if (!r) co_return r.as_failure();
    co_return std::move(sink.out);
}

}  // namespace fjord::store::engine_testing
