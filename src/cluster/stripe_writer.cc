#include "cluster/stripe_writer.h"

#include <algorithm>

#include "base/checksum.h"
#include "base/log.h"
#include "io/wait_group.h"

namespace fjord::cluster {

namespace {

base::error answer_error(const peer_answer& a) {
    int code = 0;
    for (char c : a.header("x-fjord-error"))
        if (c >= '0' && c <= '9' && code < 100000) code = code * 10 + (c - '0');
    base::errc e = code > 0 ? static_cast<base::errc>(code) : base::errc::internal;
    if (base::errc_name(e).empty()) e = base::errc::internal;
    return base::error{e, a.body.substr(0, 512)};
}

// `insist`: try the node even when it is down in etcd's view or suspect (a second round, when the
// write cannot reach its quorum without it: the view lags, and a suspect may be back).
io::task<void> open_upload(cluster_store* store, upload* u, std::string path, header_list headers,
                           bool insist) {
    peer_pool* pool = insist || store->usable(u->node) ? store->pool_for(u->node) : nullptr;
    if (!pool) {
        u->kind = upload::state::failed;
        u->failure = base::error{base::errc::service_unavailable, "node " + u->node + " is down"};
        co_return;
    }
    u->link = co_await pool->acquire();
    auto began = co_await u->link->begin_upload("PUT", std::move(path), "", std::move(headers));
    if (!began) {
        u->kind = upload::state::failed;
        u->failure = began.err();
        if (transport_failure(began.err())) store->suspect(u->node);
        u->link.reset();
        co_return;
    }
    u->kind = upload::state::open;
}

io::task<void> send_block(cluster_store* store, upload* u, const std::uint8_t* block,
                          std::size_t len, std::uint32_t* crc) {
    iovec parts[2] = {{const_cast<std::uint8_t*>(block), len}, {crc, 4}};  // sendmsg only reads
    auto sent = co_await u->link->send_chunk(std::span(parts, 2));
    if (!sent) {
        u->kind = upload::state::failed;
        u->failure = sent.err();
        if (transport_failure(sent.err())) store->suspect(u->node);
        u->link.reset();
    }
}

io::task<void> finish_upload(cluster_store* store, upload* u, std::string frame, std::string etag) {
    auto answer = co_await u->link->finish(frame);
    u->link.reset();
    if (!answer) {
        u->kind = upload::state::failed;
        u->failure = answer.err();
        u->maybe_stored = true;  // the end of the body may have reached it
        if (transport_failure(answer.err())) store->suspect(u->node);
    } else if (answer->ok() && !answer->header(held_etag_header).empty() &&
               answer->header(held_etag_header) != etag) {
        // The node holds another write under this version's stamp: not this write's shard.
        u->kind = upload::state::refused;
        u->held = std::string(answer->header(held_etag_header).substr(0, stamp::text_bytes));
    } else if (answer->ok()) {
        u->kind = upload::state::stored;
    } else if (answer->status == 409) {
        u->kind = upload::state::refused;
        u->held = std::string(answer->header("x-fjord-current"));
    } else {
        u->kind = upload::state::failed;
        u->failure = answer_error(*answer);
    }
}

// For the debug log: a peer's status, or why none came.
std::string answer_text(const base::result<peer_answer>& a) {
    return a ? std::to_string(a->status) : a.err().message;
}

void abort_all(std::vector<upload>& ups) {
    for (auto& u : ups) {
        if (u.link) u.link->close();  // the node sees the body break off and commits nothing
        u.link.reset();
        if (u.kind == upload::state::open) u.kind = upload::state::failed;
    }
}

// Opens an upload to each target: those down or suspect only in a second round, when the first
// leaves fewer than `needed` open.
io::task<void> open_uploads(cluster_store& store, const key_place& place,
                            const std::vector<unsigned>& targets, const shard_meta& meta,
                            acceptance accept, std::size_t needed, std::int64_t commit_within_ms,
                            std::vector<upload>& ups) {
    for (int round = 0; round < 2; ++round) {
        if (round == 1 && count_in(ups, upload::state::open) >= needed) break;
        io::wait_group opening(std::max<std::size_t>(1, targets.size()));
        for (std::size_t t = 0; t < targets.size(); ++t) {
            if (ups[t].kind == upload::state::open) continue;
            ups[t] = upload{};
            ups[t].node = place.nodes[targets[t]];
            ups[t].index = targets[t];
            upload_head head{
                meta.version,           meta.kind, place.k, place.m, targets[t], meta.block_bytes,
                meta.object.size_bytes, accept};
            header_list headers = upload_headers(head);
            if (commit_within_ms > 0)
                headers.emplace_back("x-fjord-commit-within", std::to_string(commit_within_ms));
            co_await opening.spawn(open_upload(&store, &ups[t],
                                               rpc_path("shard", place.shard_bucket, place.key),
                                               std::move(headers), round == 1));
        }
        co_await opening.wait();
    }
}

}  // namespace

bool transport_failure(const base::error& e) {
    return e.code == base::errc::io_error || e.code == base::errc::timed_out ||
           e.code == base::errc::closed || e.code == base::errc::cancelled;
}

std::size_t count_in(const std::vector<upload>& ups, upload::state s) {
    return static_cast<std::size_t>(
        std::count_if(ups.begin(), ups.end(), [s](const upload& u) { return u.kind == s; }));
}

std::string first_failure(const std::vector<upload>& ups) {
    for (const auto& u : ups)
        if (u.kind == upload::state::failed) return u.failure.message;
    return {};
}

io::task<base::result<streamed_version>> stream_version(
    cluster_store& store, const key_place& place, std::vector<unsigned> targets, shard_meta meta,
    acceptance accept, stripe_feed* feed, std::size_t needed,
    const std::function<base::result<void>(shard_meta&)>& complete, std::int64_t commit_within_ms) {
    const stripe_layout layout = meta.layout();
    streamed_version out;
    std::vector<upload>& ups = out.uploads;
    ups.resize(targets.size());
    co_await open_uploads(store, place, targets, meta, accept, needed, commit_within_ms, ups);
    auto short_of = [&]() -> base::failure {
        const std::size_t going = count_in(ups, upload::state::open);
        std::string why = first_failure(ups);
        abort_all(ups);
        return base::fail(base::errc::service_unavailable,
                          "only " + std::to_string(going) + " of " + std::to_string(place.width()) +
                              " nodes of the set took the write (" + std::to_string(needed) +
                              " needed): " + why);
    };
    if (count_in(ups, upload::state::open) < needed) co_return short_of();
    std::vector<const std::uint8_t*> blocks(place.width(), nullptr);
    std::vector<std::uint32_t> crcs(ups.size());
    for (std::uint64_t s = 0; feed && s < layout.stripes(); ++s) {
        auto fed = co_await feed->next(s, blocks);
        if (!fed) {
            abort_all(ups);
            co_return fed.as_failure();
        }
        const std::uint32_t bl = layout.block_of(s);
        io::wait_group sending(std::max<std::size_t>(1, ups.size()));
        for (std::size_t t = 0; t < ups.size(); ++t) {
            const std::uint8_t* block = blocks[ups[t].index];
            crcs[t] = base::crc32c(std::span(reinterpret_cast<const std::byte*>(block), bl));
            ups[t].crcs.push_back(crcs[t]);
            if (ups[t].kind == upload::state::open)
                co_await sending.spawn(send_block(&store, &ups[t], block, bl, &crcs[t]));
        }
        co_await sending.wait();
        if (count_in(ups, upload::state::open) < needed) co_return short_of();
    }
    if (auto completed = complete(meta); !completed) {
        abort_all(ups);
        co_return completed.as_failure();
    }
    io::wait_group finishing(std::max<std::size_t>(1, ups.size()));
    for (auto& u : ups) {
        if (u.kind != upload::state::open) continue;
        shard_meta own = meta;
        own.index = u.index;
        own.block_crcs = u.crcs;
        co_await finishing.spawn(finish_upload(&store, &u, trailer_frame(own), shard_etag(own)));
    }
    co_await finishing.wait();
    out.meta = std::move(meta);
    co_return out;
}

io::task<void> withdraw(cluster_store* store, std::string shard_bucket, std::string key,
                        std::vector<std::string> nodes, stamp version, std::int64_t before_ms) {
    std::string query = "stamp=" + version.text();
    if (before_ms > 0) query += "&before=" + std::to_string(before_ms);
    for (const auto& node : nodes) {
        peer_pool* pool = store->pool_for(node);
        if (!pool) continue;
        auto link = co_await pool->acquire();
        auto answer =
            co_await link->call("DELETE", rpc_path("shard", shard_bucket, key), query, {}, "");
        LOG_DEBUG("withdraw %s/%s version %s from %s: %s", shard_bucket.c_str(), key.c_str(),
                  version.text().c_str(), node.c_str(), answer_text(answer).c_str());
    }
}

io::task<std::vector<std::string>> trim_where(cluster_store* store, std::string shard_bucket,
                                              std::string key, std::vector<std::string> nodes,
                                              stamp below) {
    std::vector<std::string> trimmed;
    for (const auto& node : nodes) {
        peer_pool* pool = store->usable(node) ? store->pool_for(node) : nullptr;
        if (!pool) continue;
        auto link = co_await pool->acquire();
        auto answer = co_await link->call("POST", rpc_path("trim", shard_bucket, key),
                                          "below=" + below.text(), {}, "");
        LOG_DEBUG("trim %s/%s below %s on %s: %s", shard_bucket.c_str(), key.c_str(),
                  below.text().c_str(), node.c_str(), answer_text(answer).c_str());
        if (answer && answer->status >= 200 && answer->status < 300) trimmed.push_back(node);
    }
    co_return trimmed;
}

io::task<void> trim(cluster_store* store, std::string shard_bucket, std::string key,
                    std::vector<std::string> nodes, stamp below) {
    (void)co_await trim_where(store, std::move(shard_bucket), std::move(key), std::move(nodes),
                              below);
}

}  // namespace fjord::cluster
