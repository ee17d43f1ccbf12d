// Bucket operations: ListBuckets, CreateBucket (object and KV buckets, with their owner and ACL),
// DeleteBucket, HeadBucket, GetBucketLocation.
#include "s3/service.h"
#include "s3/operations.h"

#include "base/clock.h"
#include "base/encoding.h"
#include "base/log.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {

// A KV bucket is asked for with x-fjord-bucket-type: kv on CreateBucket (docs/kv.md), and its options
// with x-fjord-kv-capacity-bytes, x-fjord-kv-ttl-seconds and x-fjord-kv-write-ack (nvme or dram).
base::result<std::optional<store::kv_bucket_options>> kv_bucket_options_of(
    const http::request_head& head) {
    std::string_view type = head.value_of("x-fjord-bucket-type");
    if (type.empty() || type == "object") return std::optional<store::kv_bucket_options>{};
    if (type != "kv")
        return base::fail(base::errc::invalid_argument, "x-fjord-bucket-type must be kv or object");
    store::kv_bucket_options o;
    if (auto v = head.value_of("x-fjord-kv-capacity-bytes"); !v.empty()) {
        auto n = base::parse_u64(v);
        if (!n) return base::fail(base::errc::invalid_argument, "bad x-fjord-kv-capacity-bytes");
        o.capacity_bytes = *n;
    }
    if (auto v = head.value_of("x-fjord-kv-ttl-seconds"); !v.empty()) {
        auto n = base::parse_u64(v);
        if (!n || *n > 100ULL * 365 * 86400)
            return base::fail(base::errc::invalid_argument, "bad x-fjord-kv-ttl-seconds");
        o.ttl_seconds = static_cast<std::int64_t>(*n);
    }
    std::string_view ack = head.value_of("x-fjord-kv-write-ack");
    if (ack == "dram")
        o.ack = store::kv_write_ack::dram;
    else if (!ack.empty() && ack != "nvme")
        return base::fail(base::errc::invalid_argument,
                          "x-fjord-kv-write-ack must be nvme or dram");
    return std::optional<store::kv_bucket_options>{o};
}

}  // namespace

bool valid_bucket_name(std::string_view name) {
    if (name.size() < 3 || name.size() > 63) return false;
    for (char c : name)
        if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '.' || c == '-'))
            return false;
    auto alnum = [](char c) { return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9'); };
    if (!alnum(name.front()) || !alnum(name.back())) return false;
    if (name.find("..") != std::string_view::npos || name.find(".-") != std::string_view::npos ||
        name.find("-.") != std::string_view::npos)
        return false;
    if (name.starts_with("xn--") || name.starts_with("sthree-") || name.ends_with("-s3alias") ||
        name.ends_with("--ol-s3"))
        return false;
    int dots = 0;
    bool digits_and_dots = true;
    for (char c : name) {
        if (c == '.')
            ++dots;
        else if (c < '0' || c > '9')
            digits_and_dots = false;
    }
    return !(digits_and_dots && dots == 3);  // looks like an IPv4 address
}

namespace {

// ListBuckets' optional paging: max-buckets (1 to 10,000), continuation-token (the base64 of the last
// name sent, as in ListObjectsV2) and prefix.
struct bucket_page_request {
    std::size_t max_buckets = SIZE_MAX;
    std::string after;
    std::string prefix;
};

base::result<bucket_page_request> parse_bucket_page(const s3_request& r) {
    bucket_page_request p;
    p.prefix = std::string(r.param("prefix"));
    if (!xml_representable(p.prefix))  // echoed in <Prefix>, which XML 1.0 could not carry
        return base::fail(base::errc::invalid_argument,
                          "prefix holds a character XML cannot carry");
    if (r.has("max-buckets")) {
        auto n = base::parse_u64(r.param("max-buckets"));
        if (!n || *n < 1 || *n > 10000)
            return base::fail(base::errc::invalid_argument,
                              "max-buckets must be an integer from 1 to 10000");
        p.max_buckets = *n;
    }
    if (!r.param("continuation-token").empty()) {
        auto decoded = base::base64_decode(r.param("continuation-token"));
        if (!decoded || decoded->empty())
            return base::fail(base::errc::invalid_argument,
                              "The continuation token provided is incorrect");
        p.after = *decoded;
    }
    return p;
}

}  // namespace

io::task<base::result<void>> set_bucket_attribute(const context& c, std::string bucket,
                                                  std::string name,
                                                  std::optional<std::string> value) {
    auto attributes = offered(c.svc.store().attributes_of(bucket), bucket, "configuration");
    if (!attributes) co_return attributes.as_failure();
    co_return co_await (*attributes)
        ->set_bucket_attribute(std::move(bucket), std::move(name), std::move(value));
}

io::task<void> list_buckets(context& c) {
    auto paging = parse_bucket_page(c.req);
    if (!paging) co_return co_await send_error(c, paging.err());
    auto buckets = c.svc.store().list_buckets();
    std::sort(buckets.begin(), buckets.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    xml_writer x;
    x.open("ListAllMyBucketsResult", s3_xmlns);
    x.open("Owner")
        .element("ID", c.auth.access_key)
        .element("DisplayName", c.auth.access_key)
        .close("Owner");
    x.open("Buckets");
    std::size_t sent = 0;
    std::string last;
    bool more = false;
    for (const auto& b : buckets) {
        if (!b.name.starts_with(paging->prefix) || b.name <= paging->after) continue;
        if (b.name == system_bucket) continue;
        if (!c.svc.users().is_root(c.auth.access_key) && !owns(c, b))
            continue;  // a user sees its own
        if (sent == paging->max_buckets) {
            more = true;
            break;
        }
        x.open("Bucket")
            .element("Name", b.name)
            .element("CreationDate", base::format_iso8601_ms(b.created_ms))
            .element("BucketRegion", c.svc.options().region)
            .close("Bucket");
        ++sent, last = b.name;
    }
    x.close("Buckets");
    if (more) x.element("ContinuationToken", base::base64_encode(last));
    if (c.req.has("prefix")) x.element("Prefix", paging->prefix);
    x.close("ListAllMyBucketsResult");
    co_await send_xml(c, 200, x.take());
}

io::task<void> create_bucket(context& c) {
    if (!valid_bucket_name(c.req.bucket))
        co_return co_await send_error(
            c, {base::errc::invalid_bucket_name, "The specified bucket is not valid."});
    // The optional CreateBucketConfiguration body only names a location; any region is accepted.
    std::vector<std::byte> scratch(4096);
    std::size_t total = 0;
    for (;;) {
        auto n = co_await c.ex.body().read(scratch.data(), scratch.size());
        if (!n) co_return co_await send_error(c, n.err());
        if (*n == 0) break;
        total += *n;
        if (total > 64 * 1024)
            co_return co_await send_error(c, {base::errc::malformed_xml, "request body too large"});
    }
    auto kv = kv_bucket_options_of(c.ex.head());
    if (!kv) co_return co_await send_error(c, kv.err());
    auto created = co_await create_owned_bucket(c, *kv);
    if (!created) co_return co_await send_error(c, created.err());
    auto headers = c.common_headers();
    headers.emplace_back("Location", "/" + c.req.bucket);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> delete_bucket(context& c) {
    auto deleted = co_await c.svc.store().delete_bucket(c.req.bucket);
    if (!deleted) co_return co_await send_error(c, deleted.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

io::task<void> head_bucket(context& c) {
    if (!c.svc.store().bucket_exists(c.req.bucket))
        co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
    auto headers = c.common_headers();
    headers.emplace_back("x-amz-bucket-region", c.svc.options().region);
    (void)co_await c.ex.send_all(200, headers, "");
}

io::task<void> bucket_location(context& c) {
    if (!c.svc.store().bucket_exists(c.req.bucket))
        co_return co_await send_error(c, {base::errc::no_such_bucket, "no such bucket"});
    xml_writer x;
    x.open("LocationConstraint", s3_xmlns);
    std::string body = x.take();
    if (c.svc.options().region != "us-east-1")
        base::append_xml_escaped(body, c.svc.options().region);
    body += "</LocationConstraint>";
    co_await send_xml(c, 200, std::move(body));
}

io::task<base::result<void>> create_owned_bucket(
    const context& c, const std::optional<store::kv_bucket_options>& kv) {
    // Not this core's view: a bucket another node just deleted must not be answered as re-created.
    base::result<std::optional<store::bucket_info>> now = c.svc.store().find_bucket(c.req.bucket);
    if (store::bucket_catalog* catalog = c.svc.store().lagging_catalog())
        now = co_await catalog->find_bucket_now(c.req.bucket);
    if (!now) co_return now.as_failure();
    const auto& existing = *now;
    if (existing && !owns(c, *existing))
        co_return base::fail(base::errc::bucket_already_exists,
                             "The requested bucket name is not available.");
    // S3 in us-east-1 answers a re-creation of one's own bucket with 200 and resets its ACL (legacy
    // compatibility); elsewhere, and for KV buckets (whose options may differ), it is an error.
    if (existing && !kv && !c.svc.store().blocks_of(c.req.bucket) &&
        c.svc.options().region == "us-east-1")
        co_return co_await reset_bucket_acl(c, *existing);
    const bool root = c.svc.users().is_root(c.auth.access_key);
    if (kv && !root)
        co_return base::fail(base::errc::access_denied, "Only the root user creates KV buckets");
    if (kv) {
        store::kv_buckets* maker = c.svc.store().kv();
        if (!maker)
            co_return base::fail(base::errc::not_implemented,
                                 "this store has no KV tier (bucket " + c.req.bucket + ")");
        co_return co_await maker->create_kv_bucket(c.req.bucket, *kv);
    }
    FJORD_CO_TRY(co_await c.svc.store().create_bucket(c.req.bucket));
    // Each attribute is its own change: a crash between them leaves the bucket root's, or
    // BucketOwnerEnforced; the caller was never told it exists. So is a failure: the bucket goes.
    auto configured = co_await configure_new_bucket(c, root);
    if (!configured) (void)co_await c.svc.store().delete_bucket(c.req.bucket);
    co_return configured;
}

io::task<base::result<void>> reset_bucket_acl(const context& c, const store::bucket_info& bucket) {
    if (ownership_of(bucket) == object_ownership::enforced) co_return base::result<void>{};
    const std::string owner = owner_id(c, bucket);
    auto named = acl_from_headers(c.ex.head(), owner, owner);
    if (!named) co_return named.as_failure();
    std::optional<std::string> stored;
    if (*named && !(**named == owner_full_control(owner))) {
        FJORD_CO_TRY(check_grantees(c, **named));
        stored = encode_acl(**named);
    }
    if (!stored && !bucket.attributes.contains(acl_attribute)) co_return base::result<void>{};
    co_return co_await set_bucket_attribute(c, c.req.bucket, acl_attribute, stored);
}

// A new bucket's owner (an owner attribute names root's by its absence), and the Object Ownership and
// ACL its CreateBucket named (resolve_write_acl checked them).
io::task<base::result<void>> configure_new_bucket(const context& c, bool root) {
    const http::request_head& head = c.ex.head();
    if (!root)
        FJORD_CO_TRY(
            co_await set_bucket_attribute(c, c.req.bucket, owner_attribute, c.auth.access_key));
    std::string_view named = head.value_of("x-amz-object-ownership");
    auto ownership = named.empty() ? c.svc.options().default_ownership : parse_ownership(named);
    if (!ownership || *ownership == object_ownership::enforced) co_return base::result<void>{};
    FJORD_CO_TRY(co_await set_bucket_attribute(c, c.req.bucket, ownership_attribute,
                                               std::string(ownership_name(*ownership))));
    const std::string creator = root ? c.svc.users().root_id() : c.auth.access_key;
    auto acl = acl_from_headers(head, creator, creator);
    if (!acl) co_return acl.as_failure();
    if (!*acl) co_return base::result<void>{};
    co_return co_await set_bucket_attribute(c, c.req.bucket, acl_attribute, encode_acl(**acl));
}

}  // namespace fjord::s3
