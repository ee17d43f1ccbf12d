// Heap allocations on the hot paths, counted by replacing the global operator new in this test program:
// per cross-core call, and per buffer-sized piece of an object written. The bounds are regression
// guards; the counts are printed. What they cost: each one is a small block from glibc's per-thread
// cache (tens of nanoseconds), next to the microseconds of the request around a cross-core call and
// the hundreds of microseconds a 1 MiB piece takes to reach the disk.
//
// Also: the cross-core overflow list stays bounded by the calls outstanding when the queue between two
// cores is far smaller than the burst, and every call still completes in order.

#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <new>
#include <string>

#include "base/units.h"
#include "io/buffer_pool.h"
#include "io/cross_core.h"
#include "io/reactor.h"
#include "io/task.h"
#include "store/data_file.h"
#include "store/drive.h"

namespace {
std::atomic<bool> g_counting{false};
std::atomic<long> g_allocations{0};
}  // namespace

void* operator new(std::size_t n) {
    if (g_counting.load(std::memory_order_relaxed))
        g_allocations.fetch_add(1, std::memory_order_relaxed);
    if (void* p = std::malloc(n ? n : 1)) return p;
    throw std::bad_alloc();
}
void* operator new[](std::size_t n) { return ::operator new(n); }
void operator delete(void* p) noexcept { std::free(p); }
void operator delete[](void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
void operator delete[](void* p, std::size_t) noexcept { std::free(p); }

namespace fjord::io {
namespace {

using base::MiB;

struct counting_scope {
    counting_scope() {
        g_allocations = 0;
        g_counting = true;
    }
    ~counting_scope() { g_counting = false; }
    long count() const { return g_allocations.load(); }
};

task<int> remote_add(int a) { co_return a + 1; }

task<void> call_many(reactor_group* group, int calls, double* per_call) {
    for (int i = 0; i < 64; ++i) co_await invoke_on(1, [i] { return remote_add(i); });  // warm up
    long total = 0;
    {
        counting_scope scope;
        for (int i = 0; i < calls; ++i)
            total += co_await invoke_on(1, [i] { return remote_add(i); });
        *per_call = static_cast<double>(scope.count()) / calls;
    }
    EXPECT_EQ(total, static_cast<long>(calls) * (calls + 1) / 2);
    group->stop();
}

TEST(allocations, cross_core_call_allocates_only_its_coroutine_frames) {
    reactor_group group(2);
    double per_call = -1;
    group.run([&](unsigned core) {
        if (core == 0) spawn(call_many(&group, 10000, &per_call));
    });
    std::printf("[ measured ] %.3f heap allocations per cross-core call\n", per_call);
    // fn's coroutine frame and the remote runner's; the request and reply are in the caller's frame.
    // The small excess allows for the ready queue's occasional block.
    EXPECT_LE(per_call, 2.1);
}

struct call_burst {
    reactor_group* group;
    int callers;
    int finished = 0;
    std::size_t max_overflow = 0;
    std::vector<int> order;  // the order in which core 1 ran the calls
};

task<int> record_on_remote(call_burst* burst, int i) {
    burst->order.push_back(i);  // core 1 only
    co_return i;
}

task<void> one_call(call_burst* burst, int i) {
    int r = co_await invoke_on(1, [burst, i] { return record_on_remote(burst, i); });
    EXPECT_EQ(r, i);
    EXPECT_EQ(reactor::current().core(), 0u);
    burst->max_overflow = std::max(burst->max_overflow, reactor::current().overflowed());
    if (++burst->finished == burst->callers) burst->group->stop();
}

TEST(allocations, cross_core_overflow_is_bounded_by_the_calls_outstanding) {
    // A queue of 4 between the cores and 2,000 calls started at once: most wait in core 0's overflow
    // list, none is lost or reordered, and the list never holds more than the calls outstanding.
    reactor_options options;
    options.inbox_capacity = 4;
    reactor_group group(2, options);
    call_burst burst{&group, 2000};
    group.run([&](unsigned core) {
        if (core != 0) return;
        for (int i = 0; i < burst.callers; ++i) spawn(one_call(&burst, i));
        burst.max_overflow = reactor::current().overflowed();
    });
    EXPECT_EQ(burst.finished, burst.callers);
    ASSERT_EQ(burst.order.size(), static_cast<std::size_t>(burst.callers));
    for (int i = 0; i < burst.callers; ++i)
        EXPECT_EQ(burst.order[i], i) << "calls ran out of order";
    std::printf("[ measured ] overflow list at most %zu messages for %d calls\n",
                burst.max_overflow, burst.callers);
    EXPECT_GT(burst.max_overflow, 0u)
        << "the burst did not overflow the queue: the test tests nothing";
    EXPECT_LE(burst.max_overflow, static_cast<std::size_t>(burst.callers));
}

// A source that hands out `piece` bytes per read from a pattern, `total` bytes in all.
class fixed_source final : public store::byte_source {
public:
    fixed_source(std::uint64_t total, std::size_t piece) : _left(total), _piece(piece) {}
    task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        std::size_t n = std::min<std::uint64_t>({_piece, max, _left});
        std::memset(dst, static_cast<int>(_left & 0xff), n);
        _left -= n;
        co_return n;
    }

private:
    std::uint64_t _left;
    std::size_t _piece;
};

struct write_run {
    const store::drive_set* drives;
    buffer_pool* pool;
    reactor_group* group;
    std::uint64_t bytes;
    double per_piece = -1;
};

task<void> write_one(write_run* run, std::uint64_t id, bool count) {
    store::object_writer writer(*run->drives, *run->pool, store::object_id{0xa110c, id});
    EXPECT_TRUE((co_await writer.open(run->bytes)).has_value());
    fixed_source source(run->bytes, 1 * MiB);
    long allocations = 0;
    {
        counting_scope scope;
        auto written = co_await writer.write_from(source, run->bytes);
        allocations = scope.count();
        EXPECT_TRUE(written.has_value());
    }
    if (count)
        run->per_piece =
            static_cast<double>(allocations) / (run->bytes / run->pool->buffer_bytes());
    EXPECT_TRUE((co_await writer.seal()).has_value());
}

task<void> write_twice(write_run* run) {
    co_await write_one(run, 1, false);  // warm up: first-use allocations
    co_await write_one(run, 2, true);
    run->group->stop();
}

TEST(allocations, object_write_allocates_a_few_frames_per_buffer) {
    char templ[] = "/tmp/fjord-alloc-test-XXXXXX";
    ASSERT_NE(::mkdtemp(templ), nullptr);
    std::string dir = templ;
    {
        auto drives = store::drive_set::open({dir});
        ASSERT_TRUE(drives.has_value()) << drives.err().message;
        reactor_group group(1);
        std::unique_ptr<buffer_pool> pool;
        write_run run{&*drives, nullptr, &group, 64 * MiB};
        group.run([&](unsigned) {
            pool = std::make_unique<buffer_pool>(buffer_pool_options{1 * MiB, 8});
            pool->register_with(reactor::current().ring());
            run.pool = pool.get();
            spawn(write_twice(&run));
        });
        std::printf("[ measured ] %.2f heap allocations per 1 MiB piece written\n", run.per_piece);
        // The frames of filling a buffer, reading the source into it and accounting its space.
        EXPECT_GE(run.per_piece, 0.0);
        EXPECT_LE(run.per_piece, 6.0);
    }
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace fjord::io
