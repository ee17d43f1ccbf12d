#include "base/clock.h"

#include <cstdio>
#include <cstring>

namespace fjord::base {

namespace {
constexpr const char* day_names[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
constexpr const char* month_names[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};

bool digits(std::string_view text, size_t pos, size_t count, int& out) {
    if (pos + count > text.size()) return false;
    int value = 0;
    for (size_t i = pos; i < pos + count; ++i) {
        if (text[i] < '0' || text[i] > '9') return false;
        value = value * 10 + (text[i] - '0');
    }
    out = value;
    return true;
}

std::optional<std::time_t> make_time(int year, int month, int day, int hour, int minute,
                                     int second) {
    if (month < 1 || month > 12 || day < 1 || day > 31 || hour > 23 || minute > 59 || second > 60)
        return std::nullopt;
    tm t{};
    t.tm_year = year - 1900;
    t.tm_mon = month - 1;
    t.tm_mday = day;
    t.tm_hour = hour;
    t.tm_min = minute;
    t.tm_sec = second;
    return timegm(&t);
}
}  // namespace

namespace {
thread_local clock_source* t_clock = nullptr;
}  // namespace

void set_thread_clock(clock_source* c) { t_clock = c; }
bool thread_clock_simulated() { return t_clock != nullptr; }

std::int64_t unix_now_ms() {
    if (t_clock) [[unlikely]]
        return t_clock->unix_ms();
    timespec ts{};
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000 + ts.tv_nsec / 1000000;
}

std::int64_t monotonic_now_ns() {
    if (t_clock) [[unlikely]]
        return t_clock->monotonic_ns();
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<std::int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

std::string format_http_date(std::time_t seconds) {
    // Every response has a Date and most a Last-Modified: a few recent seconds stay formatted.
    thread_local std::pair<std::time_t, std::string> recent[4];
    auto& slot = recent[static_cast<std::size_t>(seconds) & 3];
    if (slot.first == seconds && !slot.second.empty()) return slot.second;
    slot = {seconds, format_http_date_uncached(seconds)};
    return slot.second;
}

std::string format_http_date_uncached(std::time_t seconds) {
    tm t{};
    gmtime_r(&seconds, &t);
    char buf[64];
    snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d GMT", day_names[t.tm_wday],
             t.tm_mday, month_names[t.tm_mon], t.tm_year + 1900, t.tm_hour, t.tm_min, t.tm_sec);
    return buf;
}

std::optional<std::time_t> parse_http_date(std::string_view text) {
    // RFC 1123: "Sun, 06 Nov 1994 08:49:37 GMT"
    if (text.size() == 29 && text[3] == ',' && text.substr(26) == "GMT") {
        int day, year, hour, minute, second;
        if (!digits(text, 5, 2, day) || !digits(text, 12, 4, year) || !digits(text, 17, 2, hour) ||
            !digits(text, 20, 2, minute) || !digits(text, 23, 2, second))
            return std::nullopt;
        std::string_view month = text.substr(8, 3);
        for (int m = 0; m < 12; ++m)
            if (month == month_names[m]) return make_time(year, m + 1, day, hour, minute, second);
        return std::nullopt;
    }
    // ISO 8601: "2026-11-29T16:20:47Z" or with ".123Z"
    if (text.size() >= 20 && text[4] == '-' && text[10] == 'T') {
        int year, month, day, hour, minute, second;
        if (!digits(text, 0, 4, year) || !digits(text, 5, 2, month) || !digits(text, 8, 2, day) ||
            !digits(text, 11, 2, hour) || !digits(text, 14, 2, minute) ||
            !digits(text, 17, 2, second))
            return std::nullopt;
        if (text.back() != 'Z') return std::nullopt;
        return make_time(year, month, day, hour, minute, second);
    }
    return std::nullopt;
}

std::string format_iso8601_ms(std::int64_t unix_ms) {
    std::time_t seconds = static_cast<std::time_t>(unix_ms / 1000);
    tm t{};
    gmtime_r(&seconds, &t);
    char buf[64];
    snprintf(buf, sizeof buf, "%04d-%02d-%02dT%02d:%02d:%02d.%03dZ", t.tm_year + 1900, t.tm_mon + 1,
             t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec, static_cast<int>(unix_ms % 1000));
    return buf;
}

std::string format_amz_date(std::time_t seconds) {
    tm t{};
    gmtime_r(&seconds, &t);
    char buf[64];
    snprintf(buf, sizeof buf, "%04d%02d%02dT%02d%02d%02dZ", t.tm_year + 1900, t.tm_mon + 1,
             t.tm_mday, t.tm_hour, t.tm_min, t.tm_sec);
    return buf;
}

std::optional<std::time_t> parse_amz_date(std::string_view text) {
    int year, month, day, hour, minute, second;
    if (text.size() != 16 || text[8] != 'T' || text[15] != 'Z') return std::nullopt;
    if (!digits(text, 0, 4, year) || !digits(text, 4, 2, month) || !digits(text, 6, 2, day) ||
        !digits(text, 9, 2, hour) || !digits(text, 11, 2, minute) || !digits(text, 13, 2, second))
        return std::nullopt;
    return make_time(year, month, day, hour, minute, second);
}

}  // namespace fjord::base
