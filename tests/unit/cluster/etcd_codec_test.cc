// The etcd gateway's JSON as etcd 3.4 writes it (answers captured from a real etcd), and the bodies sent.
#include "cluster/etcd_codec.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "base/encoding.h"
#include "cluster/membership.h"

namespace fjord::cluster {
namespace {

using json = nlohmann::json;

TEST(EtcdCodec, PrefixEnd) {
    EXPECT_EQ(prefix_end("/fjord/a/"), "/fjord/a0");
    EXPECT_EQ(prefix_end(std::string("a\xff", 2)), "b");
    EXPECT_EQ(prefix_end(std::string("\xff\xff", 2)), std::string(1, '\0'));
}

TEST(EtcdCodec, RequestBodiesEncodeKeysAndNumbers) {
    json range = json::parse(range_body("/k", "/l", 5));
    EXPECT_EQ(range["key"], base::base64_encode("/k"));
    EXPECT_EQ(range["range_end"], base::base64_encode("/l"));
    EXPECT_EQ(range["limit"], "5");
    EXPECT_FALSE(json::parse(range_body("/k", "", 0)).contains("range_end"));
    EXPECT_FALSE(json::parse(range_body("/k", "/l", 5)).contains("revision"));
    EXPECT_EQ(json::parse(range_body("/k", "/l", 5, 1234))["revision"], "1234");
    json put = json::parse(put_body("k", "v", 7587));
    EXPECT_EQ(put["value"], base::base64_encode("v"));
    EXPECT_EQ(put["lease"], "7587");
    EXPECT_FALSE(json::parse(put_body("k", "v", 0)).contains("lease"));
    EXPECT_EQ(json::parse(lease_grant_body(10))["TTL"], "10");
    EXPECT_EQ(json::parse(lease_id_body(2324035826190013191))["ID"], "2324035826190013191");
}

TEST(EtcdCodec, TransactionBody) {
    txn_request t;
    t.compares.push_back({txn_compare::target::create, "/a", 0});
    t.compares.push_back({txn_compare::target::mod, "/e", 12});
    t.puts.push_back({"/a", "x", 3});
    t.deletes.push_back("/d");
    t.read_on_failure = "/a";
    json body = json::parse(txn_body(t));
    ASSERT_EQ(body["compare"].size(), 2u);
    EXPECT_EQ(body["compare"][0]["target"], "CREATE");
    EXPECT_EQ(body["compare"][0]["create_revision"], "0");
    EXPECT_EQ(body["compare"][1]["target"], "MOD");
    EXPECT_EQ(body["compare"][1]["mod_revision"], "12");
    EXPECT_EQ(body["compare"][1]["result"], "EQUAL");
    ASSERT_EQ(body["success"].size(), 2u);
    EXPECT_EQ(body["success"][0]["request_put"]["lease"], "3");
    EXPECT_EQ(body["success"][1]["request_delete_range"]["key"], base::base64_encode("/d"));
    EXPECT_EQ(body["failure"][0]["request_range"]["key"], base::base64_encode("/a"));
}

TEST(EtcdCodec, RangeAnswer) {
    auto r = parse_range(
        R"({"header":{"cluster_id":"324952591200643719","member_id":"3319814642761637952",)"
        R"("revision":"2","raft_term":"2"},"kvs":[{"key":"Zm9v","create_revision":"2",)"
        R"("mod_revision":"2","version":"1","value":"YmFy","lease":"99"}],"count":"1"})");
    ASSERT_TRUE(r) << r.err().message;
    EXPECT_EQ(r->revision, 2);
    ASSERT_EQ(r->kvs.size(), 1u);
    EXPECT_EQ(r->kvs[0].key, "foo");
    EXPECT_EQ(r->kvs[0].value, "bar");
    EXPECT_EQ(r->kvs[0].lease, 99);
    EXPECT_EQ(r->count, 1);
    EXPECT_FALSE(r->more);
    // An empty range leaves kvs and count out.
    auto empty = parse_range(R"({"header":{"revision":"7"}})");
    ASSERT_TRUE(empty);
    EXPECT_TRUE(empty->kvs.empty());
    EXPECT_EQ(empty->count, 0);
}

TEST(EtcdCodec, MalformedAnswersAreRefused) {
    EXPECT_FALSE(parse_range("not json"));
    EXPECT_FALSE(parse_range("[]"));
    EXPECT_FALSE(parse_range(R"({"kvs":[]})"));  // no header
    EXPECT_FALSE(parse_range(R"({"header":{"revision":"x"}})"));
    EXPECT_FALSE(parse_range(R"({"header":{},"kvs":[{"key":"!!"}]})"));
    EXPECT_FALSE(parse_range(R"({"header":{},"kvs":{}})"));
    EXPECT_EQ(parse_range("{").err().code, base::errc::bad_request);
    EXPECT_FALSE(parse_lease_grant(R"({"header":{},"ID":"0","TTL":"5"})"));
    EXPECT_FALSE(parse_keepalive(R"({"header":{}})"));
}

TEST(EtcdCodec, LeaseAnswers) {
    auto grant =
        parse_lease_grant(R"({"header":{"revision":"2"},"ID":"2324035826190013191","TTL":"5"})");
    ASSERT_TRUE(grant);
    EXPECT_EQ(grant->id, 2324035826190013191);
    EXPECT_EQ(grant->ttl_s, 5);
    auto alive = parse_keepalive(R"({"result":{"header":{"revision":"2"},"ID":"7","TTL":"9"}})");
    ASSERT_TRUE(alive);
    EXPECT_EQ(*alive, 9);
    // An expired or revoked lease: the answer has no TTL.
    auto gone = parse_keepalive(R"({"result":{"header":{"revision":"2"},"ID":"1"}})");
    ASSERT_TRUE(gone);
    EXPECT_EQ(*gone, 0);
}

// The messages of a /v3/watch stream as etcd 3.4's gateway sends them.
TEST(EtcdCodec, WatchMessages) {
    EXPECT_EQ(watch_create_body("/a", "/b", 7),
              R"({"create_request":{"key":"L2E=","range_end":"L2I=","start_revision":"7"}})");
    auto created = parse_watch_message(
        R"({"result":{"header":{"cluster_id":"1","revision":"1","raft_term":"2"},"created":true}})");
    ASSERT_TRUE(created);
    EXPECT_TRUE(created->created);
    EXPECT_TRUE(created->events.empty());
    auto changed = parse_watch_message(
        R"({"result":{"header":{"revision":"3"},"events":[{"kv":{"key":"L2E=","mod_revision":"2",)"
        R"("value":"eA=="}},{"type":"DELETE","kv":{"key":"L2I=","mod_revision":"3"}}]}})");
    ASSERT_TRUE(changed);
    EXPECT_EQ(changed->revision, 3);
    ASSERT_EQ(changed->events.size(), 2u);
    EXPECT_EQ(changed->events[0].kv.key, "/a");
    EXPECT_EQ(changed->events[0].kv.value, "x");
    EXPECT_EQ(changed->events[0].kv.mod_revision, 2);
    EXPECT_FALSE(changed->events[0].deleted);
    EXPECT_EQ(changed->events[1].kv.key, "/b");
    EXPECT_TRUE(changed->events[1].deleted);
    EXPECT_EQ(changed->last_mod_revision, 3);
    // A transaction's events share its revision; PUT named, DELETE by number, a lease
    auto txn = parse_watch_message(
        R"({"result":{"header":{"revision":"5"},"events":[{"type":"PUT","kv":{"key":"L2E=",)"
        R"("mod_revision":"5","lease":"42","value":"eQ=="}},{"type":1,"kv":{"key":"L2I=",)"
        R"("mod_revision":"5"}}]}})");
    ASSERT_TRUE(txn);
    ASSERT_EQ(txn->events.size(), 2u);
    EXPECT_FALSE(txn->events[0].deleted);
    EXPECT_EQ(txn->events[0].kv.lease, 42);
    EXPECT_TRUE(txn->events[1].deleted);
    EXPECT_EQ(txn->last_mod_revision, 5);
    auto compacted = parse_watch_message(
        R"({"result":{"header":{"revision":"9"},"canceled":true,"compact_revision":"5",)"
        R"("cancel_reason":"mvcc: required revision has been compacted"}})");
    ASSERT_TRUE(compacted);
    EXPECT_TRUE(compacted->canceled);
    EXPECT_EQ(compacted->compact_revision, 5);
    EXPECT_FALSE(parse_watch_message(R"({"result":{"header":{},"events":[{"type":"PUT"}]}})"));
    EXPECT_FALSE(parse_watch_message(
        R"({"result":{"header":{},"events":[{"type":"BOGUS","kv":{"key":"L2E=","mod_revision":"2"}}]}})"));
    EXPECT_EQ(parse_watch_message(R"({"error":{"grpc_code":14}})").err().code,
              base::errc::service_unavailable);
}

TEST(EtcdCodec, TransactionAnswers) {
    auto won =
        parse_txn(R"({"header":{"revision":"3"},"succeeded":true,"responses":[{"response_put":)"
                  R"({"header":{"revision":"3"}}}]})");
    ASSERT_TRUE(won);
    EXPECT_TRUE(won->succeeded);
    EXPECT_EQ(won->revision, 3);
    auto lost = parse_txn(
        R"({"header":{"revision":"3"},"responses":[{"response_range":{"header":{"revision":"3"},)"
        R"("kvs":[{"key":"L20vYQ==","create_revision":"3","mod_revision":"3","version":"1",)"
        R"("value":"eA=="}],"count":"1"}}]})");
    ASSERT_TRUE(lost);
    EXPECT_FALSE(lost->succeeded);
    ASSERT_EQ(lost->read.size(), 1u);
    EXPECT_EQ(lost->read[0].key, "/m/a");
    EXPECT_EQ(lost->read[0].value, "x");
}

TEST(EtcdCodec, GatewayErrorsMapToTheTable) {
    auto not_found = gateway_error(
        404, R"({"error":"etcdserver: requested lease not found","message":"etcdserver: requested )"
             R"(lease not found","code":5})");
    EXPECT_EQ(not_found.code, base::errc::not_found);
    EXPECT_NE(not_found.message.find("requested lease not found"), std::string::npos);
    EXPECT_EQ(gateway_error(503, R"({"code":14,"message":"no leader"})").code,
              base::errc::service_unavailable);
    EXPECT_EQ(gateway_error(400, R"({"code":3,"message":"bad"})").code,
              base::errc::invalid_argument);
    // A proxy's or gateway's 502-504 without a gRPC code: etcd out of reach, not a broken answer.
    EXPECT_EQ(gateway_error(502, "<html>").code, base::errc::service_unavailable);
    EXPECT_EQ(gateway_error(504, "").code, base::errc::service_unavailable);
    EXPECT_EQ(gateway_error(500, "<html>").code, base::errc::internal);
}

TEST(Membership, NodeRecordRoundTrip) {
    node_record n{"node-1", "http://127.0.0.1:9001", 1764921600000, 2};
    auto back = decode_node_record(encode_node_record(n));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->node_id, "node-1");
    EXPECT_EQ(back->s3_endpoint, "http://127.0.0.1:9001");
    EXPECT_EQ(back->started_unix_ms, 1764921600000);
    EXPECT_EQ(back->cores, 2u);
    EXPECT_FALSE(decode_node_record(R"({"node_id":"Bad Id","s3_endpoint":"x"})"));
    EXPECT_FALSE(decode_node_record(R"({"s3_endpoint":"x"})"));
    EXPECT_FALSE(decode_node_record("null"));
}

TEST(Membership, Names) {
    EXPECT_TRUE(check_name("node id", "n1"));
    EXPECT_TRUE(check_name("node id", "rack-2.node_7"));
    EXPECT_FALSE(check_name("node id", ""));
    EXPECT_FALSE(check_name("node id", "-n"));
    EXPECT_FALSE(check_name("node id", "N1"));
    EXPECT_FALSE(check_name("node id", "a/b"));
    EXPECT_FALSE(check_name("node id", std::string(64, 'a')));
    EXPECT_TRUE(check_name("node id", std::string(63, 'a')));
}

// A watch's events on a map read at revision 10: an older event skipped, a join's two keys of one
// revision both applied (member record and epoch), a lease's expiry deleting its three keys at once.
TEST(Membership, WatchEventsApplyToTheMapRead) {
    const std::string p = cluster_prefix("c");
    auto kv = [](std::string key, std::string value, std::int64_t revision,
                 std::int64_t lease = 0) {
        etcd_kv out;
        out.key = std::move(key), out.value = std::move(value);
        out.mod_revision = revision, out.lease = lease;
        return out;
    };
    auto put = [&](etcd_kv k) { return watch_event{std::move(k), false}; };
    auto gone = [&](std::string key, std::int64_t revision) {
        return watch_event{kv(std::move(key), "", revision), true};
    };
    const std::string n1 = encode_node_record({"n1", "http://a:1", 0, 1});
    const std::string n2 = encode_node_record({"n2", "http://b:1", 0, 1});
    std::map<std::string, etcd_kv> keys;
    for (auto k :
         {kv(p + "epoch", "1", 8), kv(p + "members/n1", n1, 8), kv(p + "alive/n1", n1, 9, 5),
          kv(p + "lifecycle-runner", "n1", 10, 5), kv(p + "stats/n1", "{}", 10, 5)})
        keys[k.key] = k;
    std::int64_t revision = 10;
    auto events = [&] {
        return std::vector<watch_event>{
            put(kv(p + "epoch", "0", 9)),  // older than the read: already in it
            put(kv(p + "members/n2", n2, 11)),  put(kv(p + "epoch", "2", 11)),
            put(kv(p + "alive/n2", n2, 12, 6)), gone(p + "alive/n1", 13),
            gone(p + "lifecycle-runner", 13),   gone(p + "stats/n1", 13)};
    };
    auto first = events();
    EXPECT_EQ(apply_events(keys, &revision, first), 6u);
    EXPECT_EQ(revision, 13);
    auto view = view_of_keys("c", keys, revision, 0);
    ASSERT_TRUE(view);
    EXPECT_EQ(view->epoch, 2);
    EXPECT_EQ(view->revision, 13);
    ASSERT_EQ(view->members.size(), 2u);
    EXPECT_FALSE(view->member("n1")->up);
    EXPECT_TRUE(view->member("n2")->up);
    EXPECT_EQ(view->member("n2")->alive_lease, 6);
    EXPECT_EQ(view->lifecycle_runner, "");
    EXPECT_TRUE(view->node_stats.empty());
    // The same events again (a watch opened again from an older revision) change nothing
    auto again = events();
    EXPECT_EQ(apply_events(keys, &revision, again), 0u);
    // A member record that does not decode fails the view
    keys[p + "members/zz"] = kv(p + "members/zz", "not a record", 14);
    EXPECT_FALSE(view_of_keys("c", keys, 14, 0));
}

}  // namespace
}  // namespace fjord::cluster
