#include "cluster/drive_identity.h"

#include <fcntl.h>
#include <sys/random.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "base/log.h"
#include "cluster/catalog.h"
#include "cluster/membership.h"

namespace fjord::cluster {

namespace {

constexpr const char* file_name = "cluster-drive-id";
constexpr std::size_t id_digits = 32;

base::failure io_failure(const std::string& what, int err) {
    return base::fail(base::errc::io_error, what + ": " + std::strerror(err));
}

bool is_id(std::string_view text) {
    if (text.size() != id_digits) return false;
    for (char c : text)
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
    return true;
}

base::result<std::string> new_id() {
    unsigned char bytes[id_digits / 2];
    if (getrandom(bytes, sizeof bytes, 0) != static_cast<ssize_t>(sizeof bytes))
        return io_failure("getrandom", errno);
    std::string out;
    char hex[3];
    for (unsigned char b : bytes) {
        std::snprintf(hex, sizeof hex, "%02x", b);
        out += hex;
    }
    return out;
}

// Writes `text` to dir/name through a temporary file, renamed into place, with the file and the
// directory synced: a crash leaves the old file or the new one.
base::result<void> write_durably(const std::string& dir, const std::string& name,
                                 const std::string& text) {
    const std::string path = dir + "/" + name, temp = path + ".tmp";
    int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    if (fd < 0) return io_failure("create " + temp, errno);
    const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
    const int write_err = errno;
    const bool synced = written && ::fsync(fd) == 0;
    ::close(fd);
    if (!written || !synced) return io_failure("write " + temp, written ? errno : write_err);
    if (::rename(temp.c_str(), path.c_str()) != 0) return io_failure("rename " + temp, errno);
    int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return io_failure("open " + dir, errno);
    const bool dir_synced = ::fsync(dfd) == 0;
    ::close(dfd);
    if (!dir_synced) return io_failure("fsync " + dir, errno);
    return {};
}

}  // namespace

base::result<drive_id> load_or_make_drive_id(const std::string& dir) {
    const std::string path = dir + "/" + file_name;
    int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        char buf[64];
        const ssize_t n = ::read(fd, buf, sizeof buf);
        ::close(fd);
        std::string_view text(buf, n > 0 ? static_cast<std::size_t>(n) : 0);
        while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
        if (!is_id(text))
            return base::fail(base::errc::data_corrupted,
                              path +
                                  " does not hold a drive id (32 hex digits); remove it only if "
                                  "this drive is to be rebuilt");
        return drive_id{std::string(text), true};
    }
    if (errno != ENOENT) return io_failure("open " + path, errno);
    auto id = new_id();
    if (!id) return id.as_failure();
    if (auto written = write_durably(dir, file_name, *id + "\n"); !written)
        return written.as_failure();
    return drive_id{*id, false};
}

std::string drive_key(std::string_view cluster, std::string_view node) {
    return cluster_prefix(cluster) + "drives/" + std::string(node);
}

io::task<base::result<drive_check>> check_drive(etcd_client& etcd, std::string cluster,
                                                std::string node, drive_id drive) {
    const std::string key = drive_key(cluster, node);
    auto known = co_await etcd.range(key);
    if (!known) co_return known.as_failure();
    drive_check out;
    if (known->kvs.empty() || known->kvs[0].value == drive.id) {
        // A first start, or its own drive: marked already (a replacement, or a rebuild not finished)?
        // One key, not the whole map, whose reads may fail for reasons of their own; the node's reads
        // of the map say it too (shard_service::note_view).
        auto layout = co_await etcd.range(topology_key(cluster));
        if (layout && !layout->kvs.empty())
            if (auto t = decode_topology(layout->kvs[0].value))
                out.rebuilding = t->is_rebuilding(node);
        if (!known->kvs.empty()) co_return out;
    } else {
        auto view = co_await read_view(etcd, cluster);
        if (!view) co_return view.as_failure();
        out.rebuilding = view->layout && view->layout->is_rebuilding(node);
        if (view->layout && view->layout->is_in_a_set(node)) {
            auto replaced =
                co_await replace_topology_node(etcd, cluster, node, node, view->heal_request);
            if (!replaced) co_return replaced.as_failure();
            out.marked_now = out.rebuilding = true;
        }
    }
    // Recorded only after the mark: a crash in between finds the ids still different next time.
    auto put = co_await etcd.put(key, drive.id);
    if (!put) co_return put.as_failure();
    co_return out;
}

}  // namespace fjord::cluster
