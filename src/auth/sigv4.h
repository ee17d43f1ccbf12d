#pragma once

// AWS Signature Version 4 for S3: the verifier the server runs on every request head, the per-chunk
// verifier for aws-chunked bodies, and the signer our client and tests use. Signer and verifier
// share one canonicalisation, so a request this module signs is a request it accepts.
//
// Everything here is a pure function of its arguments (no clock, no I/O, no global state); the
// caller passes the server's time. A chunk_signature_verifier belongs to one request on one core.

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/digest.h"
#include "base/result.h"

namespace fjord::auth {

inline constexpr std::string_view sigv4_algorithm = "AWS4-HMAC-SHA256";
inline constexpr std::string_view unsigned_payload_value = "UNSIGNED-PAYLOAD";
inline constexpr std::string_view streaming_signed_value = "STREAMING-AWS4-HMAC-SHA256-PAYLOAD";
inline constexpr std::string_view streaming_signed_trailer_value =
    "STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER";
inline constexpr std::string_view streaming_unsigned_trailer_value =
    "STREAMING-UNSIGNED-PAYLOAD-TRAILER";
inline constexpr std::string_view empty_sha256_hex =
    "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

// One header as received: the name in any case, the value raw (the HTTP layer has already split
// name from value; canonicalisation trims and collapses the value itself).
struct header_view {
    std::string_view name;
    std::string_view value;
};

// A request head, independent of any HTTP parser. The views must outlive the calls that take it.
struct request_view {
    std::string_view method;     // "GET"
    std::string_view raw_path;   // as sent on the wire, percent-encoded, before '?'
    std::string_view raw_query;  // as sent, after '?', may be empty
    std::span<const header_view> headers;
};

struct credentials {
    std::string access_key;
    std::string secret_key;
};

// Whether a key pair is fit to protect a server: an access key of 3 to 128 visible ASCII characters, and
// a secret of 8 to 256 characters with no control byte and not only whitespace (a short or blank secret
// is guessed, or the sign of a mistake in the environment that set it). The message says what is wrong,
// never the secret itself.
base::result<void> check_credentials(const credentials& c);

// The key pairs the server accepts. Adding an access key that is already present replaces its
// secret. Not thread-safe: build it before serving, then share it read-only.
class credential_store {
public:
    void add(credentials c);
    void remove(std::string_view access_key);
    // Returns nullptr for an unknown key. The pointer stays valid until the next add() or remove() of
    // that key.
    const credentials* find(std::string_view access_key) const;
    // The smallest access key held ("" when none).
    std::string first_access_key() const {
        return _by_access_key.empty() ? std::string() : _by_access_key.begin()->first;
    }

private:
    std::map<std::string, credentials, std::less<>> _by_access_key;
};

enum class payload_mode {
    unsigned_payload,          // x-amz-content-sha256: UNSIGNED-PAYLOAD (or presigned)
    signed_sha256,             // hex sha256 of the body: the server must hash the body and compare
    streaming_signed,          // STREAMING-AWS4-HMAC-SHA256-PAYLOAD
    streaming_signed_trailer,  // STREAMING-AWS4-HMAC-SHA256-PAYLOAD-TRAILER
    streaming_unsigned_trailer,  // STREAMING-UNSIGNED-PAYLOAD-TRAILER
};

// What a verified request head proves, and what the body decoder needs to keep verifying.
struct auth_result {
    std::string access_key;
    std::string region;          // from the credential scope
    std::string scope;           // "20130524/us-east-1/s3/aws4_request"
    std::string amz_date;        // "20130524T000000Z"
    std::string signing_key;     // raw 32 bytes
    std::string seed_signature;  // hex signature of the request (first chunk's previous signature)
    payload_mode mode = payload_mode::unsigned_payload;
    // For signed_sha256: the value the body must hash to (lower-case)
    std::string payload_sha256_hex;
    bool presigned = false;
    // The headers the signature covers: lower case, sorted, no repeats
    std::vector<std::string> signed_headers;
    bool signs(std::string_view lower_name) const {
        return std::binary_search(signed_headers.begin(), signed_headers.end(), lower_name);
    }
};

struct verify_options {
    // How far the header-form request time may be from the server's clock, either way. S3 uses 15
    // minutes; presigned URLs are bounded by X-Amz-Expires instead (and by this only for the
    // future).
    std::int64_t max_clock_skew_s = 15 * 60;
    // The server's region: a credential scoped to any other is refused (wrong_region, or
    // wrong_region_presigned for a presigned URL), as S3 does. Empty: any region is accepted.
    std::string region;
};

// Verifies the request head: Authorization header form, or presigned query form (X-Amz-Algorithm,
// X-Amz-Credential, X-Amz-Date, X-Amz-Expires (1..604800), X-Amz-SignedHeaders, X-Amz-Signature;
// payload is UNSIGNED-PAYLOAD unless x-amz-content-sha256 is signed in). `now_s` is the server's
// Unix time. The body is not looked at: for signed_sha256 the caller hashes it and compares with
// payload_sha256_hex; for the streaming modes it feeds a chunk_signature_verifier.
base::result<auth_result> verify_request(const request_view& req, const credential_store& store,
                                         std::int64_t now_s, const verify_options& options = {});

// The pieces, exposed for tests and the client.
//
// Canonical request: method, canonical URI (raw path decoded, re-encoded keeping '/', never
// normalised), canonical query (every parameter but X-Amz-Signature when presigned, decoded then
// encoded, sorted), canonical headers (signed names in the given order, values trimmed and inner
// space runs collapsed, repeats joined with ','), signed header list, hashed payload.
std::string canonical_request(const request_view& req,
                              std::span<const std::string> signed_headers_lower,
                              std::string_view hashed_payload, bool presigned);
std::string string_to_sign(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request);
std::string derive_signing_key(std::string_view secret_key, std::string_view date_yyyymmdd,
                               std::string_view region, std::string_view service);

// Signer: returns the Authorization header value for the request, which must already carry host,
// x-amz-date and (for S3) x-amz-content-sha256 headers. Signs every header given except
// Authorization itself, lower-cased and sorted. `service` is "s3" except in the generic SigV4
// test-suite vectors.
std::string sign_authorization(const request_view& req, const credentials& creds,
                               std::string_view region, std::string_view amz_date,
                               std::string_view hashed_payload, std::string_view service = "s3");

// Presigned URL query for a GET/PUT: returns the full raw query string to append after '?'
// (X-Amz-* parameters and the signature), signing host only. `expires_s` must be 1..604800.
std::string presign_query(std::string_view method, std::string_view raw_path, std::string_view host,
                          const credentials& creds, std::string_view region, std::int64_t now_s,
                          std::int64_t expires_s);

// Hex signature of one aws-chunked chunk, chained on the previous chunk's (or the seed) signature.
std::string sign_chunk(std::string_view signing_key, std::string_view amz_date,
                       std::string_view scope, std::string_view previous_signature_hex,
                       std::span<const std::byte> data);
// Hex signature of the trailer section (the x-amz-trailer-signature value), chained on the final
// (empty) chunk's signature. Trailers are canonicalised as for verify_trailer.
std::string sign_trailer(std::string_view signing_key, std::string_view amz_date,
                         std::string_view scope, std::string_view previous_signature_hex,
                         std::span<const std::pair<std::string, std::string>> trailers);

// Verifies the chunk signatures of a STREAMING-AWS4-HMAC-SHA256-PAYLOAD(-TRAILER) body while the
// server decodes it. Each chunk's data arrives through update() in pieces, then finish_chunk()
// checks that chunk's claimed signature and chains on to the next. The first failure poisons the
// verifier: every later call fails too, so a caller that ignores one error cannot resume the chain.
class chunk_signature_verifier {
public:
    // The chain starts from auth.seed_signature; the key, date and scope are copied.
    explicit chunk_signature_verifier(const auth_result& auth);

    void update(std::span<const std::byte> chunk_data);  // data of the current chunk, in pieces
    // Checks the current chunk's claimed signature (hex) over "AWS4-HMAC-SHA256-PAYLOAD\n<date>\n
    // <scope>\n<prev sig>\n<sha256("")>\n<sha256(chunk data)>", then starts the next chunk.
    // Mismatch -> signature_does_not_match.
    base::result<void> finish_chunk(std::string_view claimed_signature_hex);
    // Trailer signature for the *-TRAILER mode: "AWS4-HMAC-SHA256-TRAILER\n<date>\n<scope>\n
    // <prev sig>\n<sha256(canonical trailers)>", where canonical trailers are "name:value\n" for
    // each trailer except x-amz-trailer-signature, in the order received (name lower-cased, value
    // trimmed). Ends the chain: later calls fail.
    base::result<void> verify_trailer(std::span<const std::pair<std::string, std::string>> trailers,
                                      std::string_view claimed_signature_hex);

private:
    base::result<void> check(std::string_view expected_hex, std::string_view claimed_hex);

    std::string _signing_key;
    std::string _amz_date;
    std::string _scope;
    std::string _previous_signature_hex;
    base::digest _chunk_digest;
    bool _closed = false;  // after a failure or the trailer
};

}  // namespace fjord::auth
