// Access control lists (s3/acl.h): canned ACLs, grant headers, documents, the stored form and who each
// permission reaches.

#include "s3/acl.h"

#include <gtest/gtest.h>

#include <string>

namespace fjord::s3 {
namespace {

constexpr const char* all_users = "http://acs.amazonaws.com/groups/global/AllUsers";

http::request_head head_with(std::vector<http::header> headers) {
    http::request_head head;
    head.headers = std::move(headers);
    return head;
}

access_control_list from_headers(std::vector<http::header> headers, std::string owner = "alice",
                                 std::string bucket_owner = "bob") {
    auto acl = acl_from_headers(head_with(std::move(headers)), owner, bucket_owner);
    EXPECT_TRUE(acl.has_value()) << (acl ? "" : acl.err().message);
    EXPECT_TRUE(acl && acl->has_value());
    return acl && *acl ? **acl : access_control_list{};
}

TEST(acl, canned_acls_grant_what_s3_documents) {
    using p = acl_permission;
    auto read = from_headers({{"x-amz-acl", "public-read"}});
    EXPECT_TRUE(acl_permits(read, "", p::read));
    EXPECT_TRUE(acl_permits(read, "carol", p::read));
    EXPECT_FALSE(acl_permits(read, "carol", p::write));
    EXPECT_TRUE(acl_permits(read, "alice", p::full_control));
    auto write = from_headers({{"x-amz-acl", "public-read-write"}});
    EXPECT_TRUE(acl_permits(write, "", p::write));
    EXPECT_FALSE(acl_permits(write, "", p::read_acp));
    auto authenticated = from_headers({{"x-amz-acl", "authenticated-read"}});
    EXPECT_FALSE(acl_permits(authenticated, "", p::read));
    EXPECT_TRUE(acl_permits(authenticated, "carol", p::read));
    auto priv = from_headers({{"x-amz-acl", "private"}});
    EXPECT_EQ(priv, owner_full_control("alice"));
    EXPECT_TRUE(grants_owner_only(priv));
    EXPECT_FALSE(acl_permits(priv, "bob", p::read));
    auto bucket_owner = from_headers({{"x-amz-acl", "bucket-owner-full-control"}});
    EXPECT_TRUE(acl_permits(bucket_owner, "bob", p::full_control));
    EXPECT_FALSE(grants_owner_only(bucket_owner));
    auto bucket_read = from_headers({{"x-amz-acl", "bucket-owner-read"}});
    EXPECT_TRUE(acl_permits(bucket_read, "bob", p::read));
    EXPECT_FALSE(acl_permits(bucket_read, "bob", p::write));
    // Written by the bucket owner itself, they grant nothing more
    EXPECT_EQ(from_headers({{"x-amz-acl", "bucket-owner-full-control"}}, "bob", "bob"),
              owner_full_control("bob"));
}

TEST(acl, the_owner_always_reads_and_writes_the_acl_but_nothing_else_without_a_grant) {
    using p = acl_permission;
    auto granted = from_headers({{"x-amz-grant-read", "id=\"carol\""}});
    EXPECT_TRUE(acl_permits(granted, "alice", p::read_acp));
    EXPECT_TRUE(acl_permits(granted, "alice", p::write_acp));
    EXPECT_FALSE(acl_permits(granted, "alice", p::read));
    EXPECT_TRUE(acl_permits(granted, "carol", p::read));
    EXPECT_FALSE(acl_permits(granted, "", p::read_acp));  // anonymous is nobody's owner
}

TEST(acl, grant_headers_list_their_grantees) {
    auto acl =
        from_headers({{"x-amz-grant-read", std::string("id=\"carol\", uri=\"") + all_users + "\""},
                      {"x-amz-grant-full-control", "id=dave"},
                      {"X-Amz-Grant-Write-Acp", "id=\"erin\""}});
    ASSERT_EQ(acl.grants.size(), 4u);
    EXPECT_EQ(acl.grants[0], (acl_grant{grantee_kind::user, "carol", acl_permission::read}));
    EXPECT_EQ(acl.grants[1], (acl_grant{grantee_kind::all_users, "", acl_permission::read}));
    EXPECT_EQ(acl.grants[2], (acl_grant{grantee_kind::user, "erin", acl_permission::write_acp}));
    EXPECT_EQ(acl.grants[3], (acl_grant{grantee_kind::user, "dave", acl_permission::full_control}));
    EXPECT_EQ(acl.owner, "alice");
}

TEST(acl, bad_headers_are_refused_with_s3s_errors) {
    auto code = [](std::vector<http::header> h) {
        auto acl = acl_from_headers(head_with(std::move(h)), "alice", "bob");
        return acl ? base::errc::ok : acl.code();
    };
    EXPECT_EQ(code({{"x-amz-acl", "public-read"}, {"x-amz-grant-read", "id=x"}}),
              base::errc::invalid_request);
    EXPECT_EQ(code({{"x-amz-acl", "world-writable"}}), base::errc::invalid_argument);
    EXPECT_EQ(code({{"x-amz-grant-read", "emailAddress=\"a@b.c\""}}),
              base::errc::unresolvable_grant_by_email);
    EXPECT_EQ(code({{"x-amz-grant-read", "uri=\"http://example.com/group\""}}),
              base::errc::invalid_argument);
    EXPECT_EQ(code({{"x-amz-grant-read", "carol"}}), base::errc::invalid_argument);
    EXPECT_EQ(code({{"x-amz-grant-read", "id=\"\""}}), base::errc::invalid_argument);
    EXPECT_EQ(code({{"x-amz-grant-read", "name=carol"}}), base::errc::invalid_argument);
    auto none = acl_from_headers(head_with({{"x-amz-meta-a", "b"}}), "alice", "bob");
    ASSERT_TRUE(none.has_value());
    EXPECT_FALSE(none->has_value());
}

TEST(acl, documents_round_trip_and_bad_ones_are_refused) {
    access_control_list acl{"alice",
                            {{grantee_kind::user, "alice", acl_permission::full_control},
                             {grantee_kind::all_users, "", acl_permission::read},
                             {grantee_kind::authenticated_users, "", acl_permission::write},
                             {grantee_kind::log_delivery, "", acl_permission::read_acp}}};
    auto again = parse_acl_xml(acl_xml(acl));
    ASSERT_TRUE(again.has_value()) << again.err().message;
    EXPECT_EQ(*again, acl);
    auto code = [](const std::string& grants) {
        auto parsed =
            parse_acl_xml("<AccessControlPolicy><Owner><ID>alice</ID></Owner><AccessControlList>" +
                          grants + "</AccessControlList></AccessControlPolicy>");
        return parsed ? base::errc::ok : parsed.code();
    };
    EXPECT_EQ(code("<Grant><Grantee><ID>bob</ID></Grantee><Permission>READ</Permission></Grant>"),
              base::errc::ok);
    EXPECT_EQ(code("<Grant><Grantee><ID>bob</ID></Grantee><Permission>ALL</Permission></Grant>"),
              base::errc::malformed_acl);
    EXPECT_EQ(code("<Grant><Permission>READ</Permission></Grant>"), base::errc::malformed_acl);
    EXPECT_EQ(code("<Grant><Grantee><EmailAddress>a@b.c</EmailAddress></Grantee>"
                   "<Permission>READ</Permission></Grant>"),
              base::errc::unresolvable_grant_by_email);
    EXPECT_EQ(code("<Grant><Grantee><URI>http://x/</URI></Grantee><Permission>READ</Permission>"
                   "</Grant>"),
              base::errc::invalid_argument);
    std::string many;
    for (int i = 0; i < 101; ++i)
        many += "<Grant><Grantee><ID>u" + std::to_string(i) +
                "</ID></Grantee><Permission>READ</Permission></Grant>";
    EXPECT_EQ(code(many), base::errc::malformed_acl);
    EXPECT_EQ(parse_acl_xml("<Other/>").code(), base::errc::malformed_acl);
    EXPECT_EQ(parse_acl_xml("<AccessControlPolicy>").code(), base::errc::malformed_xml);
}

TEST(acl, the_stored_form_round_trips_and_refuses_what_it_cannot_make) {
    access_control_list acl{"alice",
                            {{grantee_kind::user, "carol", acl_permission::write},
                             {grantee_kind::all_users, "", acl_permission::full_control}}};
    auto again = decode_acl(encode_acl(acl));
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(*again, acl);
    EXPECT_EQ(decode_acl(encode_acl(access_control_list{"bob", {}}))->owner, "bob");
    for (const char* bad : {"", "alice", "alice\n3 0 carol\n", "alice\n2 4 \n", "alice\n2 0 \n",
                            "alice\n2 1 x\n", "alice\n2 1\n", "alice\n258 0 c\n", "alice\n2 0 c"})
        EXPECT_FALSE(decode_acl(bad).has_value()) << bad;
}

TEST(acl, ownership_names) {
    for (auto o :
         {object_ownership::enforced, object_ownership::preferred, object_ownership::writer})
        EXPECT_EQ(parse_ownership(ownership_name(o)), o);
    EXPECT_FALSE(parse_ownership("bucketownerenforced").has_value());
}

}  // namespace
}  // namespace fjord::s3
