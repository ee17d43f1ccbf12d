#include "auth/sigv4.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/digest.h"
#include "base/encoding.h"

namespace fjord::auth {
namespace {

std::span<const std::byte> bytes_of(std::string_view text) {
    return std::as_bytes(std::span(text.data(), text.size()));
}

std::string hex_sha256(std::string_view text) { return base::hex_encode(base::sha256(text)); }

std::int64_t unix_time(std::string_view amz_date) {
    auto parsed = base::parse_amz_date(amz_date);
    EXPECT_TRUE(parsed.has_value()) << amz_date;
    return parsed ? static_cast<std::int64_t>(*parsed) : 0;
}

// The SignedHeaders a signer derives from the headers it was given: lower-cased, sorted, unique.
std::vector<std::string> signed_names(std::span<const header_view> headers) {
    std::vector<std::string> names;
    for (const header_view& header : headers) {
        std::string name = base::to_lower(header.name);
        if (name != "authorization") names.push_back(name);
    }
    std::sort(names.begin(), names.end());
    names.erase(std::unique(names.begin(), names.end()), names.end());
    return names;
}

// =============================================================================================
// The public AWS SigV4 test suite (aws-sig-v4-test-suite: .req, .creq, .sts, .authz), service
// "service", region us-east-1, 20150830T123600Z. The get-relative*, get-slash*, get-space and
// normalize-path vectors are skipped on purpose: for services other than S3 the suite normalises
// the path (collapses "//", resolves "." and ".."), and S3 does not — a key may legitimately be
// "a/../b" — so our canonical URI keeps those segments and would not match those vectors.

constexpr std::string_view suite_secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY";
constexpr std::string_view suite_date = "20150830T123600Z";
constexpr std::string_view suite_scope = "20150830/us-east-1/service/aws4_request";
constexpr std::string_view suite_authz_prefix =
    "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, ";

struct suite_vector {
    std::string name;
    std::string_view method;
    std::string_view raw_path;
    std::string_view raw_query;
    std::vector<header_view> headers;
    std::string_view body;
    std::string creq;
    std::string sts_hash;    // last line of the .sts
    std::string authz_tail;  // the .authz after the credential
};

const header_view suite_host{"Host", "example.amazonaws.com"};
const header_view suite_amz_date{"X-Amz-Date", "20150830T123600Z"};

std::string suite_creq(std::string_view method, std::string_view uri, std::string_view query,
                       std::string_view canonical_headers, std::string_view signed_headers) {
    std::string creq(method);
    creq.append("\n").append(uri).append("\n").append(query).append("\n");
    creq.append(canonical_headers).append("\n");
    creq.append(signed_headers).append("\n").append(empty_sha256_hex);
    return creq;
}

// The vectors whose request is just host and x-amz-date, with an empty body.
suite_vector plain_vector(std::string name, std::string_view method, std::string_view raw_path,
                          std::string_view raw_query, std::string_view canonical_uri,
                          std::string_view canonical_query, std::string sts_hash,
                          std::string_view signature) {
    return {
        std::move(name),
        method,
        raw_path,
        raw_query,
        {suite_host, suite_amz_date},
        "",
        suite_creq(method, canonical_uri, canonical_query,
                   "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n", "host;x-amz-date"),
        std::move(sts_hash),
        "SignedHeaders=host;x-amz-date, Signature=" + std::string(signature)};
}

constexpr std::string_view unreserved_query =
    "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz="
    "-._~0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";

std::vector<suite_vector> plain_suite_vectors() {
    return {
        plain_vector("get_vanilla", "GET", "/", "", "/", "",
                     "bb579772317eb040ac9ed261061d46c1f17a8133879d6129b6e1c25292927e63",
                     "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31"),
        plain_vector("get_vanilla_query_order_key_case", "GET", "/", "Param2=value2&Param1=value1",
                     "/", "Param1=value1&Param2=value2",
                     "816cd5b414d056048ba4f7c5386d6e0533120fb1fcfa93762cf0fc39e2cf19e0",
                     "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500"),
        plain_vector("get_vanilla_query_order_value", "GET", "/", "Param1=value2&Param1=value1",
                     "/", "Param1=value1&Param1=value2",
                     "c968629d70850097a2d8781c9bf7edcb988b04cac14cca9be4acc3595f884606",
                     "5772eed61e12b33fae39ee5e7012498b51d56abc0abb7c60486157bd471c4694"),
        plain_vector("get_vanilla_empty_query_key", "GET", "/", "Param1=value1", "/",
                     "Param1=value1",
                     "1e24db194ed7d0eec2de28d7369675a243488e08526e8c1c73571282f7c517ab",
                     "a67d582fa61cc504c4bae71f336f98b97f1ea3c7a6bfe1b6e45aec72011b9aeb"),
        plain_vector("get_vanilla_query_unreserved", "GET", "/", unreserved_query, "/",
                     unreserved_query,
                     "c30d4703d9f799439be92736156d47ccfb2d879ddf56f5befa6d1d6aab979177",
                     "9c3e54bfcdf0b19771a7f523ee5669cdf59bc7cc0884027167c21bb143a40197"),
        plain_vector("get_utf8", "GET", "/\xE1\x88\xB4", "", "/%E1%88%B4", "",
                     "2a0a97d02205e45ce2e994789806b19270cfbbb0921b278ccf58f5249ac42102",
                     "8318018e0b0f223aa2bbf98705b62bb787dc9c0e678f255a891fd03141be5d85"),
        plain_vector("post_vanilla", "POST", "/", "", "/", "",
                     "553f88c9e4d10fc9e109e2aeb65f030801b70c2f6468faca261d401ae622fc87",
                     "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b"),
        plain_vector("post_vanilla_query", "POST", "/", "Param1=value1", "/", "Param1=value1",
                     "9d659678c1756bb3113e2ce898845a0a79dbbc57b740555917687f1b3340fbbd",
                     "28038455d6de14eafc1f9222cf5aa6f1a96197d7deb8263271d420d138af7f11"),
    };
}

// The vectors with extra headers or a body.
std::vector<suite_vector> header_suite_vectors() {
    std::vector<suite_vector> vectors;
    vectors.push_back(
        {"get_header_value_trim",
         "GET",
         "/",
         "",
         {suite_host, {"My-Header1", " value1"}, {"My-Header2", " \"a   b   c\""}, suite_amz_date},
         "",
         suite_creq("GET", "/", "",
                    "host:example.amazonaws.com\nmy-header1:value1\nmy-header2:\"a b c\"\n"
                    "x-amz-date:20150830T123600Z\n",
                    "host;my-header1;my-header2;x-amz-date"),
         "a726db9b0df21c14f559d0a978e563112acb1b9e05476f0a6a1c7d68f28605c7",
         "SignedHeaders=host;my-header1;my-header2;x-amz-date, "
         "Signature=acc3ed3afb60bb290fc8d2dd0098b9911fcaa05412b367055dee359757a9c736"});
    vectors.push_back(
        {"get_header_key_duplicate",
         "GET",
         "/",
         "",
         {suite_host,
          {"My-Header1", "value2"},
          {"My-Header1", "value2"},
          {"My-Header1", "value1"},
          suite_amz_date},
         "",
         suite_creq("GET", "/", "",
                    "host:example.amazonaws.com\nmy-header1:value2,value2,value1\n"
                    "x-amz-date:20150830T123600Z\n",
                    "host;my-header1;x-amz-date"),
         "dc7f04a3abfde8d472b0ab1a418b741b7c67174dad1551b4117b15527fbe966c",
         "SignedHeaders=host;my-header1;x-amz-date, "
         "Signature=c9d5ea9f3f72853aea855b47ea873832890dbdd183b4468f858259531a5138ea"});
    vectors.push_back(
        {"post_x_www_form_urlencoded",
         "POST",
         "/",
         "",
         {{"Content-Type", "application/x-www-form-urlencoded"}, suite_host, suite_amz_date},
         "Param1=value1",
         "POST\n/\n\ncontent-type:application/x-www-form-urlencoded\n"
         "host:example.amazonaws.com\nx-amz-date:20150830T123600Z\n\n"
         "content-type;host;x-amz-date\n"
         "9095672bbd1f56dfc5b65f3e153adc8731a4a654192329106275f4c7b24d0b6e",
         "42a5e5bb34198acb3e84da4f085bb7927f2bc277ca766e6d19c73c2154021281",
         "SignedHeaders=content-type;host;x-amz-date, "
         "Signature=ff11897932ad3f4e8b18135d722051e5ac45fc38421b1da7b9d196a0fe09473a"});
    return vectors;
}

std::vector<suite_vector> suite_vectors() {
    std::vector<suite_vector> vectors = plain_suite_vectors();
    for (suite_vector& v : header_suite_vectors()) vectors.push_back(std::move(v));
    return vectors;
}

class aws_test_suite : public testing::TestWithParam<suite_vector> {};

TEST_P(aws_test_suite, canonical_request_string_to_sign_and_signature_match) {
    const suite_vector& v = GetParam();
    request_view req{v.method, v.raw_path, v.raw_query, v.headers};
    std::string payload_hash = hex_sha256(v.body);
    std::vector<std::string> names = signed_names(v.headers);

    std::string creq = canonical_request(req, names, payload_hash, false);
    EXPECT_EQ(creq, v.creq);
    std::string sts = string_to_sign(suite_date, suite_scope, creq);
    EXPECT_EQ(sts, "AWS4-HMAC-SHA256\n20150830T123600Z\n20150830/us-east-1/service/aws4_request\n" +
                       v.sts_hash);
    credentials creds{"AKIDEXAMPLE", std::string(suite_secret)};
    EXPECT_EQ(sign_authorization(req, creds, "us-east-1", suite_date, payload_hash, "service"),
              std::string(suite_authz_prefix) + v.authz_tail);
}

INSTANTIATE_TEST_SUITE_P(vectors, aws_test_suite, testing::ValuesIn(suite_vectors()),
                         [](const testing::TestParamInfo<suite_vector>& info) {
                             return info.param.name;
                         });

TEST(sigv4_canonical, percent_encoded_utf8_path_canonicalises_like_the_raw_one) {
    std::vector<header_view> headers{suite_host, suite_amz_date};
    request_view raw{"GET", "/\xE1\x88\xB4", "", headers};
    request_view encoded{"GET", "/%e1%88%b4", "", headers};
    std::vector<std::string> names = signed_names(headers);
    EXPECT_EQ(canonical_request(raw, names, empty_sha256_hex, false),
              canonical_request(encoded, names, empty_sha256_hex, false));
}

// =============================================================================================
// The worked S3 examples from the AWS documentation ("Signature Calculations for the Authorization
// Header", "Query String Authentication", "Signature Calculations for ... Multiple Chunks"):
// examplebucket, AKIAIOSFODNN7EXAMPLE, 20130524T000000Z, us-east-1.

constexpr std::string_view doc_access_key = "AKIAIOSFODNN7EXAMPLE";
constexpr std::string_view doc_secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
constexpr std::string_view doc_date = "20130524T000000Z";
constexpr std::string_view doc_scope = "20130524/us-east-1/s3/aws4_request";
constexpr std::string_view doc_host = "examplebucket.s3.amazonaws.com";

credentials doc_credentials() { return {std::string(doc_access_key), std::string(doc_secret)}; }

credential_store doc_store() {
    credential_store store;
    store.add(doc_credentials());
    return store;
}

std::string doc_sts(std::string_view canonical_hash) {
    return "AWS4-HMAC-SHA256\n20130524T000000Z\n20130524/us-east-1/s3/aws4_request\n" +
           std::string(canonical_hash);
}

// Checks one documented example end to end: canonical request, string to sign, the signer's
// Authorization header, and that the verifier accepts the documented header (no spaces after the
// commas, as the documentation writes it).
void check_doc_example(std::string_view method, std::string_view raw_path,
                       std::string_view raw_query, std::vector<header_view> headers,
                       std::string_view payload_hash, std::string_view expected_creq,
                       std::string_view creq_hash, std::string_view signature) {
    request_view req{method, raw_path, raw_query, headers};
    std::vector<std::string> names = signed_names(headers);
    std::string creq = canonical_request(req, names, payload_hash, false);
    EXPECT_EQ(creq, expected_creq);
    EXPECT_EQ(string_to_sign(doc_date, doc_scope, creq), doc_sts(creq_hash));

    std::string signed_list;
    for (const std::string& name : names) signed_list += (signed_list.empty() ? "" : ";") + name;
    std::string authorization =
        sign_authorization(req, doc_credentials(), "us-east-1", doc_date, payload_hash);
    EXPECT_EQ(authorization, "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/" +
                                 std::string(doc_scope) + ", SignedHeaders=" + signed_list +
                                 ", Signature=" + std::string(signature));

    std::string documented = "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/" +
                             std::string(doc_scope) + ",SignedHeaders=" + signed_list +
                             ",Signature=" + std::string(signature);
    headers.push_back({"Authorization", documented});
    req.headers = headers;
    auto auth = verify_request(req, doc_store(), unix_time(doc_date));
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    EXPECT_EQ(auth->access_key, doc_access_key);
    EXPECT_EQ(auth->region, "us-east-1");
    EXPECT_EQ(auth->scope, doc_scope);
    EXPECT_EQ(auth->amz_date, doc_date);
    EXPECT_EQ(auth->seed_signature, signature);
    EXPECT_EQ(auth->mode, payload_mode::signed_sha256);
    EXPECT_EQ(auth->payload_sha256_hex, payload_hash);
    EXPECT_FALSE(auth->presigned);
}

TEST(sigv4_s3_docs, signing_key_derivation) {
    EXPECT_EQ(base::hex_encode(derive_signing_key(doc_secret, "20130524", "us-east-1", "s3")),
              "dbb893acc010964918f1fd433add87c70e8b0db6be30c1fbeafefa5ec6ba8378");
}

TEST(sigv4_s3_docs, get_object_with_range) {
    std::string empty(empty_sha256_hex);
    check_doc_example("GET", "/test.txt", "",
                      {{"Host", doc_host},
                       {"Range", "bytes=0-9"},
                       {"x-amz-content-sha256", empty},
                       {"x-amz-date", doc_date}},
                      empty,
                      "GET\n/test.txt\n\nhost:examplebucket.s3.amazonaws.com\nrange:bytes=0-9\n"
                      "x-amz-content-sha256:" +
                          empty +
                          "\nx-amz-date:20130524T000000Z\n\n"
                          "host;range;x-amz-content-sha256;x-amz-date\n" +
                          empty,
                      "7344ae5b7ee6c3e7e6b0fe0640412a37625d1fbfff95c48bbb2dc43964946972",
                      "f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41");
}

TEST(sigv4_s3_docs, put_object) {
    std::string body_hash = hex_sha256("Welcome to Amazon S3.");
    ASSERT_EQ(body_hash, "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
    check_doc_example(
        "PUT", "/test$file.text", "",
        {{"Host", doc_host},
         {"Date", "Fri, 24 May 2013 00:00:00 GMT"},
         {"x-amz-date", doc_date},
         {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
         {"x-amz-content-sha256", body_hash}},
        body_hash,
        "PUT\n/test%24file.text\n\ndate:Fri, 24 May 2013 00:00:00 GMT\n"
        "host:examplebucket.s3.amazonaws.com\nx-amz-content-sha256:" +
            body_hash +
            "\nx-amz-date:20130524T000000Z\nx-amz-storage-class:REDUCED_REDUNDANCY\n\n"
            "date;host;x-amz-content-sha256;x-amz-date;x-amz-storage-class\n" +
            body_hash,
        "9e0e90d9c76de8fa5b200d8c849cd5b8dc7a3be3951ddb7f6a76b4158342019d",
        "98ad721746da40c64f1a55b78f14c238d841ea1380cd77a1b5971af0ece108bd");
}

std::string doc_bucket_creq(std::string_view query) {
    std::string empty(empty_sha256_hex);
    return "GET\n/\n" + std::string(query) +
           "\nhost:examplebucket.s3.amazonaws.com\nx-amz-content-sha256:" + empty +
           "\nx-amz-date:20130524T000000Z\n\nhost;x-amz-content-sha256;x-amz-date\n" + empty;
}

TEST(sigv4_s3_docs, get_bucket_lifecycle) {
    std::string empty(empty_sha256_hex);
    check_doc_example(
        "GET", "/", "lifecycle",
        {{"Host", doc_host}, {"x-amz-date", doc_date}, {"x-amz-content-sha256", empty}}, empty,
        doc_bucket_creq("lifecycle="),
        "9766c798316ff2757b517bc739a67f6213b4ab36dd5da2f94eaebf79c77395ca",
        "fea454ca298b7da1c68078a5d1bdbfbbe0d65c699e0f91ac7a200a0136783543");
}

TEST(sigv4_s3_docs, list_objects_max_keys_and_prefix) {
    std::string empty(empty_sha256_hex);
    check_doc_example(
        "GET", "/", "max-keys=2&prefix=J",
        {{"Host", doc_host}, {"x-amz-date", doc_date}, {"x-amz-content-sha256", empty}}, empty,
        doc_bucket_creq("max-keys=2&prefix=J"),
        "df57d21db20da04d7fa30298dd4488ba3a2b47ca3a489c74750e0f1e7df1b9b7",
        "34b48302e7b5fa45bde8084f4b7868a86f0a534bc59db6670ed5711ef69dc6f7");
}

constexpr std::string_view doc_presigned_query =
    "X-Amz-Algorithm=AWS4-HMAC-SHA256"
    "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
    "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host"
    "&X-Amz-Signature=aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404";

TEST(sigv4_s3_docs, presigned_url_is_reproduced_by_the_signer) {
    EXPECT_EQ(presign_query("GET", "/test.txt", doc_host, doc_credentials(), "us-east-1",
                            unix_time(doc_date), 86400),
              doc_presigned_query);
}

TEST(sigv4_s3_docs, presigned_url_canonical_request_and_verification) {
    std::vector<header_view> headers{{"Host", doc_host}};
    request_view req{"GET", "/test.txt", doc_presigned_query, headers};
    const std::vector<std::string> names{"host"};
    std::string creq = canonical_request(req, names, unsigned_payload_value, true);
    EXPECT_EQ(creq,
              "GET\n/test.txt\n"
              "X-Amz-Algorithm=AWS4-HMAC-SHA256"
              "&X-Amz-Credential=AKIAIOSFODNN7EXAMPLE%2F20130524%2Fus-east-1%2Fs3%2Faws4_request"
              "&X-Amz-Date=20130524T000000Z&X-Amz-Expires=86400&X-Amz-SignedHeaders=host\n"
              "host:examplebucket.s3.amazonaws.com\n\nhost\nUNSIGNED-PAYLOAD");
    EXPECT_EQ(string_to_sign(doc_date, doc_scope, creq),
              doc_sts("3bfa292879f6447bbcda7001decf97f4a54dc650c8942174ae0a9121cf58ad04"));

    std::int64_t signed_at_s = unix_time(doc_date);
    auto auth = verify_request(req, doc_store(), signed_at_s + 3600);
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    EXPECT_TRUE(auth->presigned);
    EXPECT_EQ(auth->mode, payload_mode::unsigned_payload);
    EXPECT_EQ(auth->seed_signature,
              "aeeed9bbccd4d02ee5c0109b86d86835f995330da4c265957d157751f604d404");
    EXPECT_TRUE(verify_request(req, doc_store(), signed_at_s + 86400).has_value());

    auto expired = verify_request(req, doc_store(), signed_at_s + 86401);
    EXPECT_EQ(expired.code(), base::errc::expired_request);
    if (!expired) {
        EXPECT_EQ(expired.err().message, "Request has expired");
    }
    auto early = verify_request(req, doc_store(), signed_at_s - 16 * 60);
    EXPECT_EQ(early.code(), base::errc::access_denied);
}

// The streaming example: PUT of 66560 'a' bytes as chunks of 65536, 1024 and 0 bytes.
constexpr std::string_view doc_seed_signature =
    "4f232c4386841ef735655705268965c44a0e4690baa4adea153f7db9fa80a0a9";
constexpr std::string_view doc_chunk_signatures[] = {
    "ad80c730a21e5b8d04586a2213dd63b9a0e99e0e2307b0ade35a65485a288648",
    "0055627c9e194cb4542bae2aa5492e3c1575bbb81b612b7d234b86a503ef5497",
    "b6c6ea8a5354eaf15b3cb7646744f4275b71ea724fed81ceb9323e279d449df9",
};
constexpr size_t doc_chunk_sizes[] = {65536, 1024, 0};

auth_result doc_streaming_auth() {
    const std::string authorization =
        "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request,"
        "SignedHeaders=content-encoding;content-length;host;x-amz-content-sha256;x-amz-date;"
        "x-amz-decoded-content-length;x-amz-storage-class,Signature=" +
        std::string(doc_seed_signature);
    std::vector<header_view> headers{{"Host", "s3.amazonaws.com"},
                                     {"x-amz-date", doc_date},
                                     {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                                     {"Authorization", authorization},
                                     {"x-amz-content-sha256", streaming_signed_value},
                                     {"Content-Encoding", "aws-chunked"},
                                     {"x-amz-decoded-content-length", "66560"},
                                     {"Content-Length", "66824"}};
    request_view req{"PUT", "/examplebucket/chunkObject.txt", "", headers};
    auto auth = verify_request(req, doc_store(), unix_time(doc_date));
    EXPECT_TRUE(auth.has_value()) << (auth ? "" : auth.err().message);
    return auth ? *auth : auth_result{};
}

TEST(sigv4_s3_docs, streaming_seed_request_verifies) {
    std::vector<header_view> headers{{"Host", "s3.amazonaws.com"},
                                     {"x-amz-date", doc_date},
                                     {"x-amz-storage-class", "REDUCED_REDUNDANCY"},
                                     {"x-amz-content-sha256", streaming_signed_value},
                                     {"Content-Encoding", "aws-chunked"},
                                     {"x-amz-decoded-content-length", "66560"},
                                     {"Content-Length", "66824"}};
    request_view req{"PUT", "/examplebucket/chunkObject.txt", "", headers};
    std::string creq = canonical_request(req, signed_names(headers), streaming_signed_value, false);
    EXPECT_EQ(string_to_sign(doc_date, doc_scope, creq),
              doc_sts("cee3fed04b70f867d036f722359b0b1f2f0e5dc0efadbc082b76c4c60e316455"));

    auth_result auth = doc_streaming_auth();
    EXPECT_EQ(auth.mode, payload_mode::streaming_signed);
    EXPECT_EQ(auth.seed_signature, doc_seed_signature);
    EXPECT_EQ(auth.scope, doc_scope);
}

TEST(sigv4_s3_docs, streaming_chunk_signatures_are_reproduced_by_the_signer) {
    std::string key = derive_signing_key(doc_secret, "20130524", "us-east-1", "s3");
    std::string previous(doc_seed_signature);
    for (size_t i = 0; i < 3; ++i) {
        std::string data(doc_chunk_sizes[i], 'a');
        previous = sign_chunk(key, doc_date, doc_scope, previous, bytes_of(data));
        EXPECT_EQ(previous, doc_chunk_signatures[i]) << "chunk " << i;
    }
}

TEST(sigv4_chunks, documented_stream_passes_when_fed_in_pieces) {
    chunk_signature_verifier verifier(doc_streaming_auth());
    for (size_t i = 0; i < 3; ++i) {
        std::string data(doc_chunk_sizes[i], 'a');
        // Uneven pieces, as a socket would deliver them.
        for (size_t offset = 0; offset < data.size(); offset += 10000)
            verifier.update(bytes_of(std::string_view(data).substr(offset, 10000)));
        auto ok = verifier.finish_chunk(doc_chunk_signatures[i]);
        EXPECT_TRUE(ok.has_value()) << "chunk " << i;
    }
}

TEST(sigv4_chunks, reordered_chunk_fails) {
    chunk_signature_verifier verifier(doc_streaming_auth());
    std::string second(1024, 'a');
    verifier.update(bytes_of(second));
    EXPECT_EQ(verifier.finish_chunk(doc_chunk_signatures[1]).code(),
              base::errc::signature_does_not_match);
}

TEST(sigv4_chunks, replayed_chunk_fails_and_poisons_the_chain) {
    chunk_signature_verifier verifier(doc_streaming_auth());
    std::string first(65536, 'a');
    verifier.update(bytes_of(first));
    ASSERT_TRUE(verifier.finish_chunk(doc_chunk_signatures[0]).has_value());
    verifier.update(bytes_of(first));
    EXPECT_EQ(verifier.finish_chunk(doc_chunk_signatures[0]).code(),
              base::errc::signature_does_not_match);
    // The genuine next chunk cannot resume a chain that has already failed.
    std::string second(1024, 'a');
    verifier.update(bytes_of(second));
    EXPECT_EQ(verifier.finish_chunk(doc_chunk_signatures[1]).code(),
              base::errc::signature_does_not_match);
}

TEST(sigv4_chunks, altered_chunk_data_fails) {
    chunk_signature_verifier verifier(doc_streaming_auth());
    std::string first(65536, 'a');
    first[100] = 'b';
    verifier.update(bytes_of(first));
    EXPECT_EQ(verifier.finish_chunk(doc_chunk_signatures[0]).code(),
              base::errc::signature_does_not_match);
}

TEST(sigv4_chunks, malformed_claimed_signature_fails) {
    chunk_signature_verifier verifier(doc_streaming_auth());
    EXPECT_EQ(verifier.finish_chunk("").code(), base::errc::signature_does_not_match);
}

// =============================================================================================
// verify_request round trips through our own signer.

constexpr std::string_view test_access_key = "FJORDTESTKEY";
constexpr std::string_view test_secret = "fjord-test-secret/with+odd=chars";
constexpr std::int64_t test_now_s = 1767225600;  // 2026-01-01T00:00:00Z

credential_store test_store() {
    credential_store store;
    store.add({"OTHERKEY", "other-secret"});
    store.add({std::string(test_access_key), std::string(test_secret)});
    return store;
}

// A signed request whose views stay valid for the test: tweak `headers` (or the path/query) after
// sign() to simulate tampering.
struct signed_request {
    std::string method = "PUT";
    std::string raw_path = "/bucket/photos/2026/a%20b.jpg";
    std::string raw_query = "partNumber=2&uploadId=abc";
    std::string amz_date = base::format_amz_date(test_now_s);
    std::string payload = std::string(empty_sha256_hex);
    std::vector<std::pair<std::string, std::string>> fields = {
        {"Host", "localhost:9000"},        {"x-amz-date", amz_date},
        {"x-amz-content-sha256", payload}, {"x-amz-meta-color", "blue"},
        {"Content-Type", "image/jpeg"},
    };
    std::vector<header_view> headers;

    request_view view() {
        headers.clear();
        for (const auto& [name, value] : fields) headers.push_back({name, value});
        return {method, raw_path, raw_query, headers};
    }
    void sign(const credentials& creds, std::string_view region = "us-east-1") {
        std::erase_if(fields,
                      [](const auto& f) { return base::iequals(f.first, "authorization"); });
        std::string authorization = sign_authorization(view(), creds, region, amz_date, payload);
        fields.emplace_back("Authorization", authorization);
    }
    std::string& field(std::string_view name) {
        for (auto& [n, v] : fields)
            if (base::iequals(n, name)) return v;
        fields.emplace_back(std::string(name), "");
        return fields.back().second;
    }
    base::result<auth_result> verify(std::int64_t now_s = test_now_s) {
        return verify_request(view(), test_store(), now_s);
    }
};

credentials test_credentials() { return {std::string(test_access_key), std::string(test_secret)}; }

TEST(sigv4_verify, round_trip_succeeds_and_reports_the_claim) {
    signed_request r;
    r.sign(test_credentials(), "eu-west-3");
    auto auth = r.verify();
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    EXPECT_EQ(auth->access_key, test_access_key);
    EXPECT_EQ(auth->region, "eu-west-3");
    EXPECT_EQ(auth->scope, "20260101/eu-west-3/s3/aws4_request");
    EXPECT_EQ(auth->amz_date, "20260101T000000Z");
    EXPECT_EQ(auth->signing_key, derive_signing_key(test_secret, "20260101", "eu-west-3", "s3"));
    EXPECT_EQ(auth->mode, payload_mode::signed_sha256);
    EXPECT_EQ(auth->payload_sha256_hex, empty_sha256_hex);
    EXPECT_FALSE(auth->presigned);
}

TEST(sigv4_verify, second_key_pair_in_the_store_verifies) {
    signed_request r;
    r.sign({"OTHERKEY", "other-secret"});
    auto auth = r.verify();
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    EXPECT_EQ(auth->access_key, "OTHERKEY");
}

TEST(sigv4_verify, tampered_signed_header_fails) {
    signed_request r;
    r.sign(test_credentials());
    r.field("x-amz-meta-color") = "red";
    EXPECT_EQ(r.verify().code(), base::errc::signature_does_not_match);
}

TEST(sigv4_verify, tampered_path_or_query_fails) {
    signed_request r;
    r.sign(test_credentials());
    r.raw_path = "/bucket/photos/2026/a%20c.jpg";
    EXPECT_EQ(r.verify().code(), base::errc::signature_does_not_match);
    r.raw_path = "/bucket/photos/2026/a%20b.jpg";
    r.raw_query = "partNumber=3&uploadId=abc";
    EXPECT_EQ(r.verify().code(), base::errc::signature_does_not_match);
    r.raw_query = "uploadId=abc&partNumber=2";  // reordering is not tampering
    EXPECT_TRUE(r.verify().has_value());
}

TEST(sigv4_verify, equivalent_path_encoding_still_verifies) {
    signed_request r;
    r.sign(test_credentials());
    r.raw_path = "/bucket/%70hotos/2026/a%20b.jpg";  // %70 is 'p'
    EXPECT_TRUE(r.verify().has_value());
}

TEST(sigv4_verify, wrong_secret_fails) {
    signed_request r;
    r.sign({std::string(test_access_key), "not-the-secret"});
    auto auth = r.verify();
    EXPECT_EQ(auth.code(), base::errc::signature_does_not_match);
}

TEST(sigv4_verify, unknown_access_key_fails) {
    signed_request r;
    r.sign({"NOBODY", std::string(test_secret)});
    EXPECT_EQ(r.verify().code(), base::errc::invalid_access_key_id);
}

TEST(sigv4_verify, date_outside_the_skew_window_fails) {
    signed_request r;
    r.sign(test_credentials());
    EXPECT_TRUE(r.verify(test_now_s + 14 * 60).has_value());
    EXPECT_TRUE(r.verify(test_now_s - 14 * 60).has_value());
    EXPECT_EQ(r.verify(test_now_s + 16 * 60).code(), base::errc::request_time_too_skewed);
    EXPECT_EQ(r.verify(test_now_s - 16 * 60).code(), base::errc::request_time_too_skewed);
    verify_options strict{.max_clock_skew_s = 60};
    EXPECT_EQ(verify_request(r.view(), test_store(), test_now_s + 61, strict).code(),
              base::errc::request_time_too_skewed);
}

TEST(sigv4_verify, date_header_serves_when_x_amz_date_is_absent) {
    signed_request r;
    std::erase_if(r.fields, [](const auto& f) { return f.first == "x-amz-date"; });
    r.fields.emplace_back("Date", base::format_http_date(test_now_s));
    r.sign(test_credentials());
    auto auth = r.verify();
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    EXPECT_EQ(auth->amz_date, "20260101T000000Z");
}

TEST(sigv4_verify, missing_or_unparseable_date_is_denied) {
    signed_request r;
    r.sign(test_credentials());
    r.field("x-amz-date") = "yesterday";
    EXPECT_EQ(r.verify().code(), base::errc::access_denied);
    std::erase_if(r.fields, [](const auto& f) { return f.first == "x-amz-date"; });
    EXPECT_EQ(r.verify().code(), base::errc::access_denied);
}

TEST(sigv4_verify, credential_date_must_match_the_request_date) {
    signed_request r;
    r.sign(test_credentials());
    std::string& authorization = r.field("Authorization");
    authorization.replace(authorization.find("/20260101/"), 10, "/20251231/");
    EXPECT_EQ(r.verify().code(), base::errc::authorization_header_malformed);
}

TEST(sigv4_verify, anonymous_request_is_denied) {
    signed_request r;
    auto auth = r.verify();
    EXPECT_EQ(auth.code(), base::errc::access_denied);
    if (!auth) {
        EXPECT_EQ(auth.err().message, "anonymous access is not allowed");
    }
}

TEST(sigv4_verify, malformed_authorization_headers) {
    const std::string good_signature(64, 'a');
    const std::string credential = "FJORDTESTKEY/20260101/us-east-1/s3/aws4_request";
    const std::vector<std::string> malformed = {
        "AWS4-HMAC-SHA256",
        "AWS4-HMAC-SHA256 Credential=" + credential,
        "AWS4-HMAC-SHA256 Credential=" + credential + ", SignedHeaders=host",
        "AWS4-HMAC-SHA256 Credential=FJORDTESTKEY/20260101/us-east-1/s3, SignedHeaders=host, "
        "Signature=" +
            good_signature,
        "AWS4-HMAC-SHA256 Credential=FJORDTESTKEY/20260101/us-east-1/ec2/aws4_request, "
        "SignedHeaders=host, Signature=" +
            good_signature,
        "AWS4-HMAC-SHA256 Credential=FJORDTESTKEY/2026011/us-east-1/s3/aws4_request, "
        "SignedHeaders=host, Signature=" +
            good_signature,
        "AWS4-HMAC-SHA256 Credential=/20260101/us-east-1/s3/aws4_request, SignedHeaders=host, "
        "Signature=" +
            good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=x-amz-date, Signature=" + good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=x-amz-date;host, Signature=" + good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=Host, Signature=" + good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=host;;x, Signature=" + good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential + ", SignedHeaders=host, Signature=abc",
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=host, Signature=" + std::string(64, 'g'),
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=host, Signature=" + good_signature + ", Signature=" + good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential +
            ", SignedHeaders=host, Extra=1, Signature=" + good_signature,
        "AWS4-HMAC-SHA256 Credential=" + credential + ", SignedHeaders=host, Signature",
    };
    for (const std::string& value : malformed) {
        signed_request r;
        r.field("Authorization") = value;
        EXPECT_EQ(r.verify().code(), base::errc::authorization_header_malformed) << value;
    }
}

TEST(sigv4_verify, two_authorization_headers_are_malformed) {
    signed_request r;
    r.sign(test_credentials());
    std::string authorization = r.field("Authorization");
    r.fields.emplace_back("authorization", authorization);
    EXPECT_EQ(r.verify().code(), base::errc::authorization_header_malformed);
}

TEST(sigv4_verify, other_authorization_schemes_are_refused) {
    signed_request r;
    r.field("Authorization") = "AWS FJORDTESTKEY:frJIUN8DYpKDtOLCwo//yllqDzg=";
    EXPECT_EQ(r.verify().code(), base::errc::invalid_request);
    r.field("Authorization") = "Bearer abc";
    EXPECT_EQ(r.verify().code(), base::errc::invalid_argument);
}

TEST(sigv4_verify, missing_content_sha256_is_an_invalid_request) {
    signed_request r;
    std::erase_if(r.fields, [](const auto& f) { return f.first == "x-amz-content-sha256"; });
    r.sign(test_credentials());
    auto auth = r.verify();
    EXPECT_EQ(auth.code(), base::errc::invalid_request);
    if (!auth) {
        EXPECT_EQ(auth.err().message,
                  "Missing required header for this request: x-amz-content-sha256");
    }
}

TEST(sigv4_verify, unknown_content_sha256_value_is_an_invalid_argument) {
    for (const std::string& value : std::vector<std::string>{"STREAMING-AWS4-HMAC-SHA256-EVENTS",
                                                             "abc", "", std::string(64, 'z')}) {
        signed_request r;
        r.payload = value;
        r.field("x-amz-content-sha256") = value;
        r.sign(test_credentials());
        EXPECT_EQ(r.verify().code(), base::errc::invalid_argument) << value;
    }
}

TEST(sigv4_verify, each_payload_mode_is_recognised) {
    const std::pair<std::string_view, payload_mode> modes[] = {
        {unsigned_payload_value, payload_mode::unsigned_payload},
        {streaming_signed_value, payload_mode::streaming_signed},
        {streaming_signed_trailer_value, payload_mode::streaming_signed_trailer},
        {streaming_unsigned_trailer_value, payload_mode::streaming_unsigned_trailer},
        {"44CE7DD67C959E0D3524FFAC1771DFBBA87D2B6B4B4E99E42034A8B803F8B072",
         payload_mode::signed_sha256},
    };
    for (const auto& [value, mode] : modes) {
        signed_request r;
        r.payload = std::string(value);
        r.field("x-amz-content-sha256") = std::string(value);
        r.sign(test_credentials());
        auto auth = r.verify();
        ASSERT_TRUE(auth.has_value()) << value << ": " << auth.err().message;
        EXPECT_EQ(auth->mode, mode) << value;
        if (mode == payload_mode::signed_sha256) {
            EXPECT_EQ(auth->payload_sha256_hex,
                      "44ce7dd67c959e0d3524ffac1771dfbba87d2b6b4b4e99e42034a8b803f8b072");
        } else {
            EXPECT_EQ(auth->payload_sha256_hex, "");
        }
    }
}

TEST(sigv4_verify, unsigned_amz_header_is_denied) {
    signed_request r;
    r.sign(test_credentials());
    r.fields.emplace_back("X-Amz-Acl", "public-read");
    auto auth = r.verify();
    EXPECT_EQ(auth.code(), base::errc::access_denied);
    if (!auth) {
        EXPECT_NE(auth.err().message.find("x-amz-acl"), std::string::npos);
    }
}

TEST(sigv4_verify, unsigned_ordinary_header_is_allowed) {
    signed_request r;
    r.sign(test_credentials());
    r.fields.emplace_back("User-Agent", "aws-cli/2.15");
    EXPECT_TRUE(r.verify().has_value());
}

TEST(sigv4_verify, upper_case_signature_hex_is_accepted) {
    signed_request r;
    r.sign(test_credentials());
    std::string& authorization = r.field("Authorization");
    size_t at = authorization.find("Signature=") + 10;
    std::transform(authorization.begin() + static_cast<std::ptrdiff_t>(at), authorization.end(),
                   authorization.begin() + static_cast<std::ptrdiff_t>(at),
                   [](char c) { return static_cast<char>(std::toupper(c)); });
    EXPECT_TRUE(r.verify().has_value());
}

TEST(sigv4_verify, header_and_query_auth_together_are_refused) {
    signed_request r;
    r.sign(test_credentials());
    r.raw_query += "&X-Amz-Signature=" + std::string(64, 'a');
    EXPECT_EQ(r.verify().code(), base::errc::invalid_argument);
}

TEST(sigv4_verify, malformed_percent_escape_is_an_invalid_uri) {
    signed_request r;
    r.raw_path = "/bucket/a%2";
    r.sign(test_credentials());
    EXPECT_EQ(r.verify().code(), base::errc::invalid_uri);
    r.raw_path = "/bucket/a";
    r.raw_query = "prefix=%zz";
    r.sign(test_credentials());
    EXPECT_EQ(r.verify().code(), base::errc::invalid_uri);
}

// =============================================================================================
// Presigned round trips.

struct presigned_request {
    std::string method = "GET";
    std::string raw_path = "/bucket/report%202026.pdf";
    std::string raw_query;
    std::vector<std::pair<std::string, std::string>> fields = {{"Host", "s3.example.net"}};
    std::vector<header_view> headers;

    presigned_request(const credentials& creds, std::int64_t expires_s) {
        raw_query = presign_query(method, raw_path, "s3.example.net", creds, "us-east-1",
                                  test_now_s, expires_s);
    }
    base::result<auth_result> verify(std::int64_t now_s) {
        headers.clear();
        for (const auto& [name, value] : fields) headers.push_back({name, value});
        return verify_request({method, raw_path, raw_query, headers}, test_store(), now_s);
    }
};

TEST(sigv4_presigned, round_trip_succeeds_until_expiry) {
    presigned_request r(test_credentials(), 3600);
    auto auth = r.verify(test_now_s + 10);
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    EXPECT_TRUE(auth->presigned);
    EXPECT_EQ(auth->mode, payload_mode::unsigned_payload);
    EXPECT_EQ(auth->access_key, test_access_key);
    EXPECT_EQ(auth->amz_date, "20260101T000000Z");
    EXPECT_TRUE(r.verify(test_now_s + 3600).has_value());
    auto expired = r.verify(test_now_s + 3601);
    EXPECT_EQ(expired.code(), base::errc::expired_request);
    if (!expired) {
        EXPECT_EQ(expired.err().message, "Request has expired");
    }
}

TEST(sigv4_presigned, date_in_the_future_beyond_the_skew_is_denied) {
    presigned_request r(test_credentials(), 3600);
    EXPECT_TRUE(r.verify(test_now_s - 14 * 60).has_value());
    EXPECT_EQ(r.verify(test_now_s - 16 * 60).code(), base::errc::access_denied);
}

TEST(sigv4_presigned, tampering_fails) {
    presigned_request r(test_credentials(), 3600);
    r.raw_path = "/bucket/other.pdf";
    EXPECT_EQ(r.verify(test_now_s).code(), base::errc::signature_does_not_match);
    presigned_request q(test_credentials(), 3600);
    q.raw_query += "&versionId=7";
    EXPECT_EQ(q.verify(test_now_s).code(), base::errc::signature_does_not_match);
    presigned_request m(test_credentials(), 3600);
    m.method = "DELETE";
    EXPECT_EQ(m.verify(test_now_s).code(), base::errc::signature_does_not_match);
}

TEST(sigv4_presigned, extending_the_expiry_fails) {
    presigned_request r(test_credentials(), 3600);
    size_t at = r.raw_query.find("X-Amz-Expires=3600");
    ASSERT_NE(at, std::string::npos);
    r.raw_query.replace(at, 18, "X-Amz-Expires=7200");
    EXPECT_EQ(r.verify(test_now_s).code(), base::errc::signature_does_not_match);
}

TEST(sigv4_presigned, wrong_secret_and_unknown_key_fail) {
    presigned_request wrong({std::string(test_access_key), "guess"}, 3600);
    EXPECT_EQ(wrong.verify(test_now_s).code(), base::errc::signature_does_not_match);
    presigned_request unknown({"NOBODY", "guess"}, 3600);
    EXPECT_EQ(unknown.verify(test_now_s).code(), base::errc::invalid_access_key_id);
}

TEST(sigv4_presigned, malformed_query_parameters) {
    presigned_request base_request(test_credentials(), 3600);
    const std::string good = base_request.raw_query;
    auto replaced = [&](std::string_view from, std::string_view to) {
        std::string query = good;
        size_t at = query.find(from);
        EXPECT_NE(at, std::string::npos) << from;
        if (at != std::string::npos) query.replace(at, from.size(), to);
        return query;
    };
    const std::vector<std::string> malformed = {
        replaced("X-Amz-Expires=3600", "X-Amz-Expires=604801"),
        replaced("X-Amz-Expires=3600", "X-Amz-Expires=0"),
        replaced("X-Amz-Expires=3600", "X-Amz-Expires=-5"),
        replaced("X-Amz-Expires=3600&", ""),
        replaced("X-Amz-Algorithm=AWS4-HMAC-SHA256", "X-Amz-Algorithm=AWS4-HMAC-SHA1"),
        replaced("X-Amz-Date=20260101T000000Z", "X-Amz-Date=2026-01-01"),
        replaced("X-Amz-SignedHeaders=host", "X-Amz-SignedHeaders=x-amz-date"),
        replaced("%2Fs3%2F", "%2Fsqs%2F"),
        good + "&X-Amz-Date=20260101T000000Z",
    };
    for (const std::string& query : malformed) {
        presigned_request r(test_credentials(), 3600);
        r.raw_query = query;
        EXPECT_EQ(r.verify(test_now_s).code(), base::errc::authorization_query_malformed) << query;
    }
}

TEST(sigv4_presigned, unsigned_amz_header_is_denied_but_content_sha256_is_ignored) {
    presigned_request r(test_credentials(), 3600);
    r.fields.emplace_back("x-amz-content-sha256", "UNSIGNED-PAYLOAD");
    EXPECT_TRUE(r.verify(test_now_s).has_value());
    r.fields.emplace_back("x-amz-acl", "public-read");
    EXPECT_EQ(r.verify(test_now_s).code(), base::errc::access_denied);
}

// =============================================================================================
// Canonicalisation details that the vectors do not cover.

TEST(sigv4_canonical, path_is_re_encoded_but_never_normalised) {
    std::vector<header_view> headers{{"host", "h"}};
    const std::vector<std::string> names{"host"};
    auto uri = [&](std::string_view raw_path) {
        std::string creq = canonical_request({"GET", raw_path, "", headers}, names, "X", false);
        size_t first = creq.find('\n');
        return creq.substr(first + 1, creq.find('\n', first + 1) - first - 1);
    };
    EXPECT_EQ(uri("/b//a/./../c"), "/b//a/./../c");
    EXPECT_EQ(uri("/b/a%7Eb"), "/b/a~b");
    EXPECT_EQ(uri("/b/a+b"), "/b/a%2Bb");
    EXPECT_EQ(uri("/b/a%2Bb"), "/b/a%2Bb");
    EXPECT_EQ(uri("/b/key%2Fpart"), "/b/key/part");
    EXPECT_EQ(uri("/b/(x)!*'"), "/b/%28x%29%21%2A%27");
    EXPECT_EQ(uri("/b/a%20b"), "/b/a%20b");
    EXPECT_EQ(uri(""), "/");
}

TEST(sigv4_canonical, query_is_decoded_encoded_and_sorted) {
    std::vector<header_view> headers{{"host", "h"}};
    const std::vector<std::string> names{"host"};
    auto query = [&](std::string_view raw_query, bool presigned = false) {
        std::string creq =
            canonical_request({"GET", "/", raw_query, headers}, names, "X", presigned);
        size_t second = creq.find('\n', creq.find('\n') + 1);
        return creq.substr(second + 1, creq.find('\n', second + 1) - second - 1);
    };
    EXPECT_EQ(query("b=2&a=1&a=0&c"), "a=0&a=1&b=2&c=");
    EXPECT_EQ(query("prefix=a%20b&delimiter=/"), "delimiter=%2F&prefix=a%20b");
    // '+' in a query is a space, as the server routes it: a URL signed for a%2Bb does not also answer
    // for a+b (which the service reads as "a b")
    EXPECT_EQ(query("x=a+b"), "x=a%20b");
    EXPECT_EQ(query("x=a%2Bb"), "x=a%2Bb");
    EXPECT_EQ(query("a+b=1"), "a%20b=1");
    EXPECT_EQ(query("uploads&&"), "uploads=");
    EXPECT_EQ(query("response-content-type=text%2fplain"), "response-content-type=text%2Fplain");
    EXPECT_EQ(query("a=1&X-Amz-Signature=abc", false), "X-Amz-Signature=abc&a=1");
    EXPECT_EQ(query("a=1&X-Amz-Signature=abc", true), "a=1");
}

TEST(sigv4_canonical, header_values_are_trimmed_and_collapsed) {
    std::vector<header_view> headers{
        {"host", "h"}, {"X-Amz-Meta-A", "\t  one   two  three \t"}, {"x-amz-meta-a", "  four"}};
    const std::vector<std::string> names{"host", "x-amz-meta-a"};
    std::string creq = canonical_request({"GET", "/", "", headers}, names, "X", false);
    EXPECT_EQ(creq, "GET\n/\n\nhost:h\nx-amz-meta-a:one two three,four\n\nhost;x-amz-meta-a\nX");
}

// =============================================================================================
// Trailers and the credential store.

TEST(sigv4_chunks, trailer_signature_round_trip) {
    signed_request r;
    r.payload = std::string(streaming_signed_trailer_value);
    r.field("x-amz-content-sha256") = r.payload;
    r.field("x-amz-trailer") = "x-amz-checksum-crc32";
    r.sign(test_credentials());
    auto auth = r.verify();
    ASSERT_TRUE(auth.has_value()) << auth.err().message;
    ASSERT_EQ(auth->mode, payload_mode::streaming_signed_trailer);

    std::string data = "hello, trailer";
    std::string first = sign_chunk(auth->signing_key, auth->amz_date, auth->scope,
                                   auth->seed_signature, bytes_of(data));
    std::string last =
        sign_chunk(auth->signing_key, auth->amz_date, auth->scope, first, bytes_of(""));
    std::vector<std::pair<std::string, std::string>> trailers = {
        {"x-amz-checksum-crc32", "sOO8/Q=="}};
    std::string trailer_signature =
        sign_trailer(auth->signing_key, auth->amz_date, auth->scope, last, trailers);
    trailers.emplace_back("x-amz-trailer-signature", trailer_signature);

    chunk_signature_verifier verifier(*auth);
    verifier.update(bytes_of(data));
    ASSERT_TRUE(verifier.finish_chunk(first).has_value());
    ASSERT_TRUE(verifier.finish_chunk(last).has_value());
    EXPECT_TRUE(verifier.verify_trailer(trailers, trailer_signature).has_value());
    // The trailer ends the chain.
    EXPECT_EQ(verifier.verify_trailer(trailers, trailer_signature).code(),
              base::errc::signature_does_not_match);

    chunk_signature_verifier tampered(*auth);
    tampered.update(bytes_of(data));
    ASSERT_TRUE(tampered.finish_chunk(first).has_value());
    ASSERT_TRUE(tampered.finish_chunk(last).has_value());
    trailers[0].second = "AAAAAA==";
    EXPECT_EQ(tampered.verify_trailer(trailers, trailer_signature).code(),
              base::errc::signature_does_not_match);
}

TEST(sigv4_chunks, trailer_canonical_form_ignores_name_case_and_value_padding) {
    std::string key = derive_signing_key(doc_secret, "20130524", "us-east-1", "s3");
    std::string previous(doc_chunk_signatures[2]);
    const std::vector<std::pair<std::string, std::string>> plain = {
        {"x-amz-checksum-crc32c", "sOO8/Q=="}};
    const std::vector<std::pair<std::string, std::string>> padded = {
        {"X-Amz-Checksum-CRC32C", " sOO8/Q== "}};
    EXPECT_EQ(sign_trailer(key, doc_date, doc_scope, previous, plain),
              sign_trailer(key, doc_date, doc_scope, previous, padded));
    const std::vector<std::pair<std::string, std::string>> other = {
        {"x-amz-checksum-crc32c", "sOO8/R=="}};
    EXPECT_NE(sign_trailer(key, doc_date, doc_scope, previous, plain),
              sign_trailer(key, doc_date, doc_scope, previous, other));
}

TEST(sigv4_credentials, store_finds_and_replaces_keys) {
    credential_store store;
    EXPECT_EQ(store.find("A"), nullptr);
    store.add({"A", "one"});
    store.add({"B", "two"});
    ASSERT_NE(store.find("A"), nullptr);
    EXPECT_EQ(store.find("A")->secret_key, "one");
    store.add({"A", "three"});
    EXPECT_EQ(store.find("A")->secret_key, "three");
    EXPECT_EQ(store.find("B")->secret_key, "two");
    EXPECT_EQ(store.find("a"), nullptr);
}

}  // namespace
}  // namespace fjord::auth
