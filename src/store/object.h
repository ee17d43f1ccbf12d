#pragma once

// What the engine knows about a stored object. An object's bytes are a list of segments, each one data file
// on one drive; a plain PUT has one segment, a multipart object one per part (completing an upload does not
// copy data). Records are values: they are copied between cores, never shared.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "store/codec.h"

namespace fjord::store {

// 128-bit object id, unique across restarts (random boot nonce + per-core counter). Data file names come
// from it; user keys never reach the file system.
struct object_id {
    std::uint64_t hi = 0;
    std::uint64_t lo = 0;
    bool operator==(const object_id&) const = default;
    std::string hex() const;
};

struct segment {
    std::uint32_t drive = 0;
    object_id id;
    std::uint64_t size_bytes = 0;
    std::uint32_t block_bytes = 0;  // CRC32C block size of the data file
    std::uint32_t table_crc = 0;    // CRC32C of the data file's block-CRC table
};

struct object_record {
    std::uint64_t size_bytes = 0;
    std::int64_t modified_ms = 0;
    std::string etag;  // without quotes
    std::string content_type;
    // Response headers stored with the object (x-amz-meta-*, content-encoding, ...), names lower-case.
    std::vector<std::pair<std::string, std::string>> headers;
    std::string checksum_algorithm;  // "CRC32", "CRC32C", "CRC64NVME", "SHA1", "SHA256" or empty
    std::string checksum_value;      // base64, as S3 returns it
    std::vector<segment> segments;
    std::vector<std::pair<std::string, std::string>> tags;  // object tagging (at most 10)
    // For an object made by a multipart upload: each part's checksum (base64, may be empty), parallel to
    // `segments`. Empty for an object written by one PUT.
    std::vector<std::string> part_checksums;
    // A small object's bytes, kept in its record (journal, snapshot and index) instead of a data file:
    // then `segments` is empty and size_bytes == inline_data.size(). The journal's record checksum
    // covers them.
    std::string inline_data;
    // Versioning (docs/s3-compatibility.md): the version's id, empty for the "null" version (every
    // object of a bucket that never had versioning, and those written while it is suspended). A delete
    // marker is a version without data: a key whose current version is one reads as absent.
    std::string version_id;
    bool delete_marker = false;
    // The object's access control list as the S3 front end keeps it (s3/acl.h, encode_acl); empty:
    // none of its own (the bucket owner's, with full control). Opaque to the store.
    std::string acl;
    // The multipart upload that made this object (empty for any other write): a retried
    // CompleteMultipartUpload whose answer was lost is answered from it after the upload is gone.
    std::string upload_id;

    // The object's parts as a front end sees them (the data files stay the store's): a multipart
    // object's parts in order, one for an object written whole to a data file, none for one kept in
    // its record (inline_data).
    std::size_t part_count() const { return segments.size(); }
    std::uint64_t part_size_bytes(std::size_t i) const { return segments[i].size_bytes; }
};

void encode(encoder& e, const object_record& r);
bool decode(decoder& d, object_record& r);

}  // namespace fjord::store
