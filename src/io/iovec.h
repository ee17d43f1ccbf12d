#pragma once
// Pieces of a gathered send (SENDMSG), shared by the server's connections and the client's.

#include <sys/uio.h>

#include <cstddef>
#include <span>

namespace fjord::io {

// Drops the pieces (or the front of a piece) that `sent` bytes covered, and empty pieces at the front.
inline std::span<iovec> advance(std::span<iovec> parts, std::size_t sent) {
    while (!parts.empty() && sent >= parts.front().iov_len) {
        sent -= parts.front().iov_len;
        parts = parts.subspan(1);
    }
    if (sent > 0) {
        parts.front().iov_base = static_cast<char*>(parts.front().iov_base) + sent;
        parts.front().iov_len -= sent;
    }
    return parts;
}

}  // namespace fjord::io
