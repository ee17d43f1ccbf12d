#pragma once
// Reads the stripes of one version of an object from k of its shards (cluster_store.h, "head/get"):
// data shards first, every block checked against its CRC32C, a shard that fails, is corrupt or slower
// than the hedge replaced by another, and the blocks asked for rebuilt from the others with the code.
//
// Lifecycle: made for one range of stripes, read in order; owned by one coroutine on one core.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/result.h"
#include "cluster/cluster_store.h"

namespace fjord::cluster {

struct shard_source;

class stripe_reader {
public:
    // Stripes [first, last] of the version `decision` settled on.
    stripe_reader(cluster_store& store, const key_place& place, const read_decision& decision,
                  std::uint64_t first, std::uint64_t last);
    ~stripe_reader();
    stripe_reader(const stripe_reader&) = delete;
    stripe_reader& operator=(const stripe_reader&) = delete;

    // Reads stripe s (each in turn, from first to last). Afterwards block(i) holds shard i's block of
    // it for every data shard and for every shard in `rebuild`.
    io::task<base::result<void>> read(std::uint64_t s, std::span<const unsigned> rebuild = {});
    const std::uint8_t* block(unsigned i) const { return _blocks[i]; }
    const stripe_layout& layout() const { return _layout; }
    // Whether a shard turned out corrupt or unreadable on the way (the key then wants healing).
    bool saw_damage() const { return _saw_damage; }

private:
    io::task<base::result<void>> gather(std::uint64_t s,
                                        std::vector<std::shared_ptr<shard_source>>& good);
    io::task<bool> open_next(std::uint64_t s);

    cluster_store& _store;
    const key_place& _place;
    const read_decision& _decision;
    stripe_layout _layout;
    std::uint64_t _last;
    erasure_code _code;
    std::string _path;
    std::string _version;
    std::vector<unsigned> _candidates;  // holders, data shards first
    std::size_t _next_candidate = 0;
    std::vector<unsigned> _passed_over;  // holders not tried because down or suspect
    bool _insisting = false;             // trying those now
    std::vector<std::shared_ptr<shard_source>>
        _active;                                       // open downloads, carried to the next stripe
    std::vector<std::shared_ptr<shard_source>> _good;  // this stripe's good blocks (kept alive)
    std::vector<std::uint8_t*> _blocks;
    std::vector<std::uint8_t> _rebuilt;
    bool _saw_damage = false;
};

}  // namespace fjord::cluster
