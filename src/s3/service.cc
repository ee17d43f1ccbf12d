#include "s3/service.h"
#include "s3/operations.h"
#include "s3/router.h"

#include <algorithm>
#include <cstdio>

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "io/reactor.h"
#include "base/token_bucket.h"
#include "s3/access_log.h"
#include "s3/payload.h"
#include "s3/xml.h"

namespace fjord::s3 {

std::string next_request_id() {
    thread_local std::uint64_t counter = static_cast<std::uint64_t>(base::unix_now_ms()) << 16;
    char buf[24];
    std::snprintf(buf, sizeof buf, "%02X%014llX",
                  io::reactor::on_reactor_thread() ? io::reactor::current().core() : 0,
                  static_cast<unsigned long long>(++counter & 0xFFFFFFFFFFFFFFULL));
    return buf;
}

service::service(store::object_store& store, service_options options, base::metrics& metrics,
                 access_log* log)
    : _store(store),
      _options(std::move(options)),
      _users(metrics.cores(), _options.credentials),
      _metrics(metrics),
      _access_log(log) {
    for (unsigned c = 0; c < metrics.cores(); ++c)
        _policy_caches.push_back(std::make_unique<policy_cache>());
    // A signature scoped to another region is refused, as S3 refuses it (the client learns the right one
    // from the error's <Region>).
    _options.auth.region = _options.region;
}

base::metrics::shard& service::local_metrics() const {
    return io::reactor::on_reactor_thread() ? _metrics.for_core(io::reactor::current().core())
                                            : _metrics.shared();
}

io::task<void> service::handle(http::exchange& ex) {
    context c{*this, ex, {}, next_request_id(), {}};
    c.received_ms = base::unix_now_ms();
    co_await authenticate_and_dispatch(c);
    local_metrics().count_request(c.op, ex.status());
    log_access(c);
}

io::task<void> service::refuse(http::exchange& ex, const base::error& err,
                               std::int64_t retry_after_ms) {
    context c{*this, ex, {}, next_request_id(), {}};
    c.received_ms = base::unix_now_ms();
    if (auto routed = route(ex.head(), _options.domains)) {
        c.req = std::move(*routed);
        c.chosen = choose_operation(ex.head(), c.req);
        const bool admin = is_health_check(ex.head()) || is_metrics_request(ex.head(), c.req);
        c.op = admin ? base::operation_class::admin : c.chosen.counted_as();
        c.operation = c.chosen.name();
    }
    co_await send_error(c, err, {{"x-amz-retry-after", std::to_string(retry_after_ms)}});
    local_metrics().count_request(c.op, ex.status());
    log_access(c);
}

namespace {
bool is_anonymous(const http::request_head& head, const s3_request& r) {
    return head.find("authorization") == nullptr && !r.has("X-Amz-Signature") &&
           !r.has("X-Amz-Credential") && !r.has("Signature") && !r.has("AWSAccessKeyId");
}
}  // namespace

io::task<void> authenticate_and_dispatch(context& c) {
    const http::request_head& head = c.ex.head();
    if (is_health_check(head)) {
        c.op = base::operation_class::admin;
        c.operation = "Health";
        std::optional<std::string> why;
        if (head.path == "/health/ready" && c.svc.options().not_ready)
            why = c.svc.options().not_ready();
        (void)co_await c.ex.send_all(why ? 503 : 200, c.common_headers(),
                                     why ? *why + "\n" : std::string());
        co_return;
    }
    auto routed = route(head, c.svc.options().domains);
    if (!routed) co_return co_await send_error(c, routed.err());
    c.req = std::move(*routed);
    const bool metrics = is_metrics_request(head, c.req);
    c.chosen = choose_operation(head, c.req);
    c.op = metrics ? base::operation_class::admin : c.chosen.counted_as();
    c.operation = metrics ? "GetMetrics" : c.chosen.name();
    if (metrics && c.svc.options().metrics_public) co_return co_await send_metrics(c);
    // A request with no signature at all is anonymous: only a bucket policy can let it through
    // (check_access); /metrics stays signed unless --metrics-public.
    if (!metrics && is_anonymous(head, c.req)) co_return co_await dispatch(c);
    std::vector<auth::header_view> headers;
    headers.reserve(head.headers.size());
    for (const auto& h : head.headers) headers.push_back({h.name, h.value});
    auth::request_view view{head.method_text, head.path, head.query, headers};
    auto auth = auth::verify_request(view, c.svc.users().local(c.svc.store()),
                                     base::unix_now_ms() / 1000, c.svc.options().auth);
    if (!auth) {
        log_auth_failure(c, auth.err());
        co_return co_await send_error(c, auth.err());
    }
    c.auth = std::move(*auth);
    if (metrics) co_return co_await send_metrics(c);
    co_await dispatch(c);
}

namespace {
// A request for a bucket this core does not know: it may have been made through another node a moment
// ago (bucket_catalog::learn_bucket).
bool names_unknown_bucket(const s3_request& r, const chosen_operation& chosen,
                          const store::object_store& store) {
    const bool creates = chosen.op && chosen.op->access == access_kind::create_bucket;
    return !r.bucket.empty() && !creates && r.bucket != system_bucket &&
           !store.bucket_exists(r.bucket);
}
}  // namespace

// The order docs/security.md states: the bucket is learnt, access is checked (a refused operation's
// too, so an anonymous caller learns nothing of what Fjord implements), the write's ACL is checked
// against the bucket's ownership, the versionId is parsed; then the operation runs.
io::task<void> dispatch(context& c) {
    const chosen_operation& chosen = c.chosen;
    store::bucket_catalog* catalog = c.svc.store().lagging_catalog();
    if (catalog && names_unknown_bucket(c.req, chosen, c.svc.store()))
        if (auto learned = co_await catalog->learn_bucket(c.req.bucket); !learned)
            co_return co_await send_error(c, learned.err());
    const access_kind access = chosen.op ? chosen.op->access : access_kind::other;
    if (access != access_kind::form)
        if (auto allowed = check_access(c, access, chosen.name()); !allowed)
            co_return co_await send_error(c, allowed.err());
    if (const names_acl acl = chosen.op ? chosen.op->acl : names_acl::no; acl != names_acl::no)
        if (auto resolved = resolve_write_acl(c, c.ex.head(), acl == names_acl::bucket); !resolved)
            co_return co_await send_error(c, resolved.err());
    if (!c.req.key.empty() && c.req.has("versionId")) {
        auto version = requested_version(c.svc.store(), c.req);
        if (!version) co_return co_await send_error(c, version.err());
        c.version = std::move(*version);
    }
    if (!chosen.op) co_return co_await send_not_an_operation(c, chosen.refusal);
    co_await chosen.op->run(c);
}

io::task<base::result<std::string>> read_verified_body(context& c, std::size_t limit,
                                                       bool body_checksums) {
    const http::request_head& head = c.ex.head();
    payload_options po;
    po.aws_chunked = c.auth.mode == auth::payload_mode::streaming_signed ||
                     c.auth.mode == auth::payload_mode::streaming_signed_trailer ||
                     c.auth.mode == auth::payload_mode::streaming_unsigned_trailer;
    if (po.aws_chunked)
        po.decoded_length = base::parse_u64(head.value_of("x-amz-decoded-content-length"));
    if (body_checksums) FJORD_CO_TRY(checksum_options(head, po));
    std::string_view content_md5 = head.value_of("content-md5");
    if (!content_md5.empty()) {
        auto raw = base::base64_decode(content_md5);
        if (!raw || raw->size() != 16)
            co_return base::fail(base::errc::invalid_digest,
                                 "The Content-MD5 you specified is not valid.");
        po.content_md5 = *raw;
    }
    payload_source source(c.ex.body(), c.auth, po);
    std::string body;
    std::vector<std::byte> chunk(16 * 1024);
    for (;;) {
        auto n = co_await source.read(chunk.data(), chunk.size());
        if (!n) co_return n.as_failure();
        if (*n == 0) break;
        if (body.size() + *n > limit)
            co_return base::fail(base::errc::malformed_xml, "request body too large");
        body.append(reinterpret_cast<const char*>(chunk.data()), *n);
    }
    FJORD_CO_TRY(source.verify());
    co_return body;
}

}  // namespace fjord::s3
