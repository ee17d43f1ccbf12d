#pragma once
// How an object is cut into stripes and shards, and what each shard carries about its object
// (docs/cluster.md, "Stripes and shards").
//
// An object of n bytes is a run of stripes. A full stripe holds k * block_bytes bytes: block j of it
// (j < k) is the j-th block_bytes of those bytes, and blocks k .. k + m - 1 are the code's parity. The
// last stripe holds the rest, r bytes, in k blocks of ceil(r / k) bytes (the last block padded with
// zeros) and m parity blocks of that length. Shard i of the object is block i of every stripe, one after
// the other, so each shard is ceil-balanced: no node stores more than its share plus one padding block.
//
// Every shard block is checked end to end with its CRC32C: the writer computes it when it encodes the
// stripe, the node that stores the shard checks it before it commits, keeps it in the shard's record,
// and sends it with the block on every read, where the reader checks it again.
//
// A shard's record on its node (shard_meta) names the version it belongs to (a stamp), whether it is the
// object's data or a deletion (a tombstone, no bytes), the geometry, the shard's index, the object's
// record as the front end built it (size, entity tag, metadata, checksums) and the shard's block CRCs.
//
// Thread-safety: pure functions and values.
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/result.h"
#include "cluster/stamp.h"
#include "store/object.h"

namespace fjord::cluster {

// The block of a full stripe's shard: 1 MiB, the size of the nodes' own disk I/O.
constexpr std::uint32_t default_block_bytes = 1024 * 1024;

struct stripe_layout {
    unsigned k = 1;
    unsigned m = 0;
    std::uint32_t block_bytes = default_block_bytes;
    std::uint64_t object_bytes = 0;

    std::uint64_t stripe_data_bytes() const { return std::uint64_t{k} * block_bytes; }
    std::uint64_t stripes() const;
    // The length of every shard's block in stripe `s` (< stripes()).
    std::uint32_t block_of(std::uint64_t s) const;
    // Bytes of the object in stripe `s`, and where they start in it.
    std::uint64_t data_in(std::uint64_t s) const;
    std::uint64_t data_offset(std::uint64_t s) const { return s * stripe_data_bytes(); }
    // Where stripe `s`'s block starts within a shard, and a whole shard's length.
    std::uint64_t shard_offset(std::uint64_t s) const { return s * std::uint64_t{block_bytes}; }
    std::uint64_t shard_bytes() const;
};

enum class shard_kind : char {
    object = 'o',    // the object's data
    deleted = 'd',   // a tombstone: the key was deleted at this version
    manifest = 'm',  // an object made by a multipart upload: its parts, objects of their own
};

// A part of an object made by a multipart upload: the part's own object (stripe.h's layout, in the
// bucket's parts namespace) at this version.
struct manifest_part {
    std::uint32_t number = 0;
    stamp version;
    std::uint64_t size_bytes = 0;
    bool operator==(const manifest_part&) const = default;
};

struct shard_meta {
    stamp version;
    shard_kind kind = shard_kind::object;
    unsigned k = 1;
    unsigned m = 0;
    unsigned index = 0;  // which shard of the stripes this is (< k + m)
    std::uint32_t block_bytes = default_block_bytes;
    // The object as the front end recorded it (no segments and no inline bytes: those are the node's);
    // object.size_bytes is the object's size.
    store::object_record object;
    std::vector<std::uint32_t> block_crcs;  // this shard's blocks, one per stripe
    // A manifest's upload and parts, in order (the object's bytes are theirs, one after the other).
    std::string upload_id;
    std::vector<manifest_part> parts;
    // Not part of the record's encoding: the node found this shard's bytes damaged (they fail their
    // checksums, or the data file is gone) and keeps the record, marked, until healing rewrites it.
    bool damaged = false;

    // The bytes this version's shards stripe: none but an object's.
    stripe_layout layout() const {
        return {k, m, block_bytes, kind == shard_kind::object ? object.size_bytes : 0};
    }
};

std::string encode_shard_meta(const shard_meta& meta);
// Checks what a node relies on: a known kind, 1 <= k, k + m <= 32, index < k + m, a block size of 64 B
// to 16 MiB, one CRC per stripe (none for a tombstone or a manifest, which have no bytes), and a
// manifest's parts in ascending order (at most 10,000).
base::result<shard_meta> decode_shard_meta(std::string_view bytes);

// The entity tag of a shard's record on its node: the stamp's 24 hex digits, the kind, then the object's
// size and its entity tag ("<stamp><kind><size>:<etag>"). A node compares these bytewise to refuse a
// write older than what it holds, and a listing of a node's records carries what a cluster listing
// needs without reading each record.
std::string shard_etag(const shard_meta& meta);
struct shard_summary {
    stamp version;
    shard_kind kind = shard_kind::object;
    std::uint64_t object_bytes = 0;
    std::string object_etag;
};
std::optional<shard_summary> parse_shard_etag(std::string_view etag);

// The name of the node-local bucket that holds the shards of a cluster bucket: a namespace letter ('c'
// its objects, 'u' its multipart uploads' records, 'p' their parts), the bucket's name and its
// generation (a bucket deleted and made again starts afresh).
std::string shard_bucket(std::string_view bucket, std::string_view generation, char space = 'c');

}  // namespace fjord::cluster
