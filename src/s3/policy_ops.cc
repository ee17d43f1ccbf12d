// Bucket policies: PutBucketPolicy, GetBucketPolicy, DeleteBucketPolicy (the policy language is
// policy.h's; deciding with it is authorize.cc's).
#include "s3/policy.h"
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

// The policy is kept as sent, once it parses (a bucket attribute).
io::task<void> put_bucket_policy(context& c) {
    auto body = co_await read_verified_body(c, 20 * 1024);  // S3's limit: 20 KB
    if (!body) co_return co_await send_error(c, body.err());
    auto policy = parse_policy(*body, c.req.bucket);
    if (!policy) co_return co_await send_error(c, policy.err());
    auto set = co_await set_bucket_attribute(c, c.req.bucket, policy_attribute, *body);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

io::task<void> get_bucket_policy(context& c) {
    auto info = c.svc.store().find_bucket(c.req.bucket);
    if (!info)
        co_return co_await send_error(
            c, {base::errc::no_such_bucket, "The specified bucket does not exist"});
    auto it = info->attributes.find(policy_attribute);
    if (it == info->attributes.end())
        co_return co_await send_error(
            c, {base::errc::no_such_bucket_policy, "The bucket policy does not exist"});
    auto headers = c.common_headers();
    headers.emplace_back("Content-Type", "application/json");
    (void)co_await c.ex.send_all(200, headers, it->second);
}

io::task<void> delete_bucket_policy(context& c) {
    auto set = co_await set_bucket_attribute(c, c.req.bucket, policy_attribute, std::nullopt);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(204, c.common_headers(), "");
}

}  // namespace fjord::s3
