#pragma once

// A lease on one item of a pool (a connection of client::connection_pool, a link of
// cluster::peer_pool): move-only, it hands the item back to its pool (Pool::release(Item*), which the
// pool makes reachable by befriending this class) when reset or destroyed. Same core as its pool.

#include <utility>

namespace fjord::io {

template <class Pool, class Item>
class pool_lease {
public:
    pool_lease() = default;
    pool_lease(Pool* pool, Item* item) : _pool(pool), _item(item) {}
    pool_lease(pool_lease&& other) noexcept
        : _pool(std::exchange(other._pool, nullptr)), _item(std::exchange(other._item, nullptr)) {}
    pool_lease& operator=(pool_lease&& other) noexcept {
        if (this != &other) {
            reset();
            _pool = std::exchange(other._pool, nullptr);
            _item = std::exchange(other._item, nullptr);
        }
        return *this;
    }
    pool_lease(const pool_lease&) = delete;
    pool_lease& operator=(const pool_lease&) = delete;
    ~pool_lease() { reset(); }

    Item& operator*() const { return *_item; }
    Item* operator->() const { return _item; }
    explicit operator bool() const { return _item != nullptr; }
    void reset() {
        if (_pool) _pool->release(_item);
        _pool = nullptr, _item = nullptr;
    }

private:
    Pool* _pool = nullptr;
    Item* _item = nullptr;
};

}  // namespace fjord::io
