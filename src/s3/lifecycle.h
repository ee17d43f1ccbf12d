#pragma once

// Bucket lifecycle rules (PutBucketLifecycleConfiguration), as S3 has them plus one rule for checkpoints,
// and the background task that applies them through the object-store boundary.
//
// Supported per rule: a filter (Prefix, legacy or in Filter; Tag; And of Prefix, Tags and object sizes;
// ObjectSizeGreaterThan / LessThan), Status, Expiration (Days, Date, ExpiredObjectDeleteMarker),
// NoncurrentVersionExpiration (NoncurrentDays, NewerNoncurrentVersions),
// AbortIncompleteMultipartUpload (DaysAfterInitiation), and Fjord's FjordKeepNewest (Count, optional
// Delimiter): keep only the newest Count objects under the filter, or, with a Delimiter, the newest Count
// "folders" (the part of each key up to the first delimiter after the prefix; a folder is as new as its
// newest object) and every object in them. Transitions are refused (Fjord has one storage class).
//
// Time as S3 counts it: an action due N days after a time is due at the first midnight UTC after
// time + N days. `day_seconds` shortens the day for tests (as Ceph's rgw_lc_debug_interval does).

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/result.h"
#include "io/task.h"
#include "store/object_store.h"

namespace fjord::s3 {

struct lifecycle_filter {
    std::string prefix;
    std::vector<std::pair<std::string, std::string>> tags;  // every one must match
    std::optional<std::uint64_t> size_greater_than;
    std::optional<std::uint64_t> size_less_than;
    bool legacy_prefix = false;  // <Prefix> directly in <Rule>, rendered back that way
};

struct lifecycle_rule {
    std::string id;
    bool enabled = true;
    lifecycle_filter filter;
    std::optional<std::uint32_t> expiration_days;
    std::optional<std::int64_t> expiration_date_s;  // Unix seconds (a midnight UTC)
    bool expired_object_delete_marker = false;
    std::optional<std::uint32_t> noncurrent_days;
    std::optional<std::uint32_t> newer_noncurrent_versions;
    std::optional<std::uint32_t> abort_upload_days;
    std::optional<std::uint32_t> keep_newest;
    std::string keep_newest_delimiter;
};

struct lifecycle_configuration {
    std::vector<lifecycle_rule> rules;
};

// Parses and checks a LifecycleConfiguration document, with S3's errors (MalformedXML, InvalidArgument,
// InvalidRequest; NotImplemented for transitions).
base::result<lifecycle_configuration> parse_lifecycle(std::string_view xml);
std::string lifecycle_xml(const lifecycle_configuration& config);

// The bucket attribute the configuration is kept in (its XML, as lifecycle_xml renders it).
inline constexpr const char* lifecycle_attribute = "lifecycle";

struct lifecycle_options {
    std::int64_t interval_s = 3600;           // between passes over every bucket
    std::int64_t day_seconds = 86400;         // the length of a lifecycle "day"
    std::uint32_t actions_per_second = 1000;  // deletes and aborts, server-wide
    // Whether this server may act now (a cluster: whether this node is the one that applies the
    // rules, membership.h); checked before each pass and each action. Empty: always.
    std::function<bool()> may_act;
};

struct lifecycle_pass_totals {
    std::uint64_t expired = 0;  // current objects expired (removed, or a delete marker left)
    std::uint64_t noncurrent_removed = 0;
    std::uint64_t markers_removed = 0;  // expired delete markers
    std::uint64_t uploads_aborted = 0;
};

// One pass over every bucket with a configuration, at `now_s`.
io::task<lifecycle_pass_totals> run_lifecycle_pass(store::object_store& store,
                                                   lifecycle_options options, std::int64_t now_s);
// Passes every options.interval_s until the reactor stops (core 0).
io::task<void> run_lifecycle(store::object_store& store, lifecycle_options options);

}  // namespace fjord::s3
