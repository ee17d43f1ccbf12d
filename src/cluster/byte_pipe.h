#pragma once
// Hands bytes from one coroutine that writes them (a byte_sink: a read of an object) to another that
// reads them (a byte_source: a write of an object), one chunk at a time, without a copy of its own:
// the writer's chunk stays where it is until the reader has taken all of it. A server-side copy in
// the cluster reads its source and writes its target this way.
//
// Threading: both coroutines on one core.
#include <algorithm>
#include <coroutine>
#include <cstring>
#include <span>

#include "io/reactor.h"
#include "store/bytes.h"

namespace fjord::cluster {

class byte_pipe final : public store::byte_source, public store::byte_sink {
public:
    // The writer's side.
    io::task<base::result<void>> write(std::span<const std::byte> data) override {
        if (_closed) co_return base::fail(base::errc::cancelled, "the reader stopped");
        if (data.empty()) co_return base::result<void>{};
        _pending = data;
        wake(_reader);
        if (!_pending.empty()) co_await park{&_writer};
        if (!_pending.empty()) co_return base::fail(base::errc::cancelled, "the reader stopped");
        co_return base::result<void>{};
    }
    // The writer is done (with its outcome).
    void finish(base::result<void> outcome) {
        _done = true;
        _outcome = std::move(outcome);
        wake(_reader);
    }
    // The reader's side: 0 at the end, or the writer's failure.
    io::task<base::result<std::size_t>> read(std::byte* dst, std::size_t max) override {
        if (_pending.empty() && !_done) co_await park{&_reader};
        if (!_pending.empty()) {
            const std::size_t n = std::min(max, _pending.size());
            std::memcpy(dst, _pending.data(), n);
            _pending = _pending.subspan(n);
            if (_pending.empty()) wake(_writer);
            co_return n;
        }
        if (!_outcome) co_return _outcome.as_failure();
        co_return std::size_t{0};
    }
    // The reader stops early: the writer's next (or current) write fails.
    void close() {
        _closed = true;
        wake(_writer);
    }

private:
    struct park {
        std::coroutine_handle<>* slot;
        bool await_ready() const noexcept { return false; }
        void await_suspend(std::coroutine_handle<> h) noexcept { *slot = h; }
        void await_resume() const noexcept {}
    };
    static void wake(std::coroutine_handle<>& slot) {
        if (!slot) return;
        auto h = slot;
        slot = nullptr;
        io::reactor::current().schedule(h);
    }
    std::span<const std::byte> _pending;
    std::coroutine_handle<> _reader;
    std::coroutine_handle<> _writer;
    bool _done = false;
    bool _closed = false;
    base::result<void> _outcome;
};

}  // namespace fjord::cluster
