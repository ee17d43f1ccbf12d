#pragma once
// The inter-node data plane's requests and their binary bodies (docs/cluster.md, "Data plane"). They
// travel over HTTP/1.1 on the nodes' S3 port under /_fjord/cluster/v1/ (not a bucket name S3 allows),
// signed with SigV4 by the cluster's root credentials:
//
//   PUT    shard/<bucket>/<key>   store a shard (chunked body: the blocks, each followed by its
//                                 CRC32C, then the shard's record as a length-prefixed frame)
//   GET    shard/<bucket>/<key>?stamp=S&first=F&count=N
//                                 stripes F .. F+N-1 of the shard of version S, each block followed by
//                                 its CRC32C
//   DELETE shard/<bucket>/<key>?stamp=S   remove the shard of version S
//   POST   trim/<bucket>/<key>?below=S        remove the shards of versions older than S
//   POST   meta/<bucket>          the shard records of many keys, every version (body: a key list)
//   GET    list/<bucket>?prefix=P&after=A&max=N   the node's shards in key order, every version, as
//                                 summaries
//   DELETE bucket/<bucket>        remove a node-local shard bucket and what it holds
//   POST   fence/<bucket>         close the bucket generation of this shard bucket (every namespace)
//                                 to new shards (DeleteBucket); 200 once those committing are done
//   DELETE fence/<bucket>         lift that fence
//   POST   fence/<bucket>?deleted=1   the same, once the bucket is deleted: the node's coordinator forgets
//                                 the bucket at once
//
// A node whose drive is being rebuilt (it came back empty, or took another's place, and healing has not
// yet given it every shard: catalog.h, rebuild_mark) answers meta and list with the header
// x-fjord-rebuilding: 1. What it says it lacks proves nothing, and a coordinator does not count it as
// an answer whatever its own map says (a coordinator that has not read the map since the node was
// marked learns it here).
//
// <bucket> is the node-local shard bucket (stripe.h, shard_bucket); keys are percent-encoded as S3
// paths are. Integers in bodies are little-endian, strings length-prefixed (store/codec.h).
//
// A node keeps several versions of a key's shard (its engine's versioning, the version id being the
// stamp's text): a write stores a new version beside the older ones, so that a write that fails below
// its quorum never takes away the shards of the version before it; older versions go once a newer one
// is acknowledged or healed (trim).
//
// Thread-safety: pure functions.
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "cluster/stamp.h"
#include "cluster/stripe.h"

namespace fjord::cluster {

inline constexpr std::string_view rpc_prefix = "/_fjord/cluster/v1/";
constexpr std::size_t max_rpc_keys = 1000;
constexpr std::size_t max_trailer_bytes = 4 * 1024 * 1024;

struct rpc_target {
    std::string op;  // shard, trim, meta, list, bucket, fence
    std::string bucket;
    std::string key;
};
// The raw (percent-encoded) path of a request.
std::string rpc_path(std::string_view op, std::string_view bucket, std::string_view key = {});
base::result<rpc_target> parse_rpc_path(std::string_view raw_path);

// When a node takes a shard: `newer`, when its version is newer than the key's current one there
// (an older write that arrives late never replaces a newer one); `at_most`, when the key's current
// version there is at most `bound` (a conditional write, which read `bound` as the key's version).
struct acceptance {
    enum class rule : std::uint8_t { newer, at_most } kind = rule::newer;
    stamp bound;
    std::string text() const;
    static std::optional<acceptance> parse(std::string_view text);
};

// What a shard upload's head says: enough for the node to frame the body before it reads the record
// that ends it (which must agree).
struct upload_head {
    stamp version;
    shard_kind kind = shard_kind::object;
    unsigned k = 1;
    unsigned m = 0;
    unsigned index = 0;
    std::uint32_t block_bytes = default_block_bytes;
    std::uint64_t object_bytes = 0;
    acceptance accept;
    stripe_layout layout() const {
        return {k, m, block_bytes, kind == shard_kind::object ? object_bytes : 0};
    }
};
// As headers: x-fjord-stamp, x-fjord-layout ("kind k m index block_bytes object_bytes"; the object's
// size, which only an object's shards stripe),
// x-fjord-accept.
std::vector<std::pair<std::string, std::string>> upload_headers(const upload_head& head);
base::result<upload_head> parse_upload_head(std::string_view stamp_text,
                                            std::string_view layout_text,
                                            std::string_view accept_text);
// Whether a shard's record agrees with the head it was uploaded under.
bool matches(const upload_head& head, const shard_meta& meta);

// The final frame of an upload: the shard's record, length-prefixed.
std::string trailer_frame(const shard_meta& meta);

inline constexpr const char* rebuilding_header = "x-fjord-rebuilding";
// A shard upload of a version the node already holds: the entity tag (stripe.h, shard_etag) of the
// shard it holds, stored only if it is the uploader's own.
inline constexpr const char* held_etag_header = "x-fjord-held-etag";

std::string encode_key_list(std::span<const std::string> keys);
base::result<std::vector<std::string>> decode_key_list(std::string_view body);

struct meta_reply {
    enum class state : std::uint8_t { absent = 0, present = 1, failed = 2 } kind = state::absent;
    std::vector<shard_meta> versions;  // when present: newest first (with their `damaged` marks)
};
// The most versions of one key a node answers with.
constexpr std::size_t max_versions_per_key = 64;
std::string encode_meta_replies(std::span<const meta_reply> replies);
base::result<std::vector<meta_reply>> decode_meta_replies(std::string_view body,
                                                          std::size_t expected);

struct listed_shard {
    std::string key;
    shard_summary summary;
    std::int64_t modified_ms = 0;
};
struct shard_listing {
    std::vector<listed_shard> entries;
    bool truncated = false;
};
// A node's listing as the etags of its records say it (entries whose etag is not a shard's are left
// out by the encoder's caller).
std::string encode_listing(const shard_listing& listing);
base::result<shard_listing> decode_listing(std::string_view body);

}  // namespace fjord::cluster
