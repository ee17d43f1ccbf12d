// Put/Get/DeleteBucketLifecycleConfiguration: the rules (lifecycle.h) kept as a bucket attribute; the
// background task in lifecycle_pass.cc applies them.

#include <openssl/rand.h>

#include "base/encoding.h"
#include "s3/lifecycle.h"
#include "s3/service.h"
#include "s3/operations.h"

namespace fjord::s3 {

namespace {
// S3 gives a rule sent without an ID a unique one (48 characters), kept with the configuration.
void name_unnamed_rules(lifecycle_configuration& config) {
    for (auto& rule : config.rules) {
        if (!rule.id.empty()) continue;
        unsigned char bytes[24];
        if (RAND_bytes(bytes, sizeof bytes) != 1) continue;  // then it stays unnamed, as sent
        rule.id = base::hex_encode({reinterpret_cast<const char*>(bytes), sizeof bytes});
    }
}
}  // namespace

io::task<void> put_bucket_lifecycle(context& c) {
    auto body = co_await read_verified_body(c, 1024 * 1024);
    if (!body) co_return co_await send_error(c, body.err());
    auto config = parse_lifecycle(*body);
    if (!config) co_return co_await send_error(c, config.err());
    name_unnamed_rules(*config);
    if (c.svc.store().blocks_of(c.req.bucket))
        co_return co_await send_error(
            c, {base::errc::invalid_request,
                "KV buckets expire blocks by their TTL and capacity, not by lifecycle rules"});
    auto set =
        co_await set_bucket_attribute(c, c.req.bucket, lifecycle_attribute, lifecycle_xml(*config));
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(200, c.common_headers(), "");
}

io::task<void> get_bucket_lifecycle(context& c) {
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info)
        co_return co_await send_error(
            c, {base::errc::no_such_bucket, "The specified bucket does not exist"});
    auto it = info->attributes.find(lifecycle_attribute);
    if (it == info->attributes.end())
        co_return co_await send_error(c, {base::errc::no_such_lifecycle_configuration,
                                          "The lifecycle configuration does not exist"});
    co_await send_xml(c, 200, it->second);
}

io::task<void> delete_bucket_lifecycle(context& c) {
    auto set = co_await set_bucket_attribute(c, c.req.bucket, lifecycle_attribute, std::nullopt);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

}  // namespace fjord::s3
