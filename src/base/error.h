#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace fjord::base {

// One table of error codes for the whole system. The numbers are stable (they appear in logs and may be
// persisted); add new codes at the end. Each code knows the S3 error name and HTTP status it maps to and
// whether a client may retry it.
//   X(name, number, s3_code, http_status, retryable)
#define FJORD_ERROR_CODES(X)                                                                       \
    X(ok, 0, "OK", 200, false)                                                                     \
    X(internal, 1, "InternalError", 500, true)                                                     \
    X(invalid_argument, 2, "InvalidArgument", 400, false)                                          \
    X(bad_request, 3, "BadRequest", 400, false)                                                    \
    X(io_error, 4, "InternalError", 500, true)                                                     \
    X(data_corrupted, 5, "InternalError", 500, false)                                              \
    X(storage_full, 6, "InsufficientStorage", 507, false)                                          \
    X(not_found, 7, "NotFound", 404, false)                                                        \
    X(no_such_bucket, 8, "NoSuchBucket", 404, false)                                               \
    X(no_such_key, 9, "NoSuchKey", 404, false)                                                     \
    X(bucket_already_owned_by_you, 10, "BucketAlreadyOwnedByYou", 409, false)                      \
    X(bucket_not_empty, 11, "BucketNotEmpty", 409, false)                                          \
    X(invalid_bucket_name, 12, "InvalidBucketName", 400, false)                                    \
    X(access_denied, 13, "AccessDenied", 403, false)                                               \
    X(signature_does_not_match, 14, "SignatureDoesNotMatch", 403, false)                           \
    X(invalid_access_key_id, 15, "InvalidAccessKeyId", 403, false)                                 \
    X(request_time_too_skewed, 16, "RequestTimeTooSkewed", 403, false)                             \
    X(authorization_header_malformed, 17, "AuthorizationHeaderMalformed", 400, false)              \
    X(content_sha256_mismatch, 18, "XAmzContentSHA256Mismatch", 400, false)                        \
    X(bad_digest, 19, "BadDigest", 400, false)                                                     \
    X(invalid_digest, 20, "InvalidDigest", 400, false)                                             \
    X(invalid_range, 21, "InvalidRange", 416, false)                                               \
    X(precondition_failed, 22, "PreconditionFailed", 412, false)                                   \
    X(not_modified, 23, "NotModified", 304, false)                                                 \
    X(entity_too_large, 24, "EntityTooLarge", 400, false)                                          \
    X(incomplete_body, 25, "IncompleteBody", 400, false)                                           \
    X(missing_content_length, 26, "MissingContentLength", 411, false)                              \
    X(method_not_allowed, 27, "MethodNotAllowed", 405, false)                                      \
    X(not_implemented, 28, "NotImplemented", 501, false)                                           \
    X(slow_down, 29, "SlowDown", 503, true)                                                        \
    X(service_unavailable, 30, "ServiceUnavailable", 503, true)                                    \
    X(request_timeout, 31, "RequestTimeout", 400, true)                                            \
    X(invalid_request, 32, "InvalidRequest", 400, false)                                           \
    X(key_too_long, 33, "KeyTooLongError", 400, false)                                             \
    X(metadata_too_large, 34, "MetadataTooLarge", 400, false)                                      \
    X(header_too_large, 35, "RequestHeaderSectionTooLarge", 431, false)                            \
    X(malformed_xml, 36, "MalformedXML", 400, false)                                               \
    X(invalid_uri, 37, "InvalidURI", 400, false)                                                   \
    X(missing_security_header, 38, "MissingSecurityHeader", 400, false)                            \
    X(unsupported_feature, 39, "NotImplemented", 501, false)                                       \
    X(closed, 40, "InternalError", 500, true)                                                      \
    X(timed_out, 41, "RequestTimeout", 400, true)                                                  \
    X(cancelled, 42, "InternalError", 500, true)                                                   \
    X(limit_exceeded, 43, "SlowDown", 503, true)                                                   \
    X(invalid_object_state, 44, "InvalidObjectState", 403, false)                                  \
    X(expired_request, 45, "AccessDenied", 403, false)                                             \
    X(invalid_trailer, 46, "InvalidRequest", 400, false)                                           \
    X(no_such_upload, 47, "NoSuchUpload", 404, false)                                              \
    X(length_required, 48, "MissingContentLength", 411, false)                                     \
    X(invalid_part, 49, "InvalidPart", 400, false)                                                 \
    X(invalid_part_order, 50, "InvalidPartOrder", 400, false)                                      \
    X(entity_too_small, 51, "EntityTooSmall", 400, false)                                          \
    X(invalid_part_number, 52, "InvalidPartNumber", 416, false)                                    \
    X(invalid_tag, 53, "InvalidTag", 400, false)                                                   \
    X(commit_outcome_unknown, 54, "InternalError", 500, true)                                      \
    X(wrong_region, 55, "AuthorizationHeaderMalformed", 400, false)                                \
    X(wrong_region_presigned, 56, "AuthorizationQueryParametersError", 400, false)                 \
    X(http_version_not_supported, 57, "HttpVersionNotSupported", 505, false)                       \
    X(authorization_query_malformed, 58, "AuthorizationQueryParametersError", 400, false)          \
    X(no_such_tag_set, 59, "NoSuchTagSet", 404, false)                                             \
    X(access_control_list_not_supported, 60, "AccessControlListNotSupported", 400, false)          \
    X(invalid_bucket_acl_with_object_ownership, 61, "InvalidBucketAclWithObjectOwnership", 400,    \
      false)                                                                                       \
    X(no_such_version, 62, "NoSuchVersion", 404, false)                                            \
    X(no_such_lifecycle_configuration, 63, "NoSuchLifecycleConfiguration", 404, false)             \
    X(bucket_already_exists, 64, "BucketAlreadyExists", 409, false)                                \
    X(malformed_policy, 65, "MalformedPolicy", 400, false)                                         \
    X(no_such_bucket_policy, 66, "NoSuchBucketPolicy", 404, false)                                 \
    X(ownership_controls_not_found, 67, "OwnershipControlsNotFoundError", 404, false)              \
    X(unresolvable_grant_by_email, 68, "UnresolvableGrantByEmailAddress", 400, false)              \
    X(malformed_acl, 69, "MalformedACLError", 400, false)                                          \
    X(invalid_policy_document, 70, "InvalidPolicyDocument", 400, false)                            \
    X(malformed_post_request, 71, "MalformedPOSTRequest", 400, false)                              \
    X(max_post_pre_data_length_exceeded, 72, "MaxPostPreDataLengthExceeded", 400, false)           \
    X(incorrect_number_of_files, 73, "IncorrectNumberOfFilesInPostRequest", 400, false)            \
    X(conditional_request_conflict, 74, "ConditionalRequestConflict", 409, true)

enum class errc : std::uint16_t {
#define FJORD_ERRC_ENUM(name, number, s3, status, retry) name = number,
    FJORD_ERROR_CODES(FJORD_ERRC_ENUM)
#undef FJORD_ERRC_ENUM
};

std::string_view errc_name(errc code);
std::string_view errc_s3_code(errc code);
int errc_http_status(errc code);
bool errc_retryable(errc code);

// An error: a code from the table plus a human-readable detail for logs and the S3 <Message>.
struct error {
    errc code = errc::internal;
    std::string message;
    // Set when the error is a remote server's answer (the client): its HTTP status, its S3 <Code> as
    // sent (which may name a code this table lacks) and its request id. 0 and empty otherwise.
    int remote_status = 0;
    std::string remote_code;
    std::string request_id;
};

}  // namespace fjord::base
