#include "cluster/catalog.h"

#include <sys/random.h>

#include <algorithm>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>

#include "base/clock.h"
#include "base/encoding.h"
#include "cluster/erasure.h"
#include "cluster/membership.h"

namespace fjord::cluster {

namespace {

using json = nlohmann::json;

constexpr int max_cas_attempts = 16;

base::failure corrupt(std::string_view what) {
    return base::fail(base::errc::data_corrupted, std::string(what) + " in etcd is not valid");
}

std::string new_generation() {
    std::uint64_t g = 0;
    if (getrandom(&g, sizeof g, 0) != sizeof g)
        g = static_cast<std::uint64_t>(base::monotonic_now_ns());
    char out[17];
    std::snprintf(out, sizeof out, "%016llx", static_cast<unsigned long long>(g));
    return out;
}

}  // namespace

std::vector<erasure_set> topology::erasure_sets() const {
    std::vector<erasure_set> out;
    for (std::size_t i = 0; i < sets.size(); ++i) {
        erasure_set s;
        s.id = static_cast<unsigned>(i);
        for (const auto& node : sets[i]) s.drives.push_back({node, 0});
        out.push_back(std::move(s));
    }
    return out;
}

bool topology::is_rebuilding(std::string_view node) const {
    for (const auto& mark : rebuilding)
        if (mark.node == node) return true;
    return false;
}

bool topology::is_in_a_set(std::string_view node) const {
    for (const auto& set : sets)
        if (std::find(set.begin(), set.end(), node) != set.end()) return true;
    return false;
}

std::string encode_topology(const topology& t) {
    json doc = {{"k", t.shape.k},
                {"m", t.shape.m},
                {"block_bytes", t.block_bytes},
                {"sets", t.sets},
                {"created_unix_ms", t.created_unix_ms}};
    if (t.leftover_age_ms > 0) doc["leftover_age_ms"] = t.leftover_age_ms;
    if (!t.rebuilding.empty()) {
        json marks = json::array();
        for (const auto& mark : t.rebuilding)
            marks.push_back({{"node", mark.node}, {"after_heal", mark.after_heal}});
        doc["rebuilding"] = std::move(marks);
    }
    return doc.dump();
}

base::result<topology> decode_topology(std::string_view text) {
    json doc = json::parse(text, nullptr, false);
    if (!doc.is_object()) return corrupt("the topology");
    topology t;
    auto k = doc.find("k"), m = doc.find("m"), block = doc.find("block_bytes"),
         sets = doc.find("sets"), created = doc.find("created_unix_ms");
    if (k == doc.end() || !k->is_number_unsigned() || m == doc.end() || !m->is_number_unsigned() ||
        block == doc.end() || !block->is_number_unsigned() || sets == doc.end() ||
        !sets->is_array())
        return corrupt("the topology");
    t.shape = {k->get<unsigned>(), m->get<unsigned>()};
    t.block_bytes = block->get<std::uint32_t>();
    if (created != doc.end() && created->is_number_integer())
        t.created_unix_ms = created->get<std::int64_t>();
    if (auto age = doc.find("leftover_age_ms"); age != doc.end()) {
        if (!age->is_number_integer() || age->get<std::int64_t>() < 1000)
            return corrupt("the topology's leftover age");
        t.leftover_age_ms = age->get<std::int64_t>();
    }
    // m <= k + 1: the write quorum of k + 1 is then a majority, which conditional writes rely on.
    if (t.shape.k < 1 || t.shape.m < 1 || t.shape.m > t.shape.k + 1 ||
        t.shape.width() > max_stripe_width || t.block_bytes < 64 ||
        t.block_bytes > 16 * 1024 * 1024 || sets->empty())
        return corrupt("the topology's geometry");
    std::set<std::string> seen;
    for (const auto& set : *sets) {
        if (!set.is_array() || set.size() != t.shape.width()) return corrupt("a topology's set");
        std::vector<std::string> nodes;
        std::set<std::string> in_set;
        for (const auto& node : set) {
            if (!node.is_string() || !check_name("node id", node.get<std::string>()))
                return corrupt("a topology's node");
            nodes.push_back(node.get<std::string>());
            in_set.insert(nodes.back());
        }
        if (in_set.size() != nodes.size()) return corrupt("a topology's set (a node twice)");
        t.sets.push_back(std::move(nodes));
    }
    if (auto marks = doc.find("rebuilding"); marks != doc.end()) {
        if (!marks->is_array()) return corrupt("the topology's rebuilding nodes");
        for (const auto& mark : *marks) {
            if (!mark.is_object() || !mark.contains("node") || !mark["node"].is_string() ||
                !mark.contains("after_heal") || !mark["after_heal"].is_number_integer())
                return corrupt("a topology's rebuilding node");
            rebuild_mark r{mark["node"].get<std::string>(), mark["after_heal"].get<std::int64_t>()};
            if (!t.is_in_a_set(r.node) || t.is_rebuilding(r.node))
                return corrupt("a topology's rebuilding node");
            t.rebuilding.push_back(std::move(r));
        }
    }
    return t;
}

base::result<topology> default_topology(std::vector<std::string> nodes, std::uint32_t block_bytes) {
    std::sort(nodes.begin(), nodes.end());
    if (std::adjacent_find(nodes.begin(), nodes.end()) != nodes.end())
        return base::fail(base::errc::invalid_argument, "a node is named twice");
    auto shape = default_geometry(static_cast<unsigned>(nodes.size()), 1);
    if (!shape) return shape.as_failure();
    auto sets = layout_sets(nodes, 1, *shape);
    if (!sets) return sets.as_failure();
    topology t;
    t.shape = *shape;
    t.block_bytes = block_bytes;
    t.created_unix_ms = base::unix_now_ms();
    for (const auto& s : *sets) {
        std::vector<std::string> ids;
        for (const auto& d : s.drives) ids.push_back(d.node_id);
        t.sets.push_back(std::move(ids));
    }
    return t;
}

std::string encode_bucket_record(const bucket_record& b) {
    return json{{"name", b.name},
                {"created_ms", b.created_ms},
                {"generation", b.generation},
                {"attributes", b.attributes}}
        .dump();
}

base::result<bucket_record> decode_bucket_record(std::string_view text) {
    json doc = json::parse(text, nullptr, false);
    if (!doc.is_object()) return corrupt("a bucket record");
    bucket_record b;
    auto name = doc.find("name"), created = doc.find("created_ms"),
         generation = doc.find("generation"), attributes = doc.find("attributes");
    if (name == doc.end() || !name->is_string() || generation == doc.end() ||
        !generation->is_string() || generation->get<std::string>().empty())
        return corrupt("a bucket record");
    b.name = name->get<std::string>();
    b.generation = generation->get<std::string>();
    if (created != doc.end() && created->is_number_integer())
        b.created_ms = created->get<std::int64_t>();
    if (attributes != doc.end()) {
        if (!attributes->is_object()) return corrupt("a bucket record's attributes");
        for (const auto& [key, value] : attributes->items()) {
            if (!value.is_string()) return corrupt("a bucket record's attributes");
            b.attributes[key] = value.get<std::string>();
        }
    }
    return b;
}

std::string topology_key(std::string_view cluster) { return cluster_prefix(cluster) + "topology"; }
std::string buckets_prefix(std::string_view cluster) {
    return cluster_prefix(cluster) + "buckets/";
}
std::string bucket_key(std::string_view cluster, std::string_view bucket) {
    return buckets_prefix(cluster) + std::string(bucket);
}

io::task<base::result<topology>> init_topology(etcd_client& etcd, std::string cluster, topology t) {
    txn_request txn;
    txn.compares.push_back({txn_compare::target::create, topology_key(cluster), 0});
    txn.puts.push_back({topology_key(cluster), encode_topology(t), 0});
    txn.read_on_failure = topology_key(cluster);
    auto done = co_await etcd.txn(std::move(txn));
    if (!done) co_return done.as_failure();
    if (done->succeeded) co_return t;
    if (done->read.empty()) co_return base::fail(base::errc::internal, "the topology vanished");
    co_return decode_topology(done->read[0].value);
}

namespace {

// Reads the topology, lets `edit` change it (an error refuses; false: nothing to change) and writes it
// back if it is still the one read. Returns the topology in force afterwards.
io::task<base::result<topology>> change_topology(
    etcd_client& etcd, const std::string& cluster,
    const std::function<base::result<bool>(topology&)>& edit) {
    const std::string key = topology_key(cluster);
    for (int attempt = 0; attempt < max_cas_attempts; ++attempt) {
        auto got = co_await etcd.range(key);
        if (!got) co_return got.as_failure();
        if (got->kvs.empty())
            co_return base::fail(base::errc::not_found,
                                 "the cluster has no topology yet (fjord cluster init)");
        auto t = decode_topology(got->kvs[0].value);
        if (!t) co_return t.as_failure();
        auto changed = edit(*t);
        if (!changed) co_return changed.as_failure();
        if (!*changed) co_return t;
        txn_request txn;
        txn.compares.push_back({txn_compare::target::mod, key, got->kvs[0].mod_revision});
        txn.puts.push_back({key, encode_topology(*t), 0});
        auto done = co_await etcd.txn(std::move(txn));
        if (!done) co_return done.as_failure();
        if (done->succeeded) co_return t;
    }
    co_return base::fail(base::errc::service_unavailable, "the topology kept changing");
}

}  // namespace

io::task<base::result<topology>> replace_topology_node(etcd_client& etcd, std::string cluster,
                                                       std::string old, std::string replacement,
                                                       std::int64_t heal_now) {
    if (!check_name("node id", replacement))
        co_return base::fail(base::errc::invalid_argument, "not a node id: " + replacement);
    co_return co_await change_topology(etcd, cluster, [&](topology& t) -> base::result<bool> {
        if (!t.is_in_a_set(old))
            return base::fail(base::errc::invalid_argument, "node " + old + " is in no set");
        if (old != replacement && t.is_in_a_set(replacement))
            return base::fail(base::errc::invalid_argument,
                              "node " + replacement + " already holds a place in a set");
        for (auto& set : t.sets) std::replace(set.begin(), set.end(), old, replacement);
        std::erase_if(t.rebuilding, [&](const rebuild_mark& m) { return m.node == old; });
        t.rebuilding.push_back({replacement, heal_now});
        return true;
    });
}

io::task<base::result<std::vector<std::string>>> finish_rebuilds(etcd_client& etcd,
                                                                 std::string cluster,
                                                                 std::int64_t finished) {
    std::vector<std::string> cleared;
    auto done = co_await change_topology(etcd, cluster, [&](topology& t) -> base::result<bool> {
        cleared.clear();
        for (const auto& mark : t.rebuilding)
            if (mark.after_heal < finished) cleared.push_back(mark.node);
        std::erase_if(t.rebuilding, [&](const rebuild_mark& m) { return m.after_heal < finished; });
        return !cleared.empty();
    });
    if (!done) co_return done.as_failure();
    co_return cleared;
}

io::task<base::result<std::optional<bucket_record>>> read_bucket_record(etcd_client& etcd,
                                                                        std::string cluster,
                                                                        std::string name) {
    auto got = co_await etcd.range(bucket_key(cluster, name));
    if (!got) co_return got.as_failure();
    if (got->kvs.empty()) co_return std::optional<bucket_record>{};
    auto b = decode_bucket_record(got->kvs[0].value);
    if (!b) co_return b.as_failure();
    b->mod_revision = got->kvs[0].mod_revision;
    co_return std::optional<bucket_record>(std::move(*b));
}

io::task<base::result<bucket_record>> create_bucket_record(etcd_client& etcd, std::string cluster,
                                                           std::string name) {
    bucket_record b;
    b.name = name;
    b.created_ms = base::unix_now_ms();
    b.generation = new_generation();
    txn_request txn;
    txn.compares.push_back({txn_compare::target::create, bucket_key(cluster, name), 0});
    txn.puts.push_back({bucket_key(cluster, name), encode_bucket_record(b), 0});
    auto done = co_await etcd.txn(std::move(txn));
    if (!done) co_return done.as_failure();
    if (!done->succeeded)
        co_return base::fail(base::errc::bucket_already_owned_by_you, "the bucket exists");
    b.mod_revision = done->revision;
    co_return b;
}

io::task<base::result<void>> delete_bucket_record(etcd_client& etcd, std::string cluster,
                                                  std::string name) {
    auto removed = co_await etcd.remove(bucket_key(cluster, name));
    if (!removed) co_return removed.as_failure();
    if (*removed == 0) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
    co_return base::result<void>{};
}

io::task<base::result<bucket_record>> set_bucket_record_attribute(
    etcd_client& etcd, std::string cluster, std::string name, std::string attribute,
    std::optional<std::string> value) {
    const std::string key = bucket_key(cluster, name);
    for (int attempt = 0; attempt < max_cas_attempts; ++attempt) {
        auto got = co_await etcd.range(key);
        if (!got) co_return got.as_failure();
        if (got->kvs.empty()) co_return base::fail(base::errc::no_such_bucket, "no such bucket");
        auto b = decode_bucket_record(got->kvs[0].value);
        if (!b) co_return b.as_failure();
        if (value)
            b->attributes[attribute] = *value;
        else
            b->attributes.erase(attribute);
        txn_request txn;
        txn.compares.push_back({txn_compare::target::mod, key, got->kvs[0].mod_revision});
        txn.puts.push_back({key, encode_bucket_record(*b), 0});
        auto done = co_await etcd.txn(std::move(txn));
        if (!done) co_return done.as_failure();
        if (done->succeeded) {
            b->mod_revision = done->revision;
            co_return *b;
        }
    }
    co_return base::fail(base::errc::service_unavailable,
                         "the bucket kept changing: gave up after " +
                             std::to_string(max_cas_attempts) + " attempts");
}

}  // namespace fjord::cluster
