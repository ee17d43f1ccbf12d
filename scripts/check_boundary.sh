#!/usr/bin/env bash
# The object-store boundary (src/store/object_store.h) and the layering around it, checked in every build.
# The modules that sit on the boundary — the S3 front end (src/s3), the KV tier (src/kv, an
# implementation of it) and the cluster (src/cluster, another) — may not name the engine's parts
# (writers, drives, pools, spares, schedulers, commits), may include only the store headers listed for
# them, and may not include each other's headers. The S3 layer also never names a data segment: an
# object's parts are the store's (object_record::part_count; a completed upload is assembled by the
# store, store::assemble_upload, which the S3 layer never calls).
set -euo pipefail
cd "$(dirname "$0")/.."
forbidden='\b(object_writer|drive_set|drive_space|buffer_pool|spare_files|write_scheduler|new_object_id|data_file_settings|commit_(put|part|remove|complete|abort|written)|commit_surely_failed|reclaim|reclaim_segments|share_segments|copy_admission|read_object)\b|store::engine\b|\.(drives|pool|spares|writes)\(\)'
# The KV tier and the cluster have parts of their own with some of those names (a log segment's
# reclaim, a stripe's read_object); for them the engine's are named with their namespace.
qualified='\bstore::(object_writer|drive_set|drive_space|buffer_pool|spare_files|write_scheduler|engine|read_object|commit_[a-z_]+|reclaim[a-z_]*|share_segments|new_object_id)\b'
status=0
check() {  # check DIR FORBIDDEN_WORDS ALLOWED_STORE_HEADERS FORBIDDEN_MODULES
    local dir=$1 words=$2 allowed=$3 modules=$4
    if grep -rnE "$words" "$dir" --include='*.h' --include='*.cc'; then
        echo "check_boundary: $dir reaches past the object-store interface (above)" >&2
        status=1
    fi
    if grep -rnE '^#include "store/' "$dir" --include='*.h' --include='*.cc' |
        grep -vE ":#include \"store/($allowed)\.h\""; then
        echo "check_boundary: $dir includes store headers beyond ${allowed//|/, } (above)" >&2
        status=1
    fi
    if grep -rnE "^#include \"($modules)/" "$dir" --include='*.h' --include='*.cc'; then
        echo "check_boundary: $dir includes headers of ${modules//|/, }, which it must not depend on (above)" >&2
        status=1
    fi
}
check src/s3 "$forbidden|\bsegments?\b|\.data\.size_bytes|assemble_upload" 'object_store|object|bytes' 'kv|cluster|server|cli'
check src/kv "$qualified" 'object_store|object|bytes|codec|file_system' 's3|cluster|server|cli|http'
check src/cluster "$qualified" 'object_store|object|bytes|codec' 's3|kv|server|cli'
exit $status
