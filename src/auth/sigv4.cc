#include "auth/sigv4.h"

#include <algorithm>
#include <optional>
#include <vector>

#include "base/assert.h"
#include "base/clock.h"
#include "base/encoding.h"

namespace fjord::auth {

namespace {

constexpr std::string_view scope_terminator = "aws4_request";
constexpr std::string_view s3_service = "s3";
constexpr std::int64_t max_presign_expires_s = 7 * 24 * 3600;
constexpr std::string_view signature_mismatch_message =
    "The request signature we calculated does not match the signature you provided. Check your key "
    "and signing method.";

bool is_hex(std::string_view text) {
    return std::all_of(text.begin(), text.end(), [](char c) {
        return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
    });
}

bool is_digits(std::string_view text) {
    return std::all_of(text.begin(), text.end(), [](char c) { return c >= '0' && c <= '9'; });
}

bool starts_with_icase(std::string_view text, std::string_view prefix) {
    return text.size() >= prefix.size() && base::iequals(text.substr(0, prefix.size()), prefix);
}

std::string hex_sha256(std::string_view data) { return base::hex_encode(base::sha256(data)); }

// Clients only ever sign a decodable path; a malformed escape is rejected by verify_request before
// it gets here, so canonicalising the raw text is merely a defined answer, never a match.
std::string decode_or_raw(std::string_view text) {
    auto decoded = base::uri_decode(text, /*plus_is_space=*/false);
    return decoded ? std::move(*decoded) : std::string(text);
}

// A query's names and values are form-encoded: '+' is a space, as S3 reads it when it routes the
// request (and as the Java SDK v1 sends a space while signing it as %20). The signature must cover
// the meaning the server acts on, so "prefix=a+b" canonicalizes as "prefix=a%20b", never as a%2Bb.
std::string decode_query_or_raw(std::string_view text) {
    auto decoded = base::uri_decode(text, /*plus_is_space=*/true);
    return decoded ? std::move(*decoded) : std::string(text);
}

std::string canonical_uri(std::string_view raw_path) {
    if (raw_path.empty()) return "/";
    return base::uri_encode(decode_or_raw(raw_path), /*keep_slash=*/true);
}

// Splits a raw query into (raw name, raw value) pairs; a parameter without '=' has an empty value.
// Empty pieces ("a=1&&b=2") carry nothing and are skipped.
std::vector<std::pair<std::string_view, std::string_view>> split_query(std::string_view raw_query) {
    std::vector<std::pair<std::string_view, std::string_view>> params;
    while (!raw_query.empty()) {
        size_t amp = raw_query.find('&');
        std::string_view piece = raw_query.substr(0, amp);
        raw_query = amp == std::string_view::npos ? std::string_view{} : raw_query.substr(amp + 1);
        if (piece.empty()) continue;
        size_t eq = piece.find('=');
        if (eq == std::string_view::npos) {
            params.emplace_back(piece, std::string_view{});
        } else {
            params.emplace_back(piece.substr(0, eq), piece.substr(eq + 1));
        }
    }
    return params;
}

std::string canonical_query(std::string_view raw_query, bool presigned) {
    std::vector<std::pair<std::string, std::string>> encoded;
    for (const auto& [raw_name, raw_value] : split_query(raw_query)) {
        std::string name = decode_query_or_raw(raw_name);
        if (presigned && name == "X-Amz-Signature") continue;
        encoded.emplace_back(base::uri_encode(name, false),
                             base::uri_encode(decode_query_or_raw(raw_value), false));
    }
    // Sorting the encoded forms is what botocore and the AWS test suite do.
    std::sort(encoded.begin(), encoded.end());
    std::string out;
    for (const auto& [name, value] : encoded) {
        if (!out.empty()) out += '&';
        out += name;
        out += '=';
        out += value;
    }
    return out;
}

// Trims the value and collapses each inner run of spaces to one, as the SigV4 "Trimall" step says.
void append_trimmed_value(std::string& out, std::string_view value) {
    value = base::trim(value);
    bool in_space_run = false;
    for (char c : value) {
        if (c == ' ') {
            if (!in_space_run) out += ' ';
            in_space_run = true;
        } else {
            out += c;
            in_space_run = false;
        }
    }
}

std::string canonical_headers(std::span<const header_view> headers,
                              std::span<const std::string> signed_headers_lower) {
    std::string out;
    out.reserve(256);
    for (const std::string& name : signed_headers_lower) {
        out += name;
        out += ':';
        bool first = true;
        for (const header_view& header : headers) {
            if (!base::iequals(header.name, name)) continue;
            if (!first) out += ',';
            append_trimmed_value(out, header.value);
            first = false;
        }
        out += '\n';
    }
    return out;
}

std::string join_signed_headers(std::span<const std::string> signed_headers_lower) {
    std::string out;
    for (const std::string& name : signed_headers_lower) {
        if (!out.empty()) out += ';';
        out += name;
    }
    return out;
}

std::string make_scope(std::string_view date_yyyymmdd, std::string_view region,
                       std::string_view service) {
    std::string scope;
    scope.append(date_yyyymmdd).append("/").append(region).append("/").append(service);
    scope.append("/").append(scope_terminator);
    return scope;
}

std::string signature_hex(std::string_view signing_key, std::string_view text) {
    return base::hex_encode(base::hmac_sha256(signing_key, text));
}

std::optional<std::string_view> find_header(std::span<const header_view> headers,
                                            std::string_view name) {
    for (const header_view& header : headers)
        if (base::iequals(header.name, name)) return header.value;
    return std::nullopt;
}

size_t count_headers(std::span<const header_view> headers, std::string_view name) {
    return static_cast<size_t>(
        std::count_if(headers.begin(), headers.end(),
                      [&](const header_view& h) { return base::iequals(h.name, name); }));
}

// ---------------------------------------------------------------------------------------------
// Parsing the claim, shared by the two forms.

struct parsed_credential {
    std::string access_key;
    std::string date_yyyymmdd;
    std::string region;
};

// Everything the two forms extract before the common checks; all of it is attacker-supplied.
struct claimed_auth {
    parsed_credential credential;
    std::vector<std::string> signed_headers;
    std::string signature_hex;  // lower-cased
    std::string amz_date;
    payload_mode mode = payload_mode::unsigned_payload;
    std::string hashed_payload;  // the last line of the canonical request
    std::string payload_sha256_hex;
    bool presigned = false;
};

base::failure malformed(std::string message) {
    return base::fail(base::errc::authorization_header_malformed, std::move(message));
}

// "AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request". The access key is everything before
// the last four components, so a key containing '/' still parses.
base::result<parsed_credential> parse_credential(std::string_view text) {
    std::string_view parts[4];
    for (int i = 3; i >= 0; --i) {
        size_t slash = text.rfind('/');
        if (slash == std::string_view::npos)
            return malformed("The credential is malformed: " + std::string(text));
        parts[i] = text.substr(slash + 1);
        text = text.substr(0, slash);
    }
    if (text.empty()) return malformed("The credential has no access key");
    if (parts[0].size() != 8 || !is_digits(parts[0]))
        return malformed("The credential date is malformed");
    if (parts[1].empty()) return malformed("The credential has no region");
    if (parts[2] != s3_service) {
        return malformed("The credential has the incorrect service '" + std::string(parts[2]) +
                         "'; this endpoint belongs to 's3'");
    }
    if (parts[3] != scope_terminator) return malformed("The credential must end with aws4_request");
    return parsed_credential{std::string(text), std::string(parts[0]), std::string(parts[1])};
}

// "host;range;x-amz-date": lower-case, sorted, no repeats, and host among them. Clients all send it
// so; insisting turns a mis-ordered list into a clear error instead of a puzzling signature
// mismatch.
base::result<std::vector<std::string>> parse_signed_headers(std::string_view text) {
    std::vector<std::string> names;
    while (true) {
        size_t semicolon = text.find(';');
        std::string_view name = text.substr(0, semicolon);
        if (name.empty() || base::to_lower(name) != name)
            return malformed("SignedHeaders must be lower-case names separated by ';'");
        if (!names.empty() && names.back() >= name)
            return malformed("SignedHeaders must be sorted and must not repeat a name");
        names.emplace_back(name);
        if (semicolon == std::string_view::npos) break;
        text = text.substr(semicolon + 1);
    }
    if (!std::binary_search(names.begin(), names.end(), std::string("host")))
        return malformed("SignedHeaders must include host");
    return names;
}

base::result<std::string> parse_signature(std::string_view text) {
    if (text.size() != 64 || !is_hex(text)) return malformed("The signature must be 64 hex digits");
    return base::to_lower(text);
}

// The body hash the client committed to. `value` is x-amz-content-sha256 as sent.
base::result<void> parse_payload(std::string_view value, claimed_auth& claim) {
    claim.hashed_payload = std::string(value);
    if (value == unsigned_payload_value) {
        claim.mode = payload_mode::unsigned_payload;
    } else if (value == streaming_signed_value) {
        claim.mode = payload_mode::streaming_signed;
    } else if (value == streaming_signed_trailer_value) {
        claim.mode = payload_mode::streaming_signed_trailer;
    } else if (value == streaming_unsigned_trailer_value) {
        claim.mode = payload_mode::streaming_unsigned_trailer;
    } else if (value.size() == 64 && is_hex(value)) {
        claim.mode = payload_mode::signed_sha256;
        claim.payload_sha256_hex = base::to_lower(value);
    } else {
        return base::fail(
            base::errc::invalid_argument,
            "x-amz-content-sha256 must be UNSIGNED-PAYLOAD, a STREAMING- mode we support, "
            "or a hex SHA-256");
    }
    return {};
}

base::result<void> check_scope_date(const claimed_auth& claim) {
    if (claim.amz_date.compare(0, 8, claim.credential.date_yyyymmdd) != 0)
        return malformed("Invalid credential date. Date is not the same as X-Amz-Date.");
    return {};
}

// S3 refuses x-amz-* headers that the signature does not cover (an unsigned x-amz-acl or
// x-amz-copy-source could otherwise be added in flight). A presigned URL's sender may attach
// x-amz-content-sha256 without signing it; it is then ignored, so it is exempt there.
base::result<void> check_amz_headers_signed(std::span<const header_view> headers,
                                            const claimed_auth& claim) {
    for (const header_view& header : headers) {
        if (!starts_with_icase(header.name, "x-amz-")) continue;
        std::string name = base::to_lower(header.name);
        if (std::binary_search(claim.signed_headers.begin(), claim.signed_headers.end(), name))
            continue;
        if (claim.presigned && name == "x-amz-content-sha256") continue;
        return base::fail(
            base::errc::access_denied,
            "There were headers present in the request which were not signed: " + name);
    }
    return {};
}

// ---------------------------------------------------------------------------------------------
// Header form: Authorization: AWS4-HMAC-SHA256 Credential=..., SignedHeaders=..., Signature=...

struct authorization_fields {
    std::string_view credential;
    std::string_view signed_headers;
    std::string_view signature;
};

base::result<authorization_fields> parse_authorization(std::string_view value) {
    value = base::trim(value);
    if (starts_with_icase(value, "AWS ")) {
        return base::fail(
            base::errc::invalid_request,
            "The authorization mechanism you have provided is not supported. Please use "
            "AWS4-HMAC-SHA256.");
    }
    size_t space = value.find(' ');
    if (value.substr(0, space) != sigv4_algorithm)
        return base::fail(base::errc::invalid_argument, "Unsupported Authorization Type");
    if (space == std::string_view::npos) return malformed("The authorization header is malformed");
    authorization_fields fields;
    std::string_view rest = value.substr(space + 1);
    while (!rest.empty()) {
        size_t comma = rest.find(',');
        std::string_view item = base::trim(rest.substr(0, comma));
        rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
        size_t eq = item.find('=');
        if (eq == std::string_view::npos) return malformed("The authorization header is malformed");
        std::string_view key = item.substr(0, eq);
        std::string_view* slot = key == "Credential"      ? &fields.credential
                                 : key == "SignedHeaders" ? &fields.signed_headers
                                 : key == "Signature"     ? &fields.signature
                                                          : nullptr;
        if (slot == nullptr || !slot->empty() || eq + 1 == item.size())
            return malformed("The authorization header is malformed");
        *slot = item.substr(eq + 1);
    }
    if (fields.credential.empty() || fields.signed_headers.empty() || fields.signature.empty())
        return malformed("The authorization header is malformed");
    return fields;
}

// The request time from x-amz-date or, failing that, Date. Returns the text the string to sign
// uses: x-amz-date exactly as the client sent it (re-formatting could differ on odd but parseable
// values), or the Date header converted to the amz format.
base::result<std::string> header_request_date(std::span<const header_view> headers,
                                              std::int64_t& time_s) {
    std::optional<std::time_t> parsed;
    std::string amz_date;
    if (auto amz = find_header(headers, "x-amz-date")) {
        amz_date = std::string(base::trim(*amz));
        parsed = base::parse_amz_date(amz_date);
    } else if (auto date = find_header(headers, "date")) {
        parsed = base::parse_http_date(base::trim(*date));
        if (parsed) amz_date = base::format_amz_date(*parsed);
    }
    if (!parsed) {
        return base::fail(base::errc::access_denied,
                          "AWS authentication requires a valid Date or x-amz-date header");
    }
    time_s = static_cast<std::int64_t>(*parsed);
    return amz_date;
}

base::result<claimed_auth> parse_header_form(const request_view& req, std::int64_t now_s,
                                             const verify_options& options) {
    if (count_headers(req.headers, "authorization") != 1)
        return malformed("The request must carry exactly one Authorization header");
    auto fields = parse_authorization(*find_header(req.headers, "authorization"));
    FJORD_TRY(fields);
    claimed_auth claim;
    auto credential = parse_credential(fields->credential);
    FJORD_TRY(credential);
    claim.credential = std::move(*credential);
    auto names = parse_signed_headers(fields->signed_headers);
    FJORD_TRY(names);
    claim.signed_headers = std::move(*names);
    auto signature = parse_signature(fields->signature);
    FJORD_TRY(signature);
    claim.signature_hex = std::move(*signature);

    auto content_sha256 = find_header(req.headers, "x-amz-content-sha256");
    if (!content_sha256) {
        return base::fail(base::errc::invalid_request,
                          "Missing required header for this request: x-amz-content-sha256");
    }
    FJORD_TRY(parse_payload(base::trim(*content_sha256), claim));

    std::int64_t request_time_s = 0;
    auto amz_date = header_request_date(req.headers, request_time_s);
    FJORD_TRY(amz_date);
    claim.amz_date = std::move(*amz_date);
    FJORD_TRY(check_scope_date(claim));
    std::int64_t skew_s = now_s > request_time_s ? now_s - request_time_s : request_time_s - now_s;
    if (skew_s > options.max_clock_skew_s) {
        return base::fail(
            base::errc::request_time_too_skewed,
            "The difference between the request time and the server's time is too large.");
    }
    return claim;
}

// ---------------------------------------------------------------------------------------------
// Query form: the presigned URL.

struct presign_params {
    std::optional<std::string> algorithm, credential, date, expires, signed_headers, signature;
};

base::result<presign_params> collect_presign_params(std::string_view raw_query) {
    presign_params params;
    for (const auto& [raw_name, raw_value] : split_query(raw_query)) {
        std::string name = decode_query_or_raw(raw_name);
        std::optional<std::string>* slot = name == "X-Amz-Algorithm"       ? &params.algorithm
                                           : name == "X-Amz-Credential"    ? &params.credential
                                           : name == "X-Amz-Date"          ? &params.date
                                           : name == "X-Amz-Expires"       ? &params.expires
                                           : name == "X-Amz-SignedHeaders" ? &params.signed_headers
                                           : name == "X-Amz-Signature"     ? &params.signature
                                                                           : nullptr;
        if (slot == nullptr) continue;
        if (slot->has_value())
            return malformed("Query parameter " + name + " appears more than once");
        *slot = decode_query_or_raw(raw_value);
    }
    if (!params.algorithm || !params.credential || !params.date || !params.expires ||
        !params.signed_headers || !params.signature) {
        return malformed(
            "Query-string authentication requires the X-Amz-Algorithm, X-Amz-Credential, "
            "X-Amz-Signature, X-Amz-Date, X-Amz-SignedHeaders, and X-Amz-Expires parameters.");
    }
    if (*params.algorithm != sigv4_algorithm)
        return malformed("X-Amz-Algorithm only supports \"AWS4-HMAC-SHA256\"");
    return params;
}

base::result<void> check_presign_time(const presign_params& params, std::int64_t now_s,
                                      const verify_options& options) {
    auto date = base::parse_amz_date(*params.date);
    if (!date)
        return malformed("X-Amz-Date must be in the ISO8601 Long Format \"yyyyMMdd'T'HHmmss'Z'\"");
    // S3's wording for each way X-Amz-Expires can be out of its range of 1 to 604800 seconds.
    std::string_view text = *params.expires;
    if (text.starts_with('-') && base::parse_u64(text.substr(1)))
        return malformed("X-Amz-Expires must be non-negative");
    auto expires = base::parse_u64(text);
    if (!expires) return malformed("X-Amz-Expires should be a number");
    if (*expires < 1) return malformed("X-Amz-Expires must be at least 1 second");
    if (*expires > static_cast<std::uint64_t>(max_presign_expires_s))
        return malformed(
            "X-Amz-Expires must be less than a week (in seconds) that is 604800 seconds");
    std::int64_t signed_at_s = static_cast<std::int64_t>(*date);
    if (signed_at_s > now_s + options.max_clock_skew_s)
        return base::fail(base::errc::access_denied, "Request is not valid yet");
    if (now_s > signed_at_s + static_cast<std::int64_t>(*expires))
        return base::fail(base::errc::expired_request, "Request has expired");
    return {};
}

base::result<claimed_auth> parse_query_fields(const request_view& req, std::int64_t now_s,
                                              const verify_options& options) {
    auto params = collect_presign_params(req.raw_query);
    FJORD_TRY(params);
    claimed_auth claim;
    claim.presigned = true;
    auto credential = parse_credential(*params->credential);
    FJORD_TRY(credential);
    claim.credential = std::move(*credential);
    auto names = parse_signed_headers(*params->signed_headers);
    FJORD_TRY(names);
    claim.signed_headers = std::move(*names);
    auto signature = parse_signature(*params->signature);
    FJORD_TRY(signature);
    claim.signature_hex = std::move(*signature);
    FJORD_TRY(check_presign_time(*params, now_s, options));
    claim.amz_date = *params->date;
    FJORD_TRY(check_scope_date(claim));

    // A presigned URL cannot know its body, so the payload is unsigned unless the sender chose to
    // sign x-amz-content-sha256 in.
    auto content_sha256 = find_header(req.headers, "x-amz-content-sha256");
    bool content_signed =
        std::binary_search(claim.signed_headers.begin(), claim.signed_headers.end(),
                           std::string("x-amz-content-sha256"));
    if (content_signed && content_sha256) {
        FJORD_TRY(parse_payload(base::trim(*content_sha256), claim));
    } else {
        FJORD_TRY(parse_payload(unsigned_payload_value, claim));
    }
    return claim;
}

// The presigned form: its malformed parameters are AuthorizationQueryParametersError, as S3 names them.
base::result<claimed_auth> parse_query_form(const request_view& req, std::int64_t now_s,
                                            const verify_options& options) {
    auto claim = parse_query_fields(req, now_s, options);
    if (!claim && claim.code() == base::errc::authorization_header_malformed)
        return base::fail(base::errc::authorization_query_malformed, claim.err().message);
    return claim;
}

bool query_has(std::string_view raw_query, std::string_view wanted_name) {
    for (const auto& [raw_name, raw_value] : split_query(raw_query))
        if (decode_query_or_raw(raw_name) == wanted_name) return true;
    return false;
}

// Clients sign a decodable path and query; anything else cannot be canonicalised the way they did.
base::result<void> check_decodable(const request_view& req) {
    if (!base::uri_decode(req.raw_path, false))
        return base::fail(base::errc::invalid_uri, "The path contains a malformed percent-escape");
    for (const auto& [raw_name, raw_value] : split_query(req.raw_query)) {
        if (!base::uri_decode(raw_name, false) || !base::uri_decode(raw_value, false))
            return base::fail(base::errc::invalid_uri,
                              "The query contains a malformed percent-escape");
    }
    return {};
}

// The signing key of a credential for a day and region, derived with four HMACs: each core keeps the
// last few it derived (a server sees one or a few keys a day), keyed by everything the key depends on.
std::string cached_signing_key(const credentials& creds, const std::string& date,
                               const std::string& region) {
    struct entry {
        std::string access_key, secret_digest, date, region, key;
    };
    constexpr std::size_t max_entries = 8;
    thread_local std::vector<entry> cache;
    // The secret enters as its digest, so that a changed secret never finds a stale key.
    std::string secret_digest = base::sha256(creds.secret_key);
    for (const auto& e : cache)
        if (e.date == date && e.region == region && e.access_key == creds.access_key &&
            base::constant_time_equal(e.secret_digest, secret_digest))
            return e.key;
    std::string key = derive_signing_key(creds.secret_key, date, region, s3_service);
    if (cache.size() == max_entries) cache.erase(cache.begin());
    cache.push_back({creds.access_key, std::move(secret_digest), date, region, key});
    return key;
}

// The checks both forms share once the claim is parsed: key, coverage, and the signature itself.
base::result<auth_result> check_claim(const request_view& req, const credential_store& store,
                                      claimed_auth claim) {
    const credentials* creds = store.find(claim.credential.access_key);
    if (creds == nullptr) {
        return base::fail(base::errc::invalid_access_key_id,
                          "The AWS Access Key Id you provided does not exist in our records.");
    }
    FJORD_TRY(check_amz_headers_signed(req.headers, claim));

    std::string scope =
        make_scope(claim.credential.date_yyyymmdd, claim.credential.region, s3_service);
    std::string signing_key =
        cached_signing_key(*creds, claim.credential.date_yyyymmdd, claim.credential.region);
    std::string canonical =
        canonical_request(req, claim.signed_headers, claim.hashed_payload, claim.presigned);
    std::string expected =
        signature_hex(signing_key, string_to_sign(claim.amz_date, scope, canonical));
    if (!base::constant_time_equal(expected, claim.signature_hex))
        return base::fail(base::errc::signature_does_not_match,
                          std::string(signature_mismatch_message));

    auth_result result;
    result.access_key = std::move(claim.credential.access_key);
    result.region = std::move(claim.credential.region);
    result.scope = std::move(scope);
    result.amz_date = std::move(claim.amz_date);
    result.signing_key = std::move(signing_key);
    result.seed_signature = std::move(expected);
    result.mode = claim.mode;
    result.payload_sha256_hex = std::move(claim.payload_sha256_hex);
    result.presigned = claim.presigned;
    result.signed_headers = std::move(claim.signed_headers);
    return result;
}

std::string canonical_trailers(std::span<const std::pair<std::string, std::string>> trailers) {
    std::string out;
    for (const auto& [name, value] : trailers) {
        std::string lower = base::to_lower(base::trim(name));
        if (lower == "x-amz-trailer-signature") continue;
        out += lower;
        out += ':';
        out += base::trim(value);
        out += '\n';
    }
    return out;
}

std::string chunk_string_to_sign(std::string_view amz_date, std::string_view scope,
                                 std::string_view previous_signature_hex,
                                 std::string_view data_sha256_hex) {
    std::string text = "AWS4-HMAC-SHA256-PAYLOAD\n";
    text.append(amz_date).append("\n").append(scope).append("\n").append(previous_signature_hex);
    text.append("\n").append(empty_sha256_hex).append("\n").append(data_sha256_hex);
    return text;
}

std::string trailer_string_to_sign(std::string_view amz_date, std::string_view scope,
                                   std::string_view previous_signature_hex,
                                   std::string_view trailers_sha256_hex) {
    std::string text = "AWS4-HMAC-SHA256-TRAILER\n";
    text.append(amz_date).append("\n").append(scope).append("\n").append(previous_signature_hex);
    text.append("\n").append(trailers_sha256_hex);
    return text;
}

}  // namespace

// ---------------------------------------------------------------------------------------------

base::result<auth_result> verify_request(const request_view& req, const credential_store& store,
                                         std::int64_t now_s, const verify_options& options) {
    bool has_header = find_header(req.headers, "authorization").has_value();
    bool has_query =
        query_has(req.raw_query, "X-Amz-Signature") || query_has(req.raw_query, "X-Amz-Algorithm");
    if (!has_header && !has_query)
        return base::fail(base::errc::access_denied, "anonymous access is not allowed");
    if (has_header && has_query) {
        return base::fail(
            base::errc::invalid_argument,
            "Only one auth mechanism allowed; only the X-Amz-Algorithm query parameter or the "
            "Authorization header should be specified");
    }
    FJORD_TRY(check_decodable(req));
    auto claim =
        has_header ? parse_header_form(req, now_s, options) : parse_query_form(req, now_s, options);
    FJORD_TRY(claim);
    const std::string& region = claim->credential.region;
    if (!options.region.empty() && region != options.region) {
        std::string wrong =
            "the region '" + region + "' is wrong; expecting '" + options.region + "'";
        if (claim->presigned)
            return base::fail(base::errc::wrong_region_presigned,
                              "Error parsing the X-Amz-Credential parameter; " + wrong);
        return base::fail(base::errc::wrong_region,
                          "The authorization header is malformed; " + wrong);
    }
    return check_claim(req, store, std::move(*claim));
}

std::string canonical_request(const request_view& req,
                              std::span<const std::string> signed_headers_lower,
                              std::string_view hashed_payload, bool presigned) {
    std::string out;
    out.reserve(512);
    out += req.method;
    out += '\n';
    out += canonical_uri(req.raw_path);
    out += '\n';
    out += canonical_query(req.raw_query, presigned);
    out += '\n';
    out += canonical_headers(req.headers, signed_headers_lower);
    out += '\n';
    out += join_signed_headers(signed_headers_lower);
    out += '\n';
    out += hashed_payload;
    return out;
}

std::string string_to_sign(std::string_view amz_date, std::string_view scope,
                           std::string_view canonical_request) {
    std::string text(sigv4_algorithm);
    text.append("\n").append(amz_date).append("\n").append(scope).append("\n");
    text.append(hex_sha256(canonical_request));
    return text;
}

std::string derive_signing_key(std::string_view secret_key, std::string_view date_yyyymmdd,
                               std::string_view region, std::string_view service) {
    std::string date_key = base::hmac_sha256("AWS4" + std::string(secret_key), date_yyyymmdd);
    std::string region_key = base::hmac_sha256(date_key, region);
    std::string service_key = base::hmac_sha256(region_key, service);
    return base::hmac_sha256(service_key, scope_terminator);
}

std::string sign_authorization(const request_view& req, const credentials& creds,
                               std::string_view region, std::string_view amz_date,
                               std::string_view hashed_payload, std::string_view service) {
    FJORD_ASSERT(find_header(req.headers, "host").has_value(),
                 "a signed request needs a host header");
    FJORD_ASSERT(amz_date.size() == 16, "amz_date must look like 20130524T000000Z");
    std::vector<std::string> names;
    for (const header_view& header : req.headers) {
        std::string name = base::to_lower(header.name);
        if (name != "authorization") names.push_back(std::move(name));
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());

    std::string_view date = amz_date.substr(0, 8);
    std::string scope = make_scope(date, region, service);
    std::string signing_key = derive_signing_key(creds.secret_key, date, region, service);
    std::string canonical = canonical_request(req, names, hashed_payload, false);
    std::string signature = signature_hex(signing_key, string_to_sign(amz_date, scope, canonical));

    std::string out(sigv4_algorithm);
    out.append(" Credential=").append(creds.access_key).append("/").append(scope);
    out.append(", SignedHeaders=").append(join_signed_headers(names));
    out.append(", Signature=").append(signature);
    return out;
}

std::string presign_query(std::string_view method, std::string_view raw_path, std::string_view host,
                          const credentials& creds, std::string_view region, std::int64_t now_s,
                          std::int64_t expires_s) {
    FJORD_ASSERT(expires_s >= 1 && expires_s <= max_presign_expires_s,
                 "X-Amz-Expires out of range");
    std::string amz_date = base::format_amz_date(static_cast<std::time_t>(now_s));
    std::string scope = make_scope(std::string_view(amz_date).substr(0, 8), region, s3_service);
    std::string query = "X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential=";
    query.append(base::uri_encode(creds.access_key + "/" + scope, false));
    query.append("&X-Amz-Date=").append(amz_date);
    query.append("&X-Amz-Expires=").append(std::to_string(expires_s));
    query.append("&X-Amz-SignedHeaders=host");

    header_view host_header{"host", host};
    request_view req{method, raw_path, query, std::span<const header_view>(&host_header, 1)};
    const std::string signed_headers[] = {"host"};
    std::string canonical = canonical_request(req, signed_headers, unsigned_payload_value, true);
    std::string signing_key =
        derive_signing_key(creds.secret_key, amz_date.substr(0, 8), region, s3_service);
    query.append("&X-Amz-Signature=")
        .append(signature_hex(signing_key, string_to_sign(amz_date, scope, canonical)));
    return query;
}

std::string sign_chunk(std::string_view signing_key, std::string_view amz_date,
                       std::string_view scope, std::string_view previous_signature_hex,
                       std::span<const std::byte> data) {
    base::digest data_digest(base::digest_kind::sha256);
    data_digest.update(data);
    std::string data_sha256_hex = base::hex_encode(data_digest.finish());
    return signature_hex(signing_key, chunk_string_to_sign(amz_date, scope, previous_signature_hex,
                                                           data_sha256_hex));
}

std::string sign_trailer(std::string_view signing_key, std::string_view amz_date,
                         std::string_view scope, std::string_view previous_signature_hex,
                         std::span<const std::pair<std::string, std::string>> trailers) {
    std::string trailers_sha256_hex = hex_sha256(canonical_trailers(trailers));
    return signature_hex(
        signing_key,
        trailer_string_to_sign(amz_date, scope, previous_signature_hex, trailers_sha256_hex));
}

// ---------------------------------------------------------------------------------------------

chunk_signature_verifier::chunk_signature_verifier(const auth_result& auth)
    : _signing_key(auth.signing_key),
      _amz_date(auth.amz_date),
      _scope(auth.scope),
      _previous_signature_hex(auth.seed_signature),
      _chunk_digest(base::digest_kind::sha256) {}

void chunk_signature_verifier::update(std::span<const std::byte> chunk_data) {
    if (!_closed) _chunk_digest.update(chunk_data);
}

base::result<void> chunk_signature_verifier::check(std::string_view expected_hex,
                                                   std::string_view claimed_hex) {
    if (_closed) {
        return base::fail(base::errc::signature_does_not_match,
                          "The chunk signature chain is already broken or finished");
    }
    std::string claimed = base::to_lower(claimed_hex);
    if (!base::constant_time_equal(expected_hex, claimed)) {
        _closed = true;
        return base::fail(base::errc::signature_does_not_match,
                          std::string(signature_mismatch_message));
    }
    return {};
}

base::result<void> chunk_signature_verifier::finish_chunk(std::string_view claimed_signature_hex) {
    // Finishing also resets the digest, so the next chunk starts clean whatever the outcome.
    std::string data_sha256_hex = base::hex_encode(_chunk_digest.finish());
    std::string expected = signature_hex(
        _signing_key,
        chunk_string_to_sign(_amz_date, _scope, _previous_signature_hex, data_sha256_hex));
    FJORD_TRY(check(expected, claimed_signature_hex));
    _previous_signature_hex = std::move(expected);
    return {};
}

base::result<void> chunk_signature_verifier::verify_trailer(
    std::span<const std::pair<std::string, std::string>> trailers,
    std::string_view claimed_signature_hex) {
    std::string expected =
        sign_trailer(_signing_key, _amz_date, _scope, _previous_signature_hex, trailers);
    FJORD_TRY(check(expected, claimed_signature_hex));
    _closed = true;
    return {};
}

}  // namespace fjord::auth
