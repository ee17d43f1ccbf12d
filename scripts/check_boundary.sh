#!/usr/bin/env bash
# The object-store boundary (src/store/object_store.h): the front ends speak to storage only through it.
# Fails when a front end names the engine's parts (writers, drives, pools, spares, schedulers, commits)
# or includes a store header other than the boundary's own.
set -euo pipefail
cd "$(dirname "$0")/.."
front_ends=(src/s3)
forbidden='\b(object_writer|drive_set|drive_space|buffer_pool|spare_files|write_scheduler|new_object_id|data_file_settings|commit_(put|part|remove|complete|abort|written)|commit_surely_failed|reclaim|reclaim_segments|share_segments|copy_admission|read_object)\b|store::engine\b|\.(drives|pool|spares|writes)\(\)'
allowed_includes='^#include "store/(object_store|object|bytes)\.h"'
status=0
for dir in "${front_ends[@]}"; do
    if grep -rnE "$forbidden" "$dir" --include='*.h' --include='*.cc'; then
        echo "check_boundary: $dir reaches past the object-store interface (above)" >&2
        status=1
    fi
    if grep -rnE '^#include "store/' "$dir" --include='*.h' --include='*.cc' | grep -vE ":${allowed_includes#^}"; then
        echo "check_boundary: $dir includes store headers beyond object_store.h, object.h and bytes.h (above)" >&2
        status=1
    fi
done
exit $status
