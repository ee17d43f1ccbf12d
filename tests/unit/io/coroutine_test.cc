#include <gtest/gtest.h>

#include <string>

#include "io/ops.h"
#include "io/reactor.h"
#include "io/task.h"

namespace fjord::io {
namespace {

// Counts live instances, so a double destruction or a leak shows up as a wrong count.
struct tracked {
    static inline int live = 0;
    static inline int destroyed = 0;
    std::string payload = std::string(64, 'x');  // heap-allocated: a double free would also crash
    tracked() { ++live; }
    tracked(const tracked& o) : payload(o.payload) { ++live; }
    tracked(tracked&& o) noexcept : payload(std::move(o.payload)) { ++live; }
    ~tracked() {
        --live;
        ++destroyed;
    }
};

task<int> consume_by_value(tracked t) {
    co_await sleep_for(1);
    co_return static_cast<int>(t.payload.size());
}

task<int> consume_by_reference(const tracked& t) {
    co_await sleep_for(1);
    co_return static_cast<int>(t.payload.size());
}

task<int> chain(int depth) {
    if (depth == 0) co_return 0;
    co_return 1 + co_await chain(depth - 1);
}

// GCC 12.2 destroys a temporary created in a co_await full-expression twice (the reason the project
// builds with clang). This test pins the behaviour the code relies on.
TEST(coroutine, temporaries_in_co_await_expressions_are_destroyed_once) {
    tracked::live = 0;
    int sum = 0;
    reactor_group group(1);
    group.run([&](unsigned) {
        spawn([](int* out, reactor_group* g) -> task<void> {
            *out += co_await consume_by_value(tracked{});
            *out += co_await consume_by_reference(tracked{});
            g->stop();
        }(&sum, &group));
    });
    EXPECT_EQ(sum, 128);
    EXPECT_EQ(tracked::live, 0);
}

TEST(coroutine, tasks_are_lazy_and_deep_chains_use_no_stack) {
    reactor_group group(1);
    int depth = 0;
    group.run([&](unsigned) {
        spawn([](int* out, reactor_group* g) -> task<void> {
            task<int> t = chain(100000);  // not started yet: nothing runs until awaited
            *out = co_await std::move(t);
            g->stop();
        }(&depth, &group));
    });
    EXPECT_EQ(depth, 100000);
}

}  // namespace
}  // namespace fjord::io
