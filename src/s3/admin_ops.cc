// The admin API (users.h): users added, rotated, removed and listed by the root user.
#include "s3/service.h"
#include "s3/operations.h"
#include "s3/xml.h"

namespace fjord::s3 {

// PUT /?fjord-admin-user=KEY (the body is the secret), DELETE /?fjord-admin-user=KEY, GET
// /?fjord-admin-users: the root user's only.
io::task<void> admin_users(context& c) {
    const http::method verb = c.ex.head().verb;
    if (verb == http::method::get && c.req.has("fjord-admin-users")) {
        xml_writer x;
        x.open("Users", s3_xmlns);
        for (const auto& key : c.svc.users().list(c.svc.store()))
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
    auto set = co_await c.svc.users().set(c.svc.store(), access_key, secret);
    if (!set) co_return co_await send_error(c, set.err());
    (void)co_await c.ex.send_all(secret ? 200 : 204, c.common_headers(), "");
}

}  // namespace fjord::s3
