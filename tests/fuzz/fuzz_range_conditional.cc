// Fuzzes the GET request headers that are parsed from text alone: Range (s3::parse_range), the
// If-Match / If-None-Match ETag lists (s3::etag_list_matches) and the HTTP dates of
// If-(Un)Modified-Since (base::parse_http_date).
//
// Input: bytes 0-7 are the object size (little-endian, then shifted right by its low 6 bits so
// that small sizes are common); the rest is split at '\n' into the Range value, an ETag list, the
// object's ETag and a date. Invariants checked:
//   - a satisfiable range lies inside the object and is not empty; surrounding whitespace does not
//     change the answer; an unsatisfiable one is reported as invalid_range;
//   - "*" and the object's own quoted ETag match any list they are added to, and adding items to a
//     list never turns a match into a miss;
//   - a parsed date formats and parses back to the same time.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>

#include "base/clock.h"
#include "fuzz_check.h"
#include "s3/http_conditions.h"

namespace {

using namespace fjord;

struct fuzzed_headers {
    std::string_view range, etag_list, etag, date;
};

fuzzed_headers split_headers(std::string_view text) {
    fuzzed_headers out;
    std::string_view* fields[] = {&out.range, &out.etag_list, &out.etag, &out.date};
    for (std::string_view* field : fields) {
        std::size_t lf = text.find('\n');
        *field = text.substr(0, lf);
        text = lf == std::string_view::npos ? std::string_view{} : text.substr(lf + 1);
    }
    return out;
}

bool same_answer(const base::result<std::optional<s3::byte_range>>& a,
                 const base::result<std::optional<s3::byte_range>>& b) {
    if (a.code() != b.code()) return false;
    if (!a) return true;
    if (a->has_value() != b->has_value()) return false;
    return !a->has_value() || ((*a)->first == (*b)->first && (*a)->length == (*b)->length);
}

void check_range(std::string_view header, std::uint64_t size) {
    auto range = s3::parse_range(header, size);
    if (!range) {
        FUZZ_CHECK(range.code() == base::errc::invalid_range);
    } else if (*range) {
        const s3::byte_range& r = **range;
        FUZZ_CHECK(r.length >= 1);
        FUZZ_CHECK(r.first < size);
        FUZZ_CHECK(r.length <= size - r.first);
    }
    std::string padded = " \t" + std::string(header) + "\t ";
    FUZZ_CHECK(same_answer(range, s3::parse_range(padded, size)));
    // Suffix ranges always end at the last byte.
    if (range && *range && header.starts_with("bytes=-"))
        FUZZ_CHECK((*range)->first + (*range)->length == size);
}

bool plain_etag(std::string_view etag) {
    for (char c : etag)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '-')) return false;
    return !etag.empty();
}

void check_etag_list(std::string_view list, std::string_view etag_text) {
    std::string etag(etag_text);
    bool matches = s3::etag_list_matches(list, etag);
    std::string longer = std::string(list) + ", \"0123-unrelated\"";
    if (matches) FUZZ_CHECK(s3::etag_list_matches(longer, etag));
    FUZZ_CHECK(s3::etag_list_matches(std::string(list) + ",*", etag));
    if (plain_etag(etag)) {
        FUZZ_CHECK(s3::etag_list_matches(std::string(list) + ", \"" + etag + "\"", etag));
        FUZZ_CHECK(s3::etag_list_matches("W/\"" + etag + "\"", etag));
    }
}

void check_date(std::string_view text) {
    auto parsed = base::parse_http_date(text);
    // Times past 9999-12-31 (a leap second or day overflow in year 9999) have no four-digit year
    // to format back into.
    if (!parsed || *parsed >= 253402300800) return;
    std::string formatted = base::format_http_date(*parsed);
    auto again = base::parse_http_date(formatted);
    FUZZ_CHECK(again && *again == *parsed);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 8) return 0;
    std::uint64_t object_size = 0;
    std::memcpy(&object_size, data, 8);
    object_size >>= object_size & 63;
    std::string_view text(reinterpret_cast<const char*>(data + 8), size - 8);
    fuzzed_headers headers = split_headers(text);

    check_range(headers.range, object_size);
    check_range(headers.range, 0);
    check_range(headers.range, UINT64_MAX);
    check_etag_list(headers.etag_list, headers.etag);
    check_date(headers.date);
    check_date(text);
    return 0;
}
