#pragma once

// The request router (router.cc): a request's URL as a bucket, a key and query parameters (route), and
// the one table of S3 operations (operation_table::rows) that names, for each, the method and
// subresource it answers, the class it is counted under, the access it needs checked before it runs,
// and its handler. dispatch runs what choose_operation picks; adding an operation is one
// handler and one row (README.md, "Adding an operation"). Private to the S3 service's .cc files.

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "base/metrics.h"
#include "base/result.h"
#include "http/request.h"
#include "s3/service.h"

namespace fjord::s3 {

// What an operation needs checked before it runs (check_access); `form`: nothing yet, the
// operation checks access itself once it has read who signed it (POST Object's form).
enum class access_kind { other, admin, copy, create_bucket, form };

// What the URL names: the service (no bucket), a bucket (no key), or an object.
enum class target : std::uint8_t { service, bucket, object };

// The ACL a write names in its headers (x-amz-acl, x-amz-grant-*), checked against the bucket's
// Object Ownership before the operation runs (resolve_write_acl).
enum class names_acl : std::uint8_t { no, object, bucket };

struct operation {
    target on = target::object;
    std::optional<http::method> verb;  // nullopt: any method
    // The query parameter that selects the operation ("" for none). Rows with one are tried first, in
    // table order; a request that names a subresource no row answers is NotImplemented; then the rows
    // without one.
    std::string_view subresource;
    // A further condition on the request (a header, a parameter's value), or nullptr.
    bool (*when)(const http::request_head&, const s3_request&) = nullptr;
    std::string_view name;  // as AWS names the operation (access log, policy actions)
    base::operation_class counted_as = base::operation_class::other;  // fjord_requests_total
    access_kind access = access_kind::other;                          // for check_access
    names_acl acl = names_acl::no;
    service::handler run = nullptr;  // nullptr: the row refuses with MethodNotAllowed
};

// The table (router.cc).
struct operation_table {
    static std::span<const operation> rows();

private:
    static const operation all[];
};

// The operation a routed request asks for, or why there is none (NotImplemented for a subresource
// Fjord does not answer, MethodNotAllowed). Chosen before authentication, so that a refused request is
// logged with the operation it tried.
struct chosen_operation {
    const operation* op = nullptr;
    base::error refusal;
    std::string_view name() const { return op ? op->name : std::string_view("-"); }
    base::operation_class counted_as() const {
        return op ? op->counted_as : base::operation_class::other;
    }
};
chosen_operation choose_operation(const http::request_head& head, const s3_request& r);

// The bucket, key and query of a request (path style, or virtual-hosted under one of `domains`).
base::result<s3_request> route(const http::request_head& head,
                               const std::vector<std::string>& domains);

// GET /health/live and /health/ready.
bool is_health_check(const http::request_head& head);
// GET /metrics, path-style and without a query.
bool is_metrics_request(const http::request_head& head, const s3_request& r);

}  // namespace fjord::s3
