#pragma once

// The KV tier: KV buckets of immutable blocks, a DRAM tier in front of a log-structured NVMe store
// (docs/kv.md). An object_store for the plain S3 operations on blocks (PUT, GET with Range, HEAD,
// DELETE, list) and a block_store for the batch API.
//
// Ownership: a KV bucket has `shards` shards (the core count when it was made); shard s is owned by
// core s % cores, which runs every operation on its keys (index, DRAM tier, NVMe log: shard_log.h).
// A key's shard is a stable hash of the key. Blocks travel between cores as shared, immutable buffers:
// the connection's core reads the body into one and sends from one, the owner core writes it to and
// reads it from NVMe. Each core keeps its own view of which KV buckets exist; creating and deleting one
// runs on core 0, which tells every core. Each core has its own DRAM budget (dram_bytes / cores).

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "base/result.h"
#include "kv/dram_cache.h"
#include "kv/shard_log.h"
#include "store/file_system.h"
#include "store/object_store.h"

namespace fjord::kv {

struct tier_options {
    std::string directory;  // KV buckets live in DIRECTORY/<bucket>/
    unsigned cores = 1;
    std::uint64_t dram_bytes = 1ULL << 30;  // the DRAM tier, all cores together
    // NVMe space of a KV bucket made without a capacity.
    std::uint64_t default_capacity_bytes = 16ULL << 30;
    std::uint64_t max_segment_bytes = 64ULL << 20;  // blocks are at most half of a segment
    // Bytes of NVMe reads in flight per core (shard_options::read_budget); 0: no bound.
    std::uint64_t read_queue_bytes = 8ULL << 20;
    store::file_system* fs = nullptr;  // posix_file_system() when null
};

struct tier_stats {
    std::uint64_t buckets = 0;
    std::uint64_t dram_bytes = 0;
    std::uint64_t dram_evictions = 0;
    shard_stats shards;  // summed
};

class tier final : public store::object_store, public store::block_store, public store::kv_buckets {
public:
    // Opens DIRECTORY and recovers every KV bucket in it. Blocking: at startup, before the reactors.
    static base::result<std::unique_ptr<tier>> open_blocking(tier_options options);
    ~tier() override;

    // Every bucket of the tier is a KV bucket: a plain one gets the tier's defaults. (The server never
    // calls this: its bucket_router sends plain buckets to the object engine and checks that a KV
    // bucket's name is not an object bucket's.)
    io::task<base::result<void>> create_bucket(std::string name) override;
    io::task<base::result<void>> create_kv_bucket(std::string name,
                                                  store::kv_bucket_options options) override;
    io::task<base::result<void>> delete_bucket(std::string name) override;
    bool bucket_exists(const std::string& name) const override;
    std::vector<store::bucket_info> list_buckets() const override;

    io::task<base::result<store::object_record>> put(store::put_request request,
                                                     store::byte_source& body,
                                                     store::record_finisher finish) override;
    io::task<base::result<store::object_record>> head(std::string bucket, std::string key) override;
    io::task<base::result<store::object_record>> get(std::string bucket, std::string key,
                                                     store::read_planner plan,
                                                     store::byte_sink& sink) override;
    io::task<base::result<std::optional<store::object_record>>> remove(
        std::string bucket, std::string key, store::write_conditions conditions) override;
    io::task<base::result<store::list_page>> list(store::list_request request) override;

    store::storage_stats stats() const override { return {}; }
    store::block_store* blocks_of(const std::string& bucket) override;
    store::kv_buckets* kv() override { return this; }

    std::uint64_t max_block_bytes(const std::string& bucket) const override;
    io::task<base::result<std::vector<std::optional<std::uint64_t>>>> sizes(
        std::string bucket, std::vector<std::string> keys) override;
    io::task<base::result<std::pair<store::block_ref, store::object_record>>> read_block(
        std::string bucket, std::string key) override;
    io::task<base::result<std::vector<store::block_ref>>> read_blocks(
        std::string bucket, std::vector<std::string> keys) override;
    io::task<base::result<bool>> write_block(std::string bucket, std::string key,
                                             std::shared_ptr<store::block_buffer> bytes,
                                             store::object_record record,
                                             store::write_conditions conditions) override;

    // This core's figures (its shards and its DRAM tier).
    tier_stats local_stats() const;
    unsigned cores() const { return _options.cores; }

    // What a KV bucket is, as stored in DIRECTORY/<bucket>/bucket.conf (immutable once made).
    struct bucket_config {
        std::string name;
        store::kv_bucket_options options;
        unsigned shards = 1;
        std::uint64_t segment_bytes = 0;
        std::int64_t created_ms = 0;
    };

private:
    struct bucket_view {
        std::shared_ptr<const bucket_config> config;
        std::vector<std::shared_ptr<shard_log>> shards;  // null where another core owns the shard
    };
    struct core_state {
        std::unique_ptr<dram_cache> dram;
        std::unique_ptr<io::semaphore> reads;  // null when read_queue_bytes is 0
        std::map<std::string, bucket_view> buckets;
    };
    explicit tier(tier_options options);
    core_state& here() const;
    // The shard of `key` in `bucket` if this core owns it (the caller hops to owner_of first).
    base::result<std::shared_ptr<shard_log>> local_shard(const std::string& bucket,
                                                         const std::string& key) const;
    base::result<unsigned> owner_of(const std::string& bucket, const std::string& key) const;
    // Moves keys into one list per owner core, each key with its index in `keys`.
    base::result<std::vector<std::vector<std::pair<std::size_t, std::string>>>> keys_by_core(
        const std::string& bucket, std::vector<std::string>& keys) const;
    base::result<void> attach_bucket(unsigned core, std::shared_ptr<const bucket_config> config);

    friend struct tier_ops;
    tier_options _options;
    std::vector<std::unique_ptr<core_state>> _cores;
};

// The stable hash that places a key on a shard (FNV-1a, 64 bits): it must never change, since the
// shards' contents on disk depend on it.
std::uint64_t key_hash(std::string_view key);

}  // namespace fjord::kv
