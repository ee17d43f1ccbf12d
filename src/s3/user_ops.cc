// Users (users.h): the admin API, and who may act on which bucket.

#include "base/encoding.h"
#include "s3/service.h"
#include "s3/service_internal.h"
#include "s3/xml.h"

namespace fjord::s3 {

namespace {
constexpr std::string_view s3_xmlns = "xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\"";

base::failure access_denied() { return base::fail(base::errc::access_denied, "Access Denied"); }

// The source bucket of x-amz-copy-source ("/bucket/key" or "bucket/key", URL-encoded).
std::string copy_source_bucket(std::string_view header) {
    header = header.substr(0, header.find('?'));
    auto decoded = base::uri_decode(header, false);
    std::string_view text = decoded ? std::string_view(*decoded) : header;
    if (text.starts_with('/')) text.remove_prefix(1);
    return std::string(text.substr(0, text.find('/')));
}
}  // namespace

bool service::owns(const context& c, const store::bucket_info& bucket) const {
    const std::string owner = owner_of(bucket);
    return owner.empty() ? _users.is_root(c.auth.access_key) : owner == c.auth.access_key;
}

base::result<void> service::check_bucket_access(const context& c, const std::string& bucket) const {
    if (bucket == system_bucket) return access_denied();
    if (bucket.empty() || _users.is_root(c.auth.access_key)) return {};
    auto info = _store.find_bucket(bucket);
    if (!info) return {};  // the operation answers NoSuchBucket
    if (!owns(c, *info)) return access_denied();
    return {};
}

base::result<void> service::check_access(const context& c, access_kind kind) const {
    if (kind == access_kind::admin && !_users.is_root(c.auth.access_key)) return access_denied();
    const bool copies = kind == access_kind::copy;
    // A CreateBucket of another's bucket is BucketAlreadyExists (create_owned_bucket), not a refusal
    if (kind != access_kind::create_bucket) FJORD_TRY(check_bucket_access(c, c.req.bucket));
    if (kind == access_kind::create_bucket && c.req.bucket == system_bucket) return access_denied();
    if (copies)
        FJORD_TRY(
            check_bucket_access(c, copy_source_bucket(c.ex.head().value_of("x-amz-copy-source"))));
    // x-amz-expected-bucket-owner (and -source- on a copy): the ID of the bucket's owner, its access key
    // (ListBuckets' <Owner><ID>); another ID is refused as S3 refuses another account's: 403.
    for (const char* name : {"x-amz-expected-bucket-owner", "x-amz-source-expected-bucket-owner"}) {
        const http::header* expected = c.ex.head().find(name);
        if (!expected || c.req.bucket.empty()) continue;
        auto info = _store.find_bucket(c.req.bucket);
        std::string owner = info ? owner_of(*info) : std::string();
        if (expected->value != (owner.empty() ? c.auth.access_key : owner)) return access_denied();
    }
    return {};
}

io::task<base::result<void>> service::create_owned_bucket(
    const context& c, const std::optional<store::kv_bucket_options>& kv) {
    if (auto existing = _store.find_bucket(c.req.bucket); existing && !owns(c, *existing))
        co_return base::fail(base::errc::bucket_already_exists,
                             "The requested bucket name is not available.");
    const bool root = _users.is_root(c.auth.access_key);
    if (kv && !root)
        co_return base::fail(base::errc::access_denied, "Only the root user creates KV buckets");
    if (kv) co_return co_await _store.create_kv_bucket(c.req.bucket, *kv);
    FJORD_CO_TRY(co_await _store.create_bucket(c.req.bucket));
    if (root)
        co_return base::result<void>{};  // an owner attribute names root's buckets by its absence
    // A crash between the two leaves the bucket root's; the user was never told it exists.
    auto owned =
        co_await _store.set_bucket_attribute(c.req.bucket, owner_attribute, c.auth.access_key);
    if (!owned) (void)co_await _store.delete_bucket(c.req.bucket);
    co_return owned;
}

// PUT /?fjord-admin-user=KEY (the body is the secret), DELETE /?fjord-admin-user=KEY, GET
// /?fjord-admin-users: the root user's only.
io::task<void> service::admin_users(context& c) {
    const http::method verb = c.ex.head().verb;
    if (verb == http::method::get && c.req.has("fjord-admin-users")) {
        xml_writer x;
        x.open("Users", s3_xmlns);
        for (const auto& key : _users.list(_store))
            x.open("User").element("AccessKey", key).close("User");
        x.close("Users");
        co_return co_await send_xml(c, 200, x.take());
    }
    std::string access_key(c.req.param("fjord-admin-user"));
    if (verb != http::method::put && verb != http::method::delete_)
        co_return co_await send_error(c, {base::errc::method_not_allowed, "PUT, DELETE or GET"});
    std::optional<std::string> secret;
    if (verb == http::method::put) {
        auto body = co_await read_verified_body(c, 4096);
        if (!body) co_return co_await send_error(c, body.err());
        secret = std::move(*body);
    }
    auto set = co_await _users.set(_store, access_key, secret);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(secret ? 200 : 204, c.common_headers(), "");
}

}  // namespace fjord::s3
