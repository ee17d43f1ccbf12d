#pragma once

// The KV batch API from the client side (base/kv_wire.h, docs/kv.md): exists, get and put of many
// blocks of a KV bucket, each batch split into requests of about `request_bytes` that run on several
// pooled connections at once. Values go from and to the caller's memory: a put sends each value from
// where it lies (a gathered send), a get receives each block straight into its destination and checks
// its CRC32C there. Runs on a reactor thread, like object_client.

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "client/object_client.h"
#include "io/task.h"

namespace fjord::client {

enum class kv_status : std::uint8_t {
    ok = 0,         // get: received and verified; put: stored
    absent = 1,     // get/exists: not in the bucket; put: it existed already (kept)
    failed = 2,     // the server could not store or read it (see error_code for a put)
    too_small = 3,  // get: the block is larger than its destination (nothing was written past it)
    corrupt = 4,    // get: the bytes received fail the CRC32C the server sent
};

struct kv_exists_result {
    std::vector<std::optional<std::uint64_t>> sizes;  // per key, nullopt when absent
    std::uint32_t leading_hits = 0;                   // keys present from the first on
};

struct kv_outcome {
    kv_status status = kv_status::failed;
    std::uint64_t size_bytes = 0;  // get: the block's size
    std::uint32_t error_code = 0;  // put: base::errc number when failed
};

struct kv_batch_options {
    std::uint64_t request_bytes = 16ULL << 20;  // values per request, about
    unsigned requests_in_flight = 4;
};

io::task<base::result<kv_exists_result>> kv_exists(object_client& client, std::string bucket,
                                                   std::vector<std::string> keys);
// destinations[i] receives keys[i].
io::task<base::result<std::vector<kv_outcome>>> kv_get_into(
    object_client& client, std::string bucket, std::vector<std::string> keys,
    std::vector<std::span<std::byte>> destinations, kv_batch_options options = {});
// Stores values[i] under keys[i] unless the key exists (blocks are content-addressed).
io::task<base::result<std::vector<kv_outcome>>> kv_put_from(
    object_client& client, std::string bucket, std::vector<std::string> keys,
    std::vector<std::span<const std::byte>> values, kv_batch_options options = {});

}  // namespace fjord::client
