#pragma once

// Private to the S3 service's .cc files: the per-request context and shared response helpers.

#include <string>
#include <string_view>

#include "http/connection.h"
#include "s3/service.h"

namespace fjord::s3 {

struct service::context {
    http::exchange& ex;
    s3_request req;
    std::string request_id;
    auth_result auth;
    http::header_list common_headers() const {
        return {{"x-amz-request-id", request_id}, {"x-amz-id-2", request_id}};
    }
};

// The S3 <Error> document for an error.
std::string error_xml(const base::error& err, std::string_view resource, std::string_view request_id);

}  // namespace fjord::s3
