#pragma once

// Helpers shared by the storage engine tests: temporary directories, deterministic byte patterns, an
// in-memory byte source that serves irregular piece sizes, a collecting byte sink, and a way to run a
// coroutine body on a reactor group and stop the group when it ends.

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <coroutine>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "io/reactor.h"
#include "io/task.h"
#include "store/data_file.h"

namespace fjord::store::testing {

// A fresh directory under $TMPDIR (or /tmp), removed with everything in it when the object dies.
class temp_dir {
public:
    temp_dir() {
        const char* base = std::getenv("TMPDIR");
        std::string templ = std::string(base && *base ? base : "/tmp") + "/fjord-store-test-XXXXXX";
        std::vector<char> buf(templ.begin(), templ.end());
        buf.push_back('\0');
        char* made = ::mkdtemp(buf.data());
        if (!made) {
            ADD_FAILURE() << "mkdtemp failed: " << std::strerror(errno);
            std::abort();
        }
        _path = made;
    }
    ~temp_dir() {
        std::error_code ignored;
        std::filesystem::remove_all(_path, ignored);
    }
    temp_dir(const temp_dir&) = delete;
    temp_dir& operator=(const temp_dir&) = delete;
    const std::string& path() const { return _path; }

private:
    std::string _path;
};

// The seed for a test's random choices: FJORD_TEST_SEED when set (to replay a run), else `fallback`.
// Printed so that any failing run can be replayed.
inline std::uint64_t test_seed(std::uint64_t fallback) {
    std::uint64_t seed = fallback;
    if (const char* env = std::getenv("FJORD_TEST_SEED")) seed = std::strtoull(env, nullptr, 0);
    std::printf("[ seed     ] %llu (replay with FJORD_TEST_SEED=%llu)\n",
                static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seed));
    return seed;
}

// n bytes that differ at every offset of a block (so a misplaced chunk cannot compare equal).
inline std::string pattern_bytes(std::size_t n, std::uint64_t seed) {
    std::string out(n, '\0');
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < n; i += 8) {
        std::uint64_t v = rng();
        std::memcpy(out.data() + i, &v, std::min<std::size_t>(8, n - i));
    }
    return out;
}

// Serves `data` in pieces of pseudo-random size between 1 and max_piece_bytes (never more than asked).
class string_source final : public byte_source {
public:
    string_source(std::string data, std::uint64_t seed, std::size_t max_piece_bytes = 70000)
        : _data(std::move(data)), _rng(seed), _max_piece_bytes(max_piece_bytes) {}
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        std::size_t piece = 1 + static_cast<std::size_t>(_rng() % _max_piece_bytes);
        if (_rng() % 8 == 0) piece = 1;  // the occasional tiny read, like a slow client
        std::size_t n = std::min({piece, max, _data.size() - _pos});
        std::memcpy(dst, _data.data() + _pos, n);
        _pos += n;
        ++_reads;
        co_return n;
    }
    std::size_t reads() const { return _reads; }

private:
    std::string _data;
    std::size_t _pos = 0;
    std::size_t _reads = 0;
    std::mt19937_64 _rng;
    std::size_t _max_piece_bytes;
};

// Collects everything written to it.
class string_sink final : public byte_sink {
public:
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        out.append(reinterpret_cast<const char*>(data.data()), data.size());
        ++writes;
        co_return base::result<void>{};
    }
    std::string out;
    std::size_t writes = 0;
};

// Counts outstanding work on one core; wait() resumes once the count reaches zero.
class local_latch {
public:
    explicit local_latch(std::size_t count) : _count(count) {}
    void count_down() {
        if (--_count == 0 && _waiter)
            io::reactor::current().schedule(std::exchange(_waiter, nullptr));
    }
    auto wait() {
        struct awaiter {
            local_latch* latch;
            bool await_ready() const noexcept { return latch->_count == 0; }
            void await_suspend(std::coroutine_handle<> h) noexcept { latch->_waiter = h; }
            void await_resume() const noexcept {}
        };
        return awaiter{this};
    }

private:
    std::size_t _count;
    std::coroutine_handle<> _waiter;
};

inline io::task<void> run_then_stop(io::task<void> body, io::reactor_group* group) {
    co_await std::move(body);
    group->stop();
}

inline std::string read_file(const std::string& path) {
    std::string out;
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return out;
    char buf[65536];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, f)) > 0) out.append(buf, n);
    std::fclose(f);
    return out;
}

inline void write_file(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "wb");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fclose(f), 0);
}

inline void append_file(const std::string& path, const std::string& bytes) {
    FILE* f = std::fopen(path.c_str(), "ab");
    ASSERT_NE(f, nullptr) << path;
    ASSERT_EQ(std::fwrite(bytes.data(), 1, bytes.size(), f), bytes.size());
    ASSERT_EQ(std::fclose(f), 0);
}

inline std::uint64_t file_size(const std::string& path) {
    struct stat st{};
    if (::stat(path.c_str(), &st) < 0) return 0;
    return static_cast<std::uint64_t>(st.st_size);
}

inline bool file_exists(const std::string& path) {
    struct stat st{};
    return ::stat(path.c_str(), &st) == 0;
}

// Path of an object's data file on a drive (mirrors drive_set's fan-out layout).
inline std::string data_file_path(const std::string& drive_path, const object_id& id) {
    char fan[4];
    std::snprintf(fan, sizeof fan, "%02x", static_cast<unsigned>(id.lo & 0xff));
    return drive_path + "/objects/" + fan + "/" + id.hex();
}

}  // namespace fjord::store::testing

// In a coroutine: fail the test and leave the coroutine when a condition does not hold.
#define CO_ASSERT_TRUE(cond)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            ADD_FAILURE() << "assertion failed: " #cond;                                           \
            co_return;                                                                             \
        }                                                                                          \
    } while (0)
