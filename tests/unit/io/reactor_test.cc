#include "io/reactor.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>

#include "io/buffer_pool.h"
#include "io/cross_core.h"
#include "io/ops.h"
#include "io/semaphore.h"
#include "io/task.h"

namespace fjord::io {
namespace {

task<int> add_on_core(int a, int b) {
    co_await sleep_for(1);
    co_return a + b + static_cast<int>(reactor::current().core()) * 100;
}

TEST(reactor, kernel_has_required_features) { EXPECT_TRUE(probe_kernel_features().has_value()); }

TEST(reactor, cross_core_call_runs_on_target_and_returns_home) {
    reactor_group group(2);
    std::atomic<int> answer{0};
    std::atomic<int> home_core{-1};
    group.run([&](unsigned core) {
        if (core != 0) return;
        spawn([](reactor_group* g, std::atomic<int>* out, std::atomic<int>* home) -> task<void> {
            int sum = 0;
            for (int i = 0; i < 100; ++i)
                sum += co_await invoke_on(1, [i] { return add_on_core(i, 1); });
            out->store(sum);
            home->store(static_cast<int>(reactor::current().core()));
            g->stop();
        }(&group, &answer, &home_core));
    });
    // sum over i of (i + 1 + 100) = 4950 + 100 + 10000
    EXPECT_EQ(answer.load(), 15050);
    EXPECT_EQ(home_core.load(), 0);
}

task<void> direct_io_round_trip(std::string path, buffer_pool* pool, bool* ok, reactor_group* g) {
    pool->register_with(reactor::current().ring());
    int fd = co_await openat(AT_FDCWD, path.c_str(), O_CREAT | O_RDWR | O_DIRECT | O_TRUNC, 0600);
    if (fd < 0) {
        g->stop();
        co_return;
    }
    buffer a = co_await pool->acquire();
    buffer b = co_await pool->acquire();
    for (size_t i = 0; i < a.capacity(); ++i) a.data()[i] = static_cast<std::byte>(i * 31);
    async_op w1, w2;
    unsigned half = static_cast<unsigned>(a.capacity() / 2);
    w1.start([&](io_uring_sqe* s) {
        io_uring_prep_write_fixed(s, fd, a.data(), half, 0, a.registered_index());
    });
    w2.start([&](io_uring_sqe* s) {
        io_uring_prep_write_fixed(s, fd, a.data() + half, half, half, a.registered_index());
    });
    int r1 = co_await w1;
    int r2 = co_await w2;
    int s = co_await fsync(fd, true);
    int r =
        co_await read(fd, b.data(), static_cast<unsigned>(b.capacity()), 0, b.registered_index());
    *ok = r1 == static_cast<int>(half) && r2 == static_cast<int>(half) && s == 0 &&
          r == static_cast<int>(b.capacity()) && std::memcmp(a.data(), b.data(), a.capacity()) == 0;
    co_await close(fd);
    a.reset();
    b.reset();
    g->stop();
}

TEST(reactor, direct_io_with_registered_buffers) {
    char templ[] = "/tmp/fjord-io-test-XXXXXX";
    ASSERT_NE(mkdtemp(templ), nullptr);
    std::string path = std::string(templ) + "/file";
    reactor_group group(1);
    bool ok = false;
    buffer_pool* pool_ptr = nullptr;
    group.run([&](unsigned) {
        static buffer_pool pool(buffer_pool_options{1024 * 1024, 4});
        pool_ptr = &pool;
        spawn(direct_io_round_trip(path, &pool, &ok, &group));
    });
    EXPECT_TRUE(ok);
    unlink(path.c_str());
    rmdir(templ);
}

TEST(reactor, buffer_pool_waiters_are_served_in_order) {
    reactor_group group(1);
    std::string order;
    group.run([&](unsigned) {
        static buffer_pool pool(buffer_pool_options{4096, 1});
        auto user = [](buffer_pool* p, std::string* log, char name,
                       reactor_group* g) -> task<void> {
            buffer b = co_await p->acquire();
            log->push_back(name);
            co_await sleep_for(2);
            b.reset();
            if (name == 'c') g->stop();
        };
        spawn(user(&pool, &order, 'a', &group));
        spawn(user(&pool, &order, 'b', &group));
        spawn(user(&pool, &order, 'c', &group));
    });
    EXPECT_EQ(order, "abc");
}

// Weighted units: a request waits while fewer are free, waiters are served strictly in order (a small
// one does not pass a large one), and one asking for more than the capacity takes all of it.
TEST(reactor, semaphore_weights_are_served_in_order) {
    reactor_group group(1);
    std::string order;
    group.run([&](unsigned) {
        static semaphore budget(8);
        auto user = [](semaphore* s, std::string* log, char name, std::size_t units,
                       reactor_group* g) -> task<void> {
            co_await s->acquire(units);
            semaphore::permit held(*s, units);
            log->push_back(name);
            co_await sleep_for(2);
            log->push_back(static_cast<char>(name - 'a' + 'A'));
            if (name == 'e') g->stop();
        };
        spawn(user(&budget, &order, 'a', 5, &group));    // runs at once (3 left)
        spawn(user(&budget, &order, 'b', 4, &group));    // waits for a
        spawn(user(&budget, &order, 'c', 1, &group));    // would fit now, but waits behind b
        spawn(user(&budget, &order, 'd', 100, &group));  // takes all 8: waits for b and c
        spawn(user(&budget, &order, 'e', 1, &group));    // after d
    });
    EXPECT_EQ(order, "aAbcBCdDeE");
}

TEST(reactor, recv_times_out_with_linked_timeout) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    reactor_group group(1);
    int result = 0;
    group.run([&](unsigned) {
        spawn([](int fd, int* out, reactor_group* g) -> task<void> {
            char buf[16];
            *out = co_await recv(fd, buf, sizeof buf, 20);
            g->stop();
        }(fds[0], &result, &group));
    });
    EXPECT_EQ(result, -ECANCELED);
    close(fds[0]);
    close(fds[1]);
}

}  // namespace
}  // namespace fjord::io
