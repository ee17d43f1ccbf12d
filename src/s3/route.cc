// A request's URL as S3 names it: bucket, key and query parameters (path or virtual-hosted style), and
// the two endpoints that are not S3 (router.h declares them).

#include <algorithm>

#include "base/encoding.h"
#include "s3/router.h"

namespace fjord::s3 {

namespace {
std::string_view host_without_port(std::string_view host) {
    if (!host.empty() && host.front() == '[') {
        auto close = host.find(']');
        return close == std::string_view::npos ? host : host.substr(0, close + 1);
    }
    auto colon = host.rfind(':');
    return colon == std::string_view::npos ? host : host.substr(0, colon);
}

}  // namespace

base::result<s3_request> route(const http::request_head& head,
                               const std::vector<std::string>& domains) {
    s3_request r;
    std::string_view path = head.path;
    std::string_view host = host_without_port(head.value_of("host"));
    std::string host_bucket;
    for (const auto& domain : domains) {
        if (host.size() > domain.size() + 1 &&
            base::iequals(host.substr(host.size() - domain.size()), domain) &&
            host[host.size() - domain.size() - 1] == '.') {
            host_bucket = base::to_lower(host.substr(0, host.size() - domain.size() - 1));
            break;
        }
    }
    if (path.empty() || path.front() != '/')
        return base::fail(base::errc::invalid_uri, "bad request path");
    std::string_view rest = path.substr(1);
    if (host_bucket.empty()) {
        auto slash = rest.find('/');
        auto bucket = base::uri_decode(rest.substr(0, slash), false);
        if (!bucket)
            return base::fail(base::errc::invalid_uri, "bad percent-encoding in the bucket name");
        r.bucket = std::move(*bucket);
        rest = slash == std::string_view::npos ? std::string_view{} : rest.substr(slash + 1);
    } else {
        r.bucket = std::move(host_bucket);
    }
    auto key = base::uri_decode(rest, false);
    if (!key) return base::fail(base::errc::invalid_uri, "bad percent-encoding in the key");
    r.key = std::move(*key);
    // Keys and bucket names are UTF-8, as S3's are: bytes that are not (%ff, the overlong %c0%ae, the
    // surrogate %ed%a0%80) could be stored but never listed in a well-formed document.
    if (!base::is_valid_utf8(r.key) || !base::is_valid_utf8(r.bucket))
        return base::fail(base::errc::invalid_uri,
                          "Couldn't parse the specified URI: the key is not UTF-8.");
    if (r.key.size() > 1024) return base::fail(base::errc::key_too_long, "Your key is too long");
    std::string_view query = head.query;
    while (!query.empty()) {
        auto amp = query.find('&');
        std::string_view part = query.substr(0, amp);
        query = amp == std::string_view::npos ? std::string_view{} : query.substr(amp + 1);
        if (part.empty()) continue;
        auto eq = part.find('=');
        auto name = base::uri_decode(part.substr(0, eq), true);
        auto value = base::uri_decode(
            eq == std::string_view::npos ? std::string_view{} : part.substr(eq + 1), true);
        if (!name || !value)
            return base::fail(base::errc::invalid_uri, "bad percent-encoding in the query");
        // Parameters come back in listings (prefix, markers, delimiter): UTF-8 only, as keys. The
        // response-* overrides become header values instead, which may hold other bytes.
        if (!base::is_valid_utf8(*name) ||
            (!name->starts_with("response-") && !base::is_valid_utf8(*value)))
            return base::fail(base::errc::invalid_uri,
                              "Couldn't parse the specified URI: a query parameter is not UTF-8.");
        r.query.emplace_back(std::move(*name), std::move(*value));
    }
    r.resource = "/" + r.bucket + (r.key.empty() ? "" : "/" + r.key);
    return r;
}

bool is_health_check(const http::request_head& head) {
    return (head.verb == http::method::get || head.verb == http::method::head) &&
           (head.path == "/health/live" || head.path == "/health/ready");
}

// GET /metrics, path-style and without a query. It shadows only a bare ListObjects (v1, no parameters)
// of a bucket named "metrics": SDKs list with parameters (list-type=2, encoding-type=url), and a
// virtual-hosted request for the key "metrics" routes to its own bucket and key.
bool is_metrics_request(const http::request_head& head, const s3_request& r) {
    return head.verb == http::method::get && head.path == "/metrics" && head.query.empty() &&
           r.bucket == "metrics" && r.key.empty();
}

bool s3_request::has(std::string_view name) const {
    return std::any_of(query.begin(), query.end(), [&](const auto& p) { return p.first == name; });
}

std::string_view s3_request::param(std::string_view name) const {
    for (const auto& [k, v] : query)
        if (k == name) return v;
    return {};
}

}  // namespace fjord::s3
