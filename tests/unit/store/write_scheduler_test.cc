#include "store/write_scheduler.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "base/units.h"
#include "io/reactor.h"
#include "io/task.h"
#include "store/sim_file_system.h"
#include "store_test_util.h"

namespace fjord::store {
namespace {

using base::KiB;
using testing::pattern_bytes;

// Runs body on one reactor over a simulated file system whose every operation first yields to other
// coroutines, so that writes really overlap.
void run_on_reactor(const std::function<io::task<void>()>& body) {
    io::reactor_group group(1);
    group.run([&](unsigned) { io::spawn(testing::run_then_stop(body(), &group)); });
}

std::unique_ptr<sim_file_system> slow_file_system(std::uint64_t seed) {
    auto fs = std::make_unique<sim_file_system>(seed);
    sim_faults faults;
    faults.latency = 1.0;
    fs->set_faults(faults);
    return fs;
}

std::string read_back(sim_file_system& fs, int fd, std::size_t n) {
    std::string out(n, '\0');
    EXPECT_EQ(fs.pread_blocking(fd, out.data(), n, 0), static_cast<std::int64_t>(n));
    return out;
}

TEST(write_scheduler, bounds_the_writes_in_flight_and_cuts_them_into_pieces) {
    auto fs = slow_file_system(testing::test_seed(11));
    constexpr std::size_t files = 5, file_bytes = 64 * KiB;
    std::vector<int> fds;
    std::vector<std::string> data;
    for (std::size_t i = 0; i < files; ++i) {
        fds.push_back(fs->open_blocking("/f" + std::to_string(i), O_CREAT | O_RDWR, 0644));
        ASSERT_GE(fds.back(), 0);
        data.push_back(pattern_bytes(file_bytes, i));
    }
    write_scheduler scheduler(*fs, 1, 3, 16 * KiB);
    std::vector<int> results(files, -1);
    run_on_reactor([&]() -> io::task<void> {
        std::vector<scheduled_write> writes(files);
        for (std::size_t i = 0; i < files; ++i)
            scheduler.start_write(writes[i], 0, fds[i],
                                  reinterpret_cast<const std::byte*>(data[i].data()), file_bytes, 0,
                                  -1);
        EXPECT_EQ(scheduler.in_flight(0), 3u);
        EXPECT_EQ(scheduler.queued(0), files * 4 - 3);
        for (std::size_t i = 0; i < files; ++i) results[i] = co_await writes[i];
    });
    for (std::size_t i = 0; i < files; ++i) {
        EXPECT_EQ(results[i], static_cast<int>(file_bytes));
        EXPECT_EQ(read_back(*fs, fds[i], file_bytes), data[i]) << "file " << i;
    }
    EXPECT_EQ(scheduler.stats().pieces_started, files * 4);
    EXPECT_EQ(scheduler.stats().peak_in_flight, 3u);
    EXPECT_EQ(scheduler.in_flight(0), 0u);
    EXPECT_EQ(scheduler.queued(0), 0u);
}

TEST(write_scheduler, starts_writes_in_the_order_they_were_queued) {
    auto fs = slow_file_system(testing::test_seed(12));
    int fd_a = fs->open_blocking("/a", O_CREAT | O_RDWR, 0644),
        fd_b = fs->open_blocking("/b", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd_a, 0);
    ASSERT_GE(fd_b, 0);
    std::string a = pattern_bytes(32 * KiB, 1), b = pattern_bytes(32 * KiB, 2);
    write_scheduler scheduler(*fs, 1, 1, 8 * KiB);
    bool a_done_when_b_done = false;
    run_on_reactor([&]() -> io::task<void> {
        scheduled_write wa, wb;
        scheduler.start_write(wa, 0, fd_a, reinterpret_cast<const std::byte*>(a.data()), 32 * KiB,
                              0, -1);
        scheduler.start_write(wb, 0, fd_b, reinterpret_cast<const std::byte*>(b.data()), 32 * KiB,
                              0, -1);
        EXPECT_EQ(co_await wb, static_cast<int>(32 * KiB));
        a_done_when_b_done = wa.await_ready();
        EXPECT_EQ(co_await wa, static_cast<int>(32 * KiB));
    });
    EXPECT_TRUE(a_done_when_b_done) << "the later write finished before the earlier one";
    EXPECT_EQ(scheduler.stats().peak_in_flight, 1u);
}

TEST(write_scheduler, reports_the_first_error_and_frees_its_slots) {
    auto fs = slow_file_system(testing::test_seed(13));
    int fd = fs->open_blocking("/f", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    sim_faults faults;
    faults.eio = 1.0;
    fs->set_faults(faults);
    std::string data = pattern_bytes(32 * KiB, 3);
    write_scheduler scheduler(*fs, 1, 2, 8 * KiB);
    int result = 0;
    run_on_reactor([&]() -> io::task<void> {
        scheduled_write w;
        scheduler.start_write(w, 0, fd, reinterpret_cast<const std::byte*>(data.data()), 32 * KiB,
                              0, -1);
        result = co_await w;
    });
    EXPECT_EQ(result, -EIO);
    EXPECT_EQ(scheduler.in_flight(0), 0u);
    EXPECT_EQ(scheduler.queued(0), 0u);
}

TEST(write_scheduler, completes_at_once_on_a_synchronous_file_system) {
    sim_file_system fs(testing::test_seed(14));  // no latency: writes complete inside start_write
    int fd = fs.open_blocking("/f", O_CREAT | O_RDWR, 0644);
    ASSERT_GE(fd, 0);
    std::string data = pattern_bytes(40 * KiB, 4);
    write_scheduler scheduler(fs, 2, 1, 16 * KiB);
    int result = 0;
    run_on_reactor([&]() -> io::task<void> {
        scheduled_write w;
        scheduler.start_write(w, 1, fd, reinterpret_cast<const std::byte*>(data.data()), 40 * KiB,
                              0, -1);
        EXPECT_TRUE(w.await_ready());
        result = co_await w;
    });
    EXPECT_EQ(result, static_cast<int>(40 * KiB));
    EXPECT_EQ(read_back(fs, fd, 40 * KiB), data);
    EXPECT_EQ(scheduler.stats().pieces_started, 3u);  // 16 + 16 + 8 KiB
}

TEST(write_scheduler, shares_a_drive_budget_between_cores) {
    write_scheduler_options options;
    options.writes_in_flight_per_drive = 8;
    EXPECT_EQ(write_scheduler::slots_per_core(options, 1), 8u);
    EXPECT_EQ(write_scheduler::slots_per_core(options, 2), 4u);
    EXPECT_EQ(write_scheduler::slots_per_core(options, 3), 2u);
    EXPECT_EQ(write_scheduler::slots_per_core(options, 16), 1u);  // every core can still write
}

}  // namespace
}  // namespace fjord::store
