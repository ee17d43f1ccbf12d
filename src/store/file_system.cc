#include "store/file_system.h"

#include <sys/statvfs.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>  // RENAME_NOREPLACE
#include <cstring>

namespace fjord::store {

base::result<std::string> file_system::read_file_blocking(const std::string& path) {
    int fd = open_blocking(path, O_RDONLY);
    if (fd < 0) return base::fail(base::errc::io_error, "open " + path + ": " + strerror(-fd));
    std::int64_t size = size_blocking(fd);
    std::string image(size > 0 ? static_cast<std::size_t>(size) : 0, '\0');
    std::size_t got = 0;
    while (got < image.size()) {
        std::int64_t n = pread_blocking(fd, image.data() + got, image.size() - got, got);
        if (n < 0) {
            close_blocking(fd);
            return base::fail(base::errc::io_error,
                              "read " + path + ": " + strerror(static_cast<int>(-n)));
        }
        if (n == 0) break;
        got += static_cast<std::size_t>(n);
    }
    close_blocking(fd);
    image.resize(got);
    return image;
}

int file_system::fsync_path_blocking(const std::string& path) {
    int fd = open_blocking(path, O_RDONLY);
    if (fd < 0) return fd;
    int rc = fsync_blocking(fd);
    close_blocking(fd);
    return rc;
}

base::result<void> file_system::replace_file_blocking(const std::string& path,
                                                      const std::string& content) {
    std::string tmp = path + ".tmp";
    auto failed = [&](const std::string& what, int rc) {
        return base::fail(
            rc == -ENOSPC || rc == -EDQUOT ? base::errc::storage_full : base::errc::io_error,
            what + ": " + strerror(-rc));
    };
    int fd = open_blocking(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return failed("create " + tmp, fd);
    std::size_t done = 0;
    while (done < content.size()) {
        std::int64_t n = pwrite_blocking(fd, content.data() + done, content.size() - done, done);
        if (n <= 0) {
            close_blocking(fd);
            return failed("write " + tmp, n < 0 ? static_cast<int>(n) : -EIO);
        }
        done += static_cast<std::size_t>(n);
    }
    int rc = fsync_blocking(fd);
    close_blocking(fd);
    if (rc < 0) return failed("fsync " + tmp, rc);
    if ((rc = rename_blocking(tmp, path)) < 0) return failed("rename " + tmp, rc);
    std::string dir = path.substr(0, path.find_last_of('/'));
    if ((rc = fsync_path_blocking(dir.empty() ? "/" : dir)) < 0) return failed("fsync " + dir, rc);
    return {};
}

namespace {

int result_of(long rc) { return rc < 0 ? -errno : static_cast<int>(rc); }

class posix final : public file_system {
public:
    io::task<int> openat(int dir_fd, std::string name, int flags, mode_t mode) override {
        co_return co_await io::openat(dir_fd, name.c_str(), flags, mode);
    }
    io::task<int> close(int fd) override { co_return co_await io::close(fd); }
    io::task<int> read(int fd, void* buf, unsigned len, std::uint64_t offset,
                       int buf_index) override {
        co_return co_await io::read(fd, buf, len, offset, buf_index);
    }
    io::task<int> write(int fd, const void* buf, unsigned len, std::uint64_t offset,
                        int buf_index) override {
        co_return co_await io::write(fd, buf, len, offset, buf_index);
    }
    io::task<int> fsync(int fd, bool datasync) override {
        co_return co_await io::fsync(fd, datasync);
    }
    io::task<int> allocate(int fd, std::uint64_t offset, std::uint64_t len) override {
        co_return co_await io::fallocate(fd, 0, offset, len);
    }
    int free_space(int fd, space_figures& out) override {
        struct statvfs st{};
        if (::fstatvfs(fd, &st) < 0) return -errno;
        out.free_bytes = static_cast<std::uint64_t>(st.f_bavail) * st.f_frsize;
        out.total_bytes = static_cast<std::uint64_t>(st.f_blocks) * st.f_frsize;
        return 0;
    }
    io::task<int> unlinkat(int dir_fd, std::string name) override {
        co_return co_await io::unlinkat(dir_fd, name.c_str());
    }
    io::task<int> renameat(int old_dir_fd, std::string old_name, int new_dir_fd,
                           std::string new_name) override {
        co_return co_await io::renameat(old_dir_fd, old_name.c_str(), new_dir_fd, new_name.c_str());
    }
    io::task<int> rename_noreplace(int old_dir_fd, std::string old_name, int new_dir_fd,
                                   std::string new_name) override {
        co_return co_await io::renameat(old_dir_fd, old_name.c_str(), new_dir_fd, new_name.c_str(),
                                        RENAME_NOREPLACE);
    }
    io::task<int> linkat(int old_dir_fd, std::string old_name, int new_dir_fd,
                         std::string new_name) override {
        co_return co_await io::linkat(old_dir_fd, old_name.c_str(), new_dir_fd, new_name.c_str());
    }
    io::task<int> stat(int dir_fd, std::string name, file_stat& out) override {
        struct statx st{};
        int rc = co_await io::statx(dir_fd, name.c_str(), AT_SYMLINK_NOFOLLOW,
                                    STATX_INO | STATX_NLINK | STATX_SIZE, &st);
        if (rc < 0) co_return rc;
        out.inode = st.stx_ino;
        out.links = st.stx_nlink;
        out.size_bytes = st.stx_size;
        co_return 0;
    }
    void start_read(io::async_op& op, int fd, void* buf, unsigned len, std::uint64_t offset,
                    int buf_index) override {
        op.start([&](io_uring_sqe* s) {
            if (buf_index >= 0)
                io_uring_prep_read_fixed(s, fd, buf, len, offset, buf_index);
            else
                io_uring_prep_read(s, fd, buf, len, offset);
        });
    }
    void start_write(io::async_op& op, int fd, const void* buf, unsigned len, std::uint64_t offset,
                     int buf_index) override {
        op.start([&](io_uring_sqe* s) {
            if (buf_index >= 0)
                io_uring_prep_write_fixed(s, fd, buf, len, offset, buf_index);
            else
                io_uring_prep_write(s, fd, buf, len, offset);
        });
    }
    void start_fsync(io::async_op& op, int fd, bool datasync) override {
        op.start([&](io_uring_sqe* s) {
            io_uring_prep_fsync(s, fd, datasync ? IORING_FSYNC_DATASYNC : 0);
        });
    }

    int open_blocking(const std::string& path, int flags, mode_t mode) override {
        return result_of(::open(path.c_str(), flags | O_CLOEXEC, mode));
    }
    int close_blocking(int fd) override { return result_of(::close(fd)); }
    std::int64_t pread_blocking(int fd, void* buf, std::size_t len, std::uint64_t offset) override {
        ssize_t n = ::pread(fd, buf, len, static_cast<off_t>(offset));
        return n < 0 ? -errno : n;
    }
    std::int64_t pwrite_blocking(int fd, const void* buf, std::size_t len,
                                 std::uint64_t offset) override {
        ssize_t n = ::pwrite(fd, buf, len, static_cast<off_t>(offset));
        return n < 0 ? -errno : n;
    }
    int fsync_blocking(int fd) override { return result_of(::fsync(fd)); }
    int truncate_blocking(int fd, std::uint64_t size_bytes) override {
        return result_of(::ftruncate(fd, static_cast<off_t>(size_bytes)));
    }
    std::int64_t size_blocking(int fd) override {
        struct stat st{};
        if (::fstat(fd, &st) < 0) return -errno;
        return st.st_size;
    }
    int mkdir_blocking(const std::string& path) override {
        return result_of(::mkdir(path.c_str(), 0700));
    }
    int rename_blocking(const std::string& from, const std::string& to) override {
        return result_of(::rename(from.c_str(), to.c_str()));
    }
    int unlink_blocking(const std::string& path) override {
        return result_of(::unlink(path.c_str()));
    }
    int unlinkat_blocking(int dir_fd, const std::string& name) override {
        return result_of(::unlinkat(dir_fd, name.c_str(), 0));
    }
    int lock_blocking(int fd) override { return result_of(::flock(fd, LOCK_EX | LOCK_NB)); }
    base::result<std::vector<std::string>> list_blocking(const std::string& dir_path) override {
        DIR* d = ::opendir(dir_path.c_str());
        if (!d)
            return base::fail(base::errc::io_error, "list " + dir_path + ": " + strerror(errno));
        std::vector<std::string> names;
        while (dirent* e = ::readdir(d)) {
            std::string name = e->d_name;
            if (name != "." && name != "..") names.push_back(std::move(name));
        }
        ::closedir(d);
        return names;
    }
};

}  // namespace

file_system& posix_file_system() {
    static posix instance;
    return instance;
}

}  // namespace fjord::store
