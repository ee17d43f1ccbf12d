#include "cli/progress.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>

#include "base/clock.h"
#include "cli/options.h"

namespace fjord::cli {

progress_line::progress_line(progress_options options) : _options(std::move(options)) {
    _total_bytes.store(_options.total_bytes);
    _start_ns = base::monotonic_now_ns();
    if (_options.force || isatty(STDERR_FILENO)) _thread = std::thread([this] { run(); });
}

void progress_line::finish() {
    if (!_thread.joinable()) return;
    {
        std::lock_guard lock(_mutex);
        _stop = true;
    }
    _wake.notify_all();
    _thread.join();
    std::fputs("\r\033[K", stderr);  // erase the line: the final summary follows on stdout
    std::fflush(stderr);
}

void progress_line::run() {
    std::unique_lock lock(_mutex);
    while (!_stop) {  // bounded by finish()
        _wake.wait_for(lock, std::chrono::milliseconds(_options.interval_ms),
                       [this] { return _stop; });
        if (!_stop) draw();
    }
}

void progress_line::draw() {
    double seconds = static_cast<double>(base::monotonic_now_ns() - _start_ns) / 1e9;
    std::uint64_t bytes = _bytes.load(std::memory_order_relaxed),
                  items = _items.load(std::memory_order_relaxed);
    std::uint64_t total = _total_bytes.load(std::memory_order_relaxed);
    std::string line = _options.label + ": " + format_bytes(bytes);
    if (total > 0) line += " / " + format_bytes(total);
    line += ", " + std::to_string(items);
    if (_options.total_items > 0) line += "/" + std::to_string(_options.total_items);
    char rate[96];
    std::snprintf(rate, sizeof rate, " %s, %.3f GiB/s, %.1f s", _options.item_name,
                  gib_per_s(bytes, seconds), seconds);
    line += rate;
    std::fprintf(stderr, "\r\033[K%s", line.c_str());
    std::fflush(stderr);
}

std::string format_bytes(std::uint64_t bytes) {
    char text[32];
    if (bytes >= (1ULL << 30))
        std::snprintf(text, sizeof text, "%.2f GiB", static_cast<double>(bytes) / (1ULL << 30));
    else if (bytes >= (1ULL << 20))
        std::snprintf(text, sizeof text, "%.1f MiB", static_cast<double>(bytes) / (1ULL << 20));
    else if (bytes >= (1ULL << 10))
        std::snprintf(text, sizeof text, "%.1f KiB", static_cast<double>(bytes) / (1ULL << 10));
    else
        std::snprintf(text, sizeof text, "%llu B", static_cast<unsigned long long>(bytes));
    return text;
}

}  // namespace fjord::cli
