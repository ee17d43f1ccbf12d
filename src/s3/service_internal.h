#pragma once

// Private to the S3 service's .cc files: the per-request context and shared response helpers.

#include <string>
#include <string_view>

#include "http/connection.h"
#include "s3/checksum.h"
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

// A request body stored as a data file, verified and durable, not yet committed.
struct received_body {
    store::segment data;
    std::string etag;
    checksum_algorithm checksum = checksum_algorithm::none;
    std::string checksum_value;  // base64
};

std::optional<std::string> unquote_etag(std::string_view v);
base::result<store::write_conditions> write_conditions_of(const http::request_head& head);
// Content-Type, the stored headers and x-amz-meta-* of a PUT or CreateMultipartUpload.
base::result<void> collect_metadata(const http::request_head& head, std::size_t max_meta_bytes,
                                    store::object_record& record);

// The S3 <Error> document for an error.
std::string error_xml(const base::error& err, std::string_view resource, std::string_view request_id);

}  // namespace fjord::s3
