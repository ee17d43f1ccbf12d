#include "s3/access_log.h"

#include <limits.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/ops.h"
#include "io/reactor.h"

namespace fjord::s3 {

namespace {

// JSON string contents; bytes that are not UTF-8 become U+FFFD, so a line is always valid JSON.
void append_json_string(std::string& out, std::string_view text) {
    out += '"';
    std::uint32_t cp = 0;
    for (std::size_t i = 0; i < text.size();) {
        std::size_t len = base::decode_utf8(text, i, cp);
        if (len == 0) {
            out += "\\ufffd";
            ++i;
            continue;
        }
        char c = text[i];
        if (c == '"' || c == '\\') {
            out += '\\';
            out += c;
        } else if (cp < 0x20 || cp == 0x7f) {
            char escaped[8];
            std::snprintf(escaped, sizeof escaped, "\\u%04x", cp);
            out += escaped;
        } else {
            out.append(text.substr(i, len));
        }
        i += len;
    }
    out += '"';
}

void append_field(std::string& out, std::string_view name, std::string_view value) {
    out += out.size() > 1 ? ",\"" : "\"";
    out += name;
    out += "\":";
    append_json_string(out, value);
}

void append_number(std::string& out, std::string_view name, std::int64_t value) {
    out += ",\"";
    out += name;
    out += "\":";
    out += std::to_string(value);
}

}  // namespace

access_log::access_log(int fd, unsigned cores, std::size_t max_pending_bytes)
    : _fd(fd), _max_pending_bytes(max_pending_bytes), _cores(cores) {
    // A write to a pipe or terminal is atomic only up to PIPE_BUF; to a regular file opened for appending,
    // whole (short writes aside, which only a full disk or a signal makes).
    struct stat st{};
    _max_write_bytes = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? 1 << 20 : PIPE_BUF;
}

std::string access_log::format(const access_entry& e) {
    std::string line = "{";
    append_field(line, "time", base::format_iso8601_ms(e.time_ms));
    append_field(line, "remote", e.remote);
    append_field(line, "access_key", e.access_key);
    append_field(line, "operation", e.operation);
    append_field(line, "bucket", e.bucket);
    append_field(line, "key", e.key);
    append_number(line, "status", e.status);
    append_number(line, "bytes_in", static_cast<std::int64_t>(e.bytes_in));
    append_number(line, "bytes_out", static_cast<std::int64_t>(e.bytes_out));
    append_number(line, "duration_us", e.duration_us);
    append_field(line, "request_id", e.request_id);
    line += "}\n";
    return line;
}

void access_log::record(const access_entry& entry) {
    per_core& slot = _cores[io::reactor::current().core()];
    std::string line = format(entry);
    if (slot.pending.size() + line.size() > _max_pending_bytes) {
        ++slot.dropped;
        std::int64_t now_ms = base::monotonic_now_ns() / 1'000'000;
        if (now_ms - slot.last_warning_ms >= 60'000) {
            slot.last_warning_ms = now_ms;
            LOG_WARN(
                "access log: the log file is not keeping up; %llu lines dropped on this core so far",
                static_cast<unsigned long long>(slot.dropped));
        }
        return;
    }
    slot.pending += line;
    if (!slot.writing) {
        slot.writing = true;
        io::spawn(drain(&slot));
    }
}

std::uint64_t access_log::dropped_here() const {
    return _cores[io::reactor::current().core()].dropped;
}

io::task<void> access_log::drain(per_core* slot) {
    io::reactor::current().hold();  // a shutdown waits for the lines already logged
    std::string out;
    while (!slot->pending.empty()) {
        out.swap(slot->pending);
        slot->pending.clear();
        std::size_t done = 0;
        while (done < out.size()) {
            // Whole lines only, so that no other core's write (or, on stderr, another log line) lands
            // inside one: every core's writes are appends, but only each write by itself is atomic.
            std::size_t len = std::min(out.size() - done, _max_write_bytes);
            std::size_t last_newline = out.rfind('\n', done + len - 1);
            if (last_newline != std::string::npos && last_newline >= done)
                len = last_newline + 1 - done;
            else
                len = out.find('\n', done) + 1 - done;  // one line longer than a write: alone
            // Offset -1: the file's position, which O_APPEND keeps at its end for every core's writes.
            int rc = co_await io::write(_fd, out.data() + done, static_cast<unsigned>(len),
                                        static_cast<std::uint64_t>(-1));
            if (rc <= 0) {
                LOG_WARN("access log: write failed: %s; %zu bytes of lines lost",
                         rc < 0 ? strerror(-rc) : "no progress", out.size() - done);
                break;
            }
            done += static_cast<std::size_t>(rc);
        }
        out.clear();
    }
    slot->writing = false;
    io::reactor::current().release();
}

}  // namespace fjord::s3
