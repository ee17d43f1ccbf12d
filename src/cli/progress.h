#pragma once

// progress_line: a one-line live status on stderr for long CLI runs (`fjord cp`, `fjord bench s3`).
// Only when stderr is a terminal: piped or redirected output stays free of carriage returns. Workers
// on any core add to two relaxed atomics; an ordinary thread (never a reactor) redraws the line every
// `interval_ms` until finish(), which erases it.
//
// Lifecycle and threading: created and finished by the thread that owns the run; add() from any
// thread. finish() is idempotent and runs from the destructor too.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

namespace fjord::cli {

struct progress_options {
    std::string label;              // printed first ("cp", "put")
    std::uint64_t total_bytes = 0;  // 0: unknown (no "of N" part)
    std::uint64_t total_items = 0;  // 0: unknown
    const char* item_name = "ops";  // "files", "ops"
    std::int64_t interval_ms = 250;
    bool force = false;  // draw even when stderr is not a terminal (tests)
};

class progress_line {
public:
    explicit progress_line(progress_options options);
    ~progress_line() { finish(); }
    progress_line(const progress_line&) = delete;
    progress_line& operator=(const progress_line&) = delete;

    void add(std::uint64_t items, std::uint64_t bytes) {
        _items.fetch_add(items, std::memory_order_relaxed);
        _bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    void add_total_bytes(std::uint64_t bytes) {
        _total_bytes.fetch_add(bytes, std::memory_order_relaxed);
    }
    bool active() const { return _thread.joinable(); }
    void finish();

private:
    void run();
    void draw();

    progress_options _options;
    std::atomic<std::uint64_t> _items{0}, _bytes{0}, _total_bytes{0};
    std::int64_t _start_ns = 0;
    std::mutex _mutex;
    std::condition_variable _wake;
    bool _stop = false;
    std::thread _thread;
};

// "1.23 GiB", "512.0 MiB", "17 B".
std::string format_bytes(std::uint64_t bytes);

}  // namespace fjord::cli
