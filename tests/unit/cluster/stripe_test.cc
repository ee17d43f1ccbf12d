// Version stamps, the stripe layout, shard records and the data plane's bodies.
#include "cluster/stripe.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "cluster/catalog.h"
#include "cluster/cluster_store.h"
#include "cluster/drive_identity.h"
#include "cluster/rpc.h"
#include "cluster/stamp.h"

namespace fjord::cluster {
namespace {

TEST(Stamp, TextOrderIsStampOrder) {
    std::vector<stamp> stamps = {{0, 0},      {1, 5},          {1, 6},
                                 {0xffff, 0}, {1ULL << 40, 1}, {~0ULL, ~0u}};
    for (std::size_t i = 0; i + 1 < stamps.size(); ++i) {
        EXPECT_LT(stamps[i], stamps[i + 1]);
        EXPECT_LT(stamps[i].text(), stamps[i + 1].text());
    }
    for (const auto& s : stamps) {
        EXPECT_EQ(s.text().size(), stamp::text_bytes);
        EXPECT_EQ(stamp::parse(s.text()), s);
    }
    EXPECT_FALSE(stamp::parse("0123"));
    EXPECT_FALSE(stamp::parse("0000000000000000000000G0"));
    EXPECT_FALSE(stamp::parse("0000000000000000000000A0"));  // upper case is not a stamp's text
}

TEST(Stamp, ClockIsMonotonicAndPassesWhatItSees) {
    std::int64_t now = 1000;
    stamp_clock clock(7, [&now] { return now; });
    stamp a = clock.next(), b = clock.next();
    EXPECT_LT(a, b);
    EXPECT_EQ(a.unix_ms(), 1000);
    EXPECT_EQ(a.node, 7u);
    now = 900;  // the wall clock went back: stamps still go forward
    EXPECT_LT(b, clock.next());
    stamp seen{std::uint64_t{5000} << 16, 9};
    clock.observe(seen);
    EXPECT_GT(clock.next().time, seen.time);
    stamp floor{std::uint64_t{9000} << 16, 1};
    EXPECT_GT(clock.next_after(floor), floor);
    // A stamp from a clock a day ahead is not followed.
    const std::uint64_t before = clock.next().time;
    clock.observe(stamp{static_cast<std::uint64_t>(now + 86'400'000) << 16, 3});
    EXPECT_LT(clock.next().time, static_cast<std::uint64_t>(now + stamp_clock::max_skew_ms) << 16);
    EXPECT_GT(clock.next().time, before);
    EXPECT_NE(node_tag("n1"), node_tag("n2"));
}

TEST(Stripe, LayoutCoversTheObjectExactly) {
    for (unsigned k : {1u, 2u, 3u, 5u, 12u})
        for (std::uint32_t block : {64u, 4096u, 1u << 20})
            for (std::uint64_t size : {0ULL, 1ULL, 63ULL, 64ULL, 1000ULL, 4096ULL * 3 + 7,
                                       (1ULL << 20) * 5 + 1, (1ULL << 22)}) {
                stripe_layout l{k, 2, block, size};
                std::uint64_t data = 0, shard = 0;
                for (std::uint64_t s = 0; s < l.stripes(); ++s) {
                    EXPECT_EQ(l.data_offset(s), data);
                    EXPECT_EQ(l.shard_offset(s), shard);
                    // The stripe's k blocks hold its bytes, with less than one byte per block spare.
                    EXPECT_GE(std::uint64_t{k} * l.block_of(s), l.data_in(s));
                    EXPECT_LT(std::uint64_t{k} * l.block_of(s), l.data_in(s) + k);
                    EXPECT_LE(l.block_of(s), block);
                    data += l.data_in(s);
                    shard += l.block_of(s);
                }
                EXPECT_EQ(data, size) << k << " " << block << " " << size;
                EXPECT_EQ(shard, l.shard_bytes());
                // Padding is less than one block per stripe: each shard holds its share of the bytes.
                EXPECT_LE(l.shard_bytes() * k, size + std::uint64_t{k} * l.stripes());
            }
}

shard_meta sample_meta() {
    shard_meta m;
    m.version = {123456789, 42};
    m.k = 2;
    m.m = 2;
    m.index = 3;
    m.block_bytes = 4096;
    m.object.size_bytes = 10000;
    m.object.etag = "abc-1";
    m.object.content_type = "text/plain";
    m.object.headers = {{"x-amz-meta-a", "b"}};
    m.object.tags = {{"t", "v"}};
    m.object.acl = "owner-only";
    m.block_crcs = {1, 2};  // 10000 bytes in stripes of 8192: two stripes
    return m;
}

TEST(Stripe, ShardRecordsRoundTripAndAreChecked) {
    shard_meta m = sample_meta();
    auto back = decode_shard_meta(encode_shard_meta(m));
    ASSERT_TRUE(back) << back.err().message;
    EXPECT_EQ(back->version, m.version);
    EXPECT_EQ(back->index, 3u);
    EXPECT_EQ(back->object.etag, "abc-1");
    EXPECT_EQ(back->object.headers, m.object.headers);
    EXPECT_EQ(back->object.tags, m.object.tags);
    EXPECT_EQ(back->object.acl, "owner-only");
    EXPECT_EQ(back->block_crcs, m.block_crcs);

    std::string bytes = encode_shard_meta(m);
    for (std::size_t cut = 0; cut < bytes.size(); ++cut)
        EXPECT_FALSE(decode_shard_meta(bytes.substr(0, cut))) << cut;
    EXPECT_FALSE(decode_shard_meta(bytes + "x"));
    shard_meta wrong = m;
    wrong.block_crcs.push_back(3);
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
    wrong = m;
    wrong.index = 4;
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
    wrong = m;
    wrong.k = 30, wrong.m = 3;
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
    wrong = m;
    wrong.block_bytes = 32;
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
    wrong = m;  // a size whose stripes would overflow, or past S3's largest object
    wrong.object.size_bytes = ~0ULL - 3;
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
}

TEST(Stripe, ManifestsListTheirPartsInOrder) {
    shard_meta m = sample_meta();
    m.kind = shard_kind::manifest;
    m.block_crcs.clear();  // a manifest has no bytes of its own
    m.upload_id = "0123abcd";
    m.parts = {{1, {5, 1}, 6000}, {3, {7, 2}, 4000}};
    EXPECT_EQ(m.layout().stripes(), 0u);
    auto back = decode_shard_meta(encode_shard_meta(m));
    ASSERT_TRUE(back) << back.err().message;
    EXPECT_EQ(back->upload_id, "0123abcd");
    EXPECT_EQ(back->parts, m.parts);
    shard_meta wrong = m;
    wrong.parts[1].size_bytes = 1;  // the parts must add up to the object's size
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
    wrong = m;
    std::swap(wrong.parts[0], wrong.parts[1]);
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
    wrong = m;
    wrong.block_crcs = {1};
    EXPECT_FALSE(decode_shard_meta(encode_shard_meta(wrong)));
}

TEST(Stripe, ShardEtagsSortByStampAndCarryTheSummary) {
    shard_meta a = sample_meta(), b = sample_meta();
    b.version.time += 1;
    b.object.etag = "zzz";  // a later version's tag sorts after whatever the content
    a.object.etag = "~~~~";
    EXPECT_LT(shard_etag(a), shard_etag(b));
    auto summary = parse_shard_etag(shard_etag(a));
    ASSERT_TRUE(summary);
    EXPECT_EQ(summary->version, a.version);
    EXPECT_EQ(summary->kind, shard_kind::object);
    EXPECT_EQ(summary->object_bytes, 10000u);
    EXPECT_EQ(summary->object_etag, "~~~~");
    // The conditions a node's engine applies (shard_service.cc): "newer" and "at most".
    EXPECT_LT(shard_etag(a), b.version.text());
    EXPECT_FALSE(shard_etag(b) < b.version.text());
    EXPECT_LT(shard_etag(b), b.version.text() + "~");
    EXPECT_FALSE(parse_shard_etag("plain-etag"));
}

TEST(Rpc, PathsRoundTrip) {
    for (std::string key : {"a", "dir/sub/file.bin", "sp ace+plus%25", "\xc3\xa9/x", "//double"}) {
        auto t = parse_rpc_path(rpc_path("shard", "c.bucket.0011", key));
        ASSERT_TRUE(t) << key;
        EXPECT_EQ(t->op, "shard");
        EXPECT_EQ(t->bucket, "c.bucket.0011");
        EXPECT_EQ(t->key, key);
    }
    EXPECT_FALSE(parse_rpc_path("/bucket/key"));
    EXPECT_FALSE(parse_rpc_path(std::string(rpc_prefix) + "shard/b"));
    EXPECT_TRUE(parse_rpc_path(std::string(rpc_prefix) + "list/b"));
}

TEST(Rpc, UploadHeadsAreCheckedAgainstTheirRecords) {
    upload_head head{{99, 1}, shard_kind::object, 2, 2, 3, 4096, 10000, {}};
    auto headers = upload_headers(head);
    auto back = parse_upload_head(headers[0].second, headers[1].second, headers[2].second);
    ASSERT_TRUE(back) << back.err().message;
    EXPECT_EQ(back->layout().shard_bytes(), head.layout().shard_bytes());
    shard_meta m = sample_meta();
    m.version = head.version;
    EXPECT_TRUE(matches(*back, m));
    m.index = 1;
    EXPECT_FALSE(matches(*back, m));
    EXPECT_FALSE(parse_upload_head(headers[0].second, "o 2 2 4 4096 10", "newer"));
    EXPECT_FALSE(parse_upload_head(headers[0].second, "d 2 2 1 4096 10", "newer"));
    EXPECT_FALSE(parse_upload_head(headers[0].second, "o 2 2 1 4096 10 junk", "newer"));
    EXPECT_FALSE(parse_upload_head(headers[0].second, "o 258 2 1 4096 10", "newer"));
    EXPECT_FALSE(parse_upload_head("nope", headers[1].second, "newer"));
    EXPECT_FALSE(parse_upload_head(headers[0].second, headers[1].second, "older"));
    auto cas = acceptance::parse("at-most " + stamp{5, 6}.text());
    ASSERT_TRUE(cas);
    EXPECT_EQ(cas->kind, acceptance::rule::at_most);
    EXPECT_EQ(cas->bound, (stamp{5, 6}));
}

TEST(Rpc, BodiesRoundTripAndRefuseDamage) {
    std::vector<std::string> keys = {"a", "", "b/c"};
    auto back = decode_key_list(encode_key_list(keys));
    ASSERT_TRUE(back);
    EXPECT_EQ(*back, keys);
    EXPECT_FALSE(decode_key_list(encode_key_list(keys) + "x"));

    std::vector<meta_reply> replies(3);
    replies[1].kind = meta_reply::state::present;
    replies[1].versions = {sample_meta(), sample_meta()};
    replies[1].versions[1].version.time -= 1;
    replies[2].kind = meta_reply::state::failed;
    auto r = decode_meta_replies(encode_meta_replies(replies), 3);
    ASSERT_TRUE(r);
    EXPECT_EQ((*r)[0].kind, meta_reply::state::absent);
    ASSERT_EQ((*r)[1].versions.size(), 2u);
    EXPECT_EQ((*r)[1].versions[0].object.etag, "abc-1");
    EXPECT_LT((*r)[1].versions[1].version, (*r)[1].versions[0].version);
    EXPECT_EQ((*r)[2].kind, meta_reply::state::failed);
    EXPECT_FALSE(decode_meta_replies(encode_meta_replies(replies), 2));

    shard_listing listing;
    listing.truncated = true;
    listing.entries.push_back({"k", {{7, 8}, shard_kind::deleted, 0, ""}, 55});
    auto l = decode_listing(encode_listing(listing));
    ASSERT_TRUE(l);
    EXPECT_TRUE(l->truncated);
    ASSERT_EQ(l->entries.size(), 1u);
    EXPECT_EQ(l->entries[0].summary.kind, shard_kind::deleted);
    EXPECT_EQ(l->entries[0].modified_ms, 55);
    std::string body = encode_listing(listing);
    for (std::size_t cut = 0; cut < body.size(); ++cut)
        EXPECT_FALSE(decode_listing(body.substr(0, cut)));
}

TEST(Catalog, TopologyAndBucketRecordsRoundTrip) {
    auto t = default_topology({"n3", "n1", "n2", "n4"}, 1 << 20);
    ASSERT_TRUE(t);
    EXPECT_EQ(t->shape.k, 2u);
    EXPECT_EQ(t->shape.m, 2u);
    ASSERT_EQ(t->sets.size(), 1u);
    auto back = decode_topology(encode_topology(*t));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->sets, t->sets);
    EXPECT_EQ(back->leftover_age_ms, 0);  // not named: each node's own
    t->leftover_age_ms = 7'000;
    back = decode_topology(encode_topology(*t));
    ASSERT_TRUE(back);
    EXPECT_EQ(back->leftover_age_ms, 7'000);
    EXPECT_FALSE(decode_topology(
        R"({"k":2,"m":2,"block_bytes":1048576,"sets":[["a","b","c","d"]],"leftover_age_ms":0})"));
    EXPECT_FALSE(decode_topology(
        R"({"k":2,"m":2,"block_bytes":1048576,"sets":[["a","b","c","d"]],"leftover_age_ms":"x"})"));
    EXPECT_FALSE(
        decode_topology(R"({"k":2,"m":2,"block_bytes":1048576,"sets":[["n1","n1","n2","n3"]]})"));
    EXPECT_FALSE(
        decode_topology(R"({"k":2,"m":2,"block_bytes":1048576,"sets":[["n1","n2","n3"]]})"));
    EXPECT_FALSE(decode_topology(R"({"k":0,"m":2,"block_bytes":1048576,"sets":[["n1","n2"]]})"));
    EXPECT_FALSE(default_topology({"n1", "n1", "n2", "n3"}, 1 << 20));
    // m > k + 1 would let two conditional writes both reach a write quorum of k + 1.
    EXPECT_FALSE(
        decode_topology(R"({"k":1,"m":3,"block_bytes":1048576,"sets":[["a","b","c","d"]]})"));
    bucket_record b{"bucket", 5, "00ff", {{"owner", "alice"}}, 0};
    auto bb = decode_bucket_record(encode_bucket_record(b));
    ASSERT_TRUE(bb);
    EXPECT_EQ(bb->generation, "00ff");
    EXPECT_EQ(bb->attributes, b.attributes);
    EXPECT_FALSE(decode_bucket_record(R"({"name":"b"})"));
}

TEST(Catalog, RebuildingNodesRoundTripAndMustHoldAPlace) {
    auto t = default_topology({"n1", "n2", "n3", "n4"}, 1 << 20);
    ASSERT_TRUE(t);
    t->rebuilding.push_back({"n3", 7});
    auto back = decode_topology(encode_topology(*t));
    ASSERT_TRUE(back);
    ASSERT_EQ(back->rebuilding.size(), 1u);
    EXPECT_EQ(back->rebuilding[0].node, "n3");
    EXPECT_EQ(back->rebuilding[0].after_heal, 7);
    EXPECT_TRUE(back->is_rebuilding("n3"));
    EXPECT_FALSE(back->is_rebuilding("n1"));
    const std::string geometry =
        R"({"k":2,"m":2,"block_bytes":1048576,"sets":[["a","b","c","d"]],)";
    EXPECT_FALSE(decode_topology(geometry + R"("rebuilding":[{"node":"e","after_heal":1}]})"));
    EXPECT_FALSE(decode_topology(geometry + R"("rebuilding":[{"node":"a"}]})"));
    EXPECT_FALSE(decode_topology(
        geometry + R"("rebuilding":[{"node":"a","after_heal":1},{"node":"a","after_heal":2}]})"));
    EXPECT_TRUE(decode_topology(geometry + R"("rebuilding":[{"node":"a","after_heal":1}]})"));
}

// Four nodes of 2+2, none rebuilding, and the shard of index `index` of a 10-byte version written at
// `ms` (its ETag the time as text).
key_place place_2_2() {
    key_place place;
    place.k = 2;
    place.m = 2;
    place.nodes = {"a", "b", "c", "d"};
    place.rebuilding = {false, false, false, false};
    return place;
}

shard_meta shard_2_2(std::uint64_t ms, unsigned index, shard_kind kind = shard_kind::object) {
    shard_meta meta;
    meta.version = stamp{ms << 16, 1};
    meta.kind = kind;
    meta.k = 2;
    meta.m = 2;
    meta.index = index;
    meta.object.size_bytes = 10;
    meta.object.etag = std::to_string(ms);
    return meta;
}

// 2+2, W = 3, R = 2. Version 2 was acknowledged at nodes 1, 2 and 3; node 3 was then replaced by an
// empty node; node 0 (which missed version 2) holds version 1; node 2 does not answer. Counting the
// replacement's "absent" would pass version 2 over as a write that never reached W and serve version 1.
TEST(DecideVersion, ARebuildingNodesAbsenceIsNotEvidence) {
    key_place place = place_2_2();
    std::vector<node_report> by_node(4);
    by_node[0] = {node_report::state::present, {shard_2_2(1000, 0)}, {}};
    by_node[1] = {node_report::state::present, {shard_2_2(2000, 1)}, {}};
    by_node[2] = {node_report::state::failed, {}, {}};
    by_node[3] = {node_report::state::absent, {}, {}};
    // Without the mark: version 2 (1 holder + 1 unanswered < W) and then version 1 are passed over.
    auto wrong = decide_version(place, by_node);
    ASSERT_TRUE(wrong);
    EXPECT_FALSE(wrong->found);
    // With it: version 2 may have reached W, so the read is refused rather than answered 404.
    place.rebuilding[3] = true;
    auto right = decide_version(place, by_node);
    ASSERT_FALSE(right);
    EXPECT_EQ(right.code(), base::errc::service_unavailable);
    // The same when the mark is not in this coordinator's map but the node says it (rpc.h).
    place.rebuilding[3] = false;
    by_node[3].rebuilding = true;
    auto said = decide_version(place, by_node);
    ASSERT_FALSE(said);
    EXPECT_EQ(said.code(), base::errc::service_unavailable);
    by_node[3].rebuilding = false;
    place.rebuilding[3] = true;
    // Once the replacement holds version 2, it is read from nodes 1 and 3.
    by_node[3] = {node_report::state::present, {shard_2_2(2000, 3)}, {}};
    auto healed = decide_version(place, by_node);
    ASSERT_TRUE(healed);
    EXPECT_TRUE(healed->found);
    EXPECT_EQ(healed->meta.version, (stamp{std::uint64_t{2000} << 16, 1}));
}

// One stamp naming two writes (a clock stepped back across a restart): nodes 0-2 hold one object under
// it, node 3 another. The read takes the first's holders only: decoding shards of both would serve
// bytes of neither.
TEST(DecideVersion, ShardsOfTwoWritesUnderOneStampAreNeverMixed) {
    key_place place;
    place.k = 2;
    place.m = 2;
    place.nodes = {"a", "b", "c", "d"};
    auto shard = [](unsigned index, const char* etag) {
        shard_meta meta;
        meta.version = stamp{std::uint64_t{5000} << 16, 1};
        meta.k = 2;
        meta.m = 2;
        meta.index = index;
        meta.object.size_bytes = 10;
        meta.object.etag = etag;
        return meta;
    };
    std::vector<node_report> by_node(4);
    for (unsigned i = 0; i < 3; ++i)
        by_node[i] = {node_report::state::present, {shard(i, "A")}, {}};
    by_node[3] = {node_report::state::present, {shard(3, "B")}, {}};
    auto d = decide_version(place, by_node);
    ASSERT_TRUE(d);
    ASSERT_TRUE(d->found);
    EXPECT_EQ(d->meta.object.etag, "A");
    EXPECT_EQ(d->holders, 3u);
    EXPECT_FALSE(d->shards[3].has_value());
    EXPECT_FALSE(d->full_width);
    EXPECT_TRUE(d->others);
    // The other write a manifest (one record is enough to read one) whose ETag sorts first: the
    // write on more nodes still comes first (it may be acknowledged; the other cannot be).
    shard_meta manifest = shard(3, "Z");
    manifest.kind = shard_kind::manifest;
    by_node[3] = {node_report::state::present, {manifest}, {}};
    auto again = decide_version(place, by_node);
    ASSERT_TRUE(again);
    EXPECT_EQ(again->meta.object.etag, "A");
}

// 2+2, W = 3. Version 1 is at full width; version 2, a failed write's leftover past the writer's
// decision, is on nodes 0 and 1 only. Every client read must treat version 2 alike: one that hears
// both holders returns it, so one that misses a holder may not pass it over for version 1 (the key
// would go back); it answers 503 instead. A tombstone below W needs k records too. Healing's own
// judgement (no age given) is unchanged.
TEST(DecideVersion, ALeftoverBelowWIsReadAlikeByEveryQuorum) {
    key_place place = place_2_2();
    std::vector<node_report> by_node(4);
    for (unsigned i = 0; i < 4; ++i) {
        by_node[i] = {node_report::state::present, {shard_2_2(1000, i)}, {}};
        if (i < 2) by_node[i].versions.push_back(shard_2_2(2000, i));
    }
    const std::int64_t client = 1;  // a client's read; both versions are older than this
    auto both = decide_version(place, by_node, client);
    ASSERT_TRUE(both);
    EXPECT_EQ(both->meta.version, (stamp{std::uint64_t{2000} << 16, 1}));
    by_node[2] = {node_report::state::failed, {}, {}};  // a node without it is silent: the same
    auto other_silent = decide_version(place, by_node, client);
    ASSERT_TRUE(other_silent);
    EXPECT_EQ(other_silent->meta.version, (stamp{std::uint64_t{2000} << 16, 1}));
    by_node[2] = {node_report::state::present, {shard_2_2(1000, 2)}, {}};
    by_node[1] = {node_report::state::failed, {}, {}};  // a holder is silent: 503, not version 1
    auto holder_silent = decide_version(place, by_node, client);
    ASSERT_FALSE(holder_silent);
    EXPECT_EQ(holder_silent.code(), base::errc::service_unavailable);
    // A tombstone on node 3 alone: no read can return it, so every read passes it over.
    by_node[1] = {node_report::state::present, {shard_2_2(1000, 1), shard_2_2(2000, 1)}, {}};
    by_node[3].versions.push_back(shard_2_2(3000, 3, shard_kind::deleted));
    auto past_tombstone = decide_version(place, by_node, client);
    ASSERT_TRUE(past_tombstone);
    EXPECT_TRUE(past_tombstone->found);
    EXPECT_EQ(past_tombstone->meta.version, (stamp{std::uint64_t{2000} << 16, 1}));
    // Healing still takes a tombstone from one record.
    auto healing = decide_version(place, by_node);
    ASSERT_TRUE(healing);
    EXPECT_FALSE(healing->found);
}

TEST(DriveId, MadeOnceKeptAndNeverGuessed) {
    namespace fs = std::filesystem;
    const fs::path dir =
        fs::temp_directory_path() / ("fjord-drive-id-" + std::to_string(::getpid()));
    fs::remove_all(dir);
    fs::create_directories(dir);
    auto made = load_or_make_drive_id(dir.string());
    ASSERT_TRUE(made);
    EXPECT_FALSE(made->found);
    EXPECT_EQ(made->id.size(), 32u);
    auto again = load_or_make_drive_id(dir.string());
    ASSERT_TRUE(again);
    EXPECT_TRUE(again->found);
    EXPECT_EQ(again->id, made->id);
    std::ofstream(dir / "cluster-drive-id") << "not an id\n";
    auto bad = load_or_make_drive_id(dir.string());
    ASSERT_FALSE(bad);  // a damaged id is not replaced by a new one silently
    EXPECT_EQ(bad.code(), base::errc::data_corrupted);
    fs::remove_all(dir / "cluster-drive-id");
    auto other = load_or_make_drive_id(dir.string());
    ASSERT_TRUE(other);
    EXPECT_FALSE(other->found);
    EXPECT_NE(other->id, made->id);
    fs::remove_all(dir);
}

}  // namespace
}  // namespace fjord::cluster
