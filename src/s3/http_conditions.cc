#include "s3/http_conditions.h"

#include <algorithm>

#include "base/encoding.h"
#include "s3/service_internal.h"

namespace fjord::s3 {

bool etag_list_matches(std::string_view list, const std::string& etag) {
    while (!list.empty()) {
        auto comma = list.find(',');
        std::string_view item = base::trim(list.substr(0, comma));
        list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
        if (item == "*") return true;
        if (auto u = unquote_etag(item); u && *u == etag) return true;
    }
    return false;
}

base::result<std::optional<byte_range>> parse_range(std::string_view header, std::uint64_t size) {
    header = base::trim(header);
    if (!header.starts_with("bytes=")) return std::optional<byte_range>{};
    std::string_view spec = header.substr(6);
    if (spec.find(',') != std::string_view::npos) return std::optional<byte_range>{};
    auto dash = spec.find('-');
    if (dash == std::string_view::npos) return std::optional<byte_range>{};
    std::string_view a = base::trim(spec.substr(0, dash)), b = base::trim(spec.substr(dash + 1));
    auto unsatisfiable =
        base::fail(base::errc::invalid_range, "The requested range is not satisfiable");
    if (a.empty()) {
        auto n = base::parse_u64(b);
        if (!n) return std::optional<byte_range>{};
        if (*n == 0 || size == 0) return unsatisfiable;
        std::uint64_t len = std::min(*n, size);
        return std::optional<byte_range>{byte_range{size - len, len}};
    }
    auto first = base::parse_u64(a);
    if (!first) return std::optional<byte_range>{};
    std::uint64_t last = size == 0 ? 0 : size - 1;
    if (!b.empty()) {
        auto l = base::parse_u64(b);
        if (!l || *l < *first) return std::optional<byte_range>{};
        last = std::min(*l, last);
    }
    if (*first >= size) return unsatisfiable;
    return std::optional<byte_range>{byte_range{*first, last - *first + 1}};
}

}  // namespace fjord::s3
