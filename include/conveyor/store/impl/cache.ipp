// conveyor/store/impl/cache.ipp — the node-local cache store.
//
// The folder: `objects/<h>` (published files), `objects/<h>.tmp.<pid>.<n>` (being
// written), `locks/<h>` (the per-object advisory locks, never removed), where <h> is the
// 32 hex digits of two 64-bit hashes of the URL (`cache_name`). A file is a 4096-byte header (magic, the
// object's size and CRC-32C, the URL, the ETag, the header's own CRC-32C) then the bytes.
#ifndef CONVEYOR_STORE_IMPL_CACHE_IPP
#define CONVEYOR_STORE_IMPL_CACHE_IPP

#include <conveyor/core/checksum.hpp>
#include <conveyor/core/detail/offload.hpp>
#include <conveyor/core/detail/replace_file.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/file/chunks.hpp>
#include <conveyor/store/cache.hpp>

#include <boost/asio/steady_timer.hpp>
#include <boost/asio/this_coro.hpp>
#include <boost/asio/use_awaitable.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <system_error>
#include <tuple>
#include <utility>
#include <vector>

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

namespace conveyor::store {
namespace detail {

inline constexpr std::size_t cache_header_size = 4096;
inline constexpr char cache_magic[8] = {'C', 'V', 'Y', 'C', 'A', 'C', 'H', '1'};

/// What a cache file's header says.
struct cache_header {
    std::uint64_t size = 0;
    std::uint32_t crc = 0;
    std::string url, etag;
};

inline void put_le(std::string& s, std::size_t at, std::uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; ++i) s[at + i] = static_cast<char>((v >> (8 * i)) & 0xff);
}

inline std::uint64_t get_le(const unsigned char* p, int bytes)
{
    std::uint64_t v = 0;
    for (int i = 0; i < bytes; ++i) v |= std::uint64_t{p[i]} << (8 * i);
    return v;
}

/// The header as its 4096 bytes, or nullopt when the URL and ETag do not fit.
inline std::optional<std::string> encode_cache_header(const cache_header& h)
{
    if (28 + h.url.size() + h.etag.size() + 4 > cache_header_size) return std::nullopt;
    std::string s(cache_header_size, '\0');
    std::memcpy(s.data(), cache_magic, 8);
    put_le(s, 8, h.size, 8);
    put_le(s, 16, h.crc, 4);
    put_le(s, 20, h.url.size(), 4);
    put_le(s, 24, h.etag.size(), 4);
    std::memcpy(s.data() + 28, h.url.data(), h.url.size());
    std::memcpy(s.data() + 28 + h.url.size(), h.etag.data(), h.etag.size());
    put_le(s, cache_header_size - 4, crc32c(std::as_bytes(std::span(s.data(), cache_header_size - 4))), 4);
    return s;
}

inline std::optional<cache_header> decode_cache_header(const unsigned char* p)
{
    if (std::memcmp(p, cache_magic, 8) != 0) return std::nullopt;
    const auto sum = static_cast<std::uint32_t>(get_le(p + cache_header_size - 4, 4));
    if (crc32c(std::as_bytes(std::span(p, cache_header_size - 4))) != sum) return std::nullopt;
    cache_header h;
    h.size = get_le(p + 8, 8);
    h.crc = static_cast<std::uint32_t>(get_le(p + 16, 4));
    const auto ul = get_le(p + 20, 4), el = get_le(p + 24, 4);
    if (28 + ul + el + 4 > cache_header_size) return std::nullopt;
    h.url.assign(reinterpret_cast<const char*>(p) + 28, ul);
    h.etag.assign(reinterpret_cast<const char*>(p) + 28 + ul, el);
    return h;
}

/// The file name of `url`'s object: a hash, never the URL itself. Two 64-bit hashes
/// (CRC-64/NVME and FNV-1a), not a cryptographic one: a collision only makes two URLs
/// share a file, which the header's URL tells apart (a miss, fetched again), and no
/// OpenSSL state is made on the I/O threads.
inline std::string cache_name(const std::string& url)
{
    const std::uint64_t a = crc64nvme(std::as_bytes(std::span(url.data(), url.size())));
    std::uint64_t b = 0xcbf29ce484222325ull;
    for (const unsigned char c : url) b = (b ^ c) * 0x100000001b3ull;
    static constexpr char hex[] = "0123456789abcdef";
    std::string out;
    for (const std::uint64_t v : {a, b})
        for (int i = 60; i >= 0; i -= 4) out += hex[(v >> i) & 15];
    return out;
}

/// An open descriptor, closed with its last owner.
struct cache_fd {
    int fd = -1;
    explicit cache_fd(int f) noexcept : fd(f) {}
    cache_fd(const cache_fd&) = delete;
    cache_fd& operator=(const cache_fd&) = delete;
    ~cache_fd()
    {
        if (fd >= 0) ::close(fd);
    }
};

/// A published file that passed the checks, open.
struct cache_entry {
    std::shared_ptr<cache_fd> fd;
    std::uint64_t size = 0;
    /// The open file by a name that cannot be swapped under us (a later rename or eviction
    /// does not change what it names).
    std::string path() const { return "/proc/self/fd/" + std::to_string(fd->fd); }
};

/// The state of one cache folder in this process, for one run.
struct cache_state {
    cache_options o;
    std::string objects, locks;
    std::atomic<bool> writable{true}; // new objects may be written
    std::atomic<bool> warned{false};
    std::mutex mu;
    std::map<std::string, std::string> versions;                          // url -> ETag asked this run
    std::set<std::tuple<dev_t, ino_t, std::uint64_t>> verified;           // files checked (or written) this run
    std::uint64_t usage = 0;      // bytes of files at the last scan plus those written since
    std::uint64_t since_scan = 0; // bytes written since the last scan
    std::atomic<std::uint64_t> serial{0};
    struct {
        std::atomic<std::uint64_t> hits{0}, misses{0}, stale{0}, invalid{0}, waits{0}, bypassed{0}, evicted{0}, leftovers{0},
            bytes_written{0}, warnings{0};
    } n;

    /// The folder cannot take new objects: says so once, and the run reads around it.
    void unusable(const std::string& what, std::error_code ec)
    {
        writable.store(false);
        if (warned.exchange(true)) return;
        n.warnings.fetch_add(1);
        std::fprintf(stderr, "conveyor: warning: the cache in %s cannot be written (%s: %s); reading around it for the rest of the run\n",
                     o.dir.c_str(), what.c_str(), ec.message().c_str());
    }

    std::string object_path(const std::string& name) const { return objects + "/" + name; }
};

inline std::error_code last_error() { return {errno, std::system_category()}; }

/// Removes the least recently used files until the folder holds at most `max_bytes`
/// (`keep` is never removed). Sets the usage estimate to what it found.
inline void cache_evict(cache_state& st, const std::string& keep)
{
    namespace fs = std::filesystem;
    struct file_info {
        std::int64_t mtime;
        std::uint64_t size;
        std::string path;
    };
    std::vector<file_info> files;
    std::uint64_t total = 0;
    std::error_code ec;
    for (fs::directory_iterator it(st.objects, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        if (name.find('.') != std::string::npos) continue; // temporary files
        struct stat sb{};
        if (::stat(it->path().c_str(), &sb) != 0 || !S_ISREG(sb.st_mode)) continue;
        files.push_back({static_cast<std::int64_t>(sb.st_mtim.tv_sec) * 1'000'000'000 + sb.st_mtim.tv_nsec,
                         static_cast<std::uint64_t>(sb.st_size), it->path().string()});
        total += static_cast<std::uint64_t>(sb.st_size);
    }
    std::sort(files.begin(), files.end(), [](const file_info& a, const file_info& b) { return a.mtime < b.mtime; });
    for (const auto& f : files) {
        if (total <= st.o.max_bytes) break;
        if (f.path == keep) continue;
        if (::unlink(f.path.c_str()) == 0) {
            total -= f.size;
            st.n.evicted.fetch_add(1);
        }
    }
    std::lock_guard lk(st.mu);
    st.usage = total;
    st.since_scan = 0;
}

/// Makes the folder, removes the temporary files of crashed runs (those whose object's
/// lock nobody holds), and counts its bytes. Blocking.
inline void cache_open_folder(cache_state& st)
{
    namespace fs = std::filesystem;
    std::error_code ec;
    fs::create_directories(st.objects, ec);
    if (!ec) fs::create_directories(st.locks, ec);
    if (ec) return st.unusable("cannot make " + st.objects + " and " + st.locks, ec);
    // A folder that exists but is read-only: probe it once, here, rather than fail mid-epoch.
    const std::string probe = st.objects + "/.probe." + std::to_string(::getpid());
    const int pfd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (pfd < 0) return st.unusable("cannot create files in " + st.objects, last_error());
    ::close(pfd);
    ::unlink(probe.c_str());
    std::uint64_t total = 0;
    for (fs::directory_iterator it(st.objects, ec), end; !ec && it != end; it.increment(ec)) {
        const std::string name = it->path().filename().string();
        const auto dot = name.find(".tmp.");
        if (dot == std::string::npos) {
            std::error_code sec;
            if (name.find('.') == std::string::npos) total += it->file_size(sec);
            continue;
        }
        const std::string lock = st.locks + "/" + name.substr(0, dot);
        const int lfd = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (lfd < 0) continue;
        // Held: another process is writing it now. Free: its writer is gone.
        if (::flock(lfd, LOCK_EX | LOCK_NB) == 0) {
            if (::unlink(it->path().c_str()) == 0) st.n.leftovers.fetch_add(1);
            ::flock(lfd, LOCK_UN);
        }
        ::close(lfd);
    }
    std::lock_guard lk(st.mu);
    st.usage = total;
}

/// What a look in the folder found.
struct cache_lookup {
    std::optional<cache_entry> hit;
    bool stale = false;   // a file of another version
    bool invalid = false; // a file that failed the checks
};

/** Opens `name`'s published file and checks it: the header's URL, the ETag `want` (any
    when null), the size, and the first time this run sees the file, the CRC-32C of its
    bytes. Blocking. */
inline cache_lookup cache_find(cache_state& st, const std::string& name, const std::string& url, const std::optional<std::string>& want)
{
    cache_lookup r;
    const int fd = ::open(st.object_path(name).c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return r;
    auto owner = std::make_shared<cache_fd>(fd);
    std::vector<unsigned char> head(cache_header_size);
    struct stat sb{};
    if (::fstat(fd, &sb) != 0 || ::pread(fd, head.data(), head.size(), 0) != static_cast<ssize_t>(head.size())) {
        r.invalid = true;
        return r;
    }
    const auto h = decode_cache_header(head.data());
    if (!h) {
        r.invalid = true;
        return r;
    }
    if (h->url != url) return r; // another URL with the same hash: a miss, overwritten when fetched
    if (want && h->etag != *want) {
        r.stale = true;
        return r;
    }
    if (static_cast<std::uint64_t>(sb.st_size) != cache_header_size + h->size) {
        r.invalid = true;
        return r;
    }
    const auto id = std::make_tuple(sb.st_dev, sb.st_ino, h->size);
    bool known;
    {
        std::lock_guard lk(st.mu);
        known = st.verified.contains(id);
    }
    if (!known) {
        std::vector<std::byte> buf(std::size_t{4} << 20);
        std::uint32_t crc = 0;
        std::uint64_t at = 0;
        while (at < h->size) {
            const std::size_t want_n = static_cast<std::size_t>(std::min<std::uint64_t>(buf.size(), h->size - at));
            const ssize_t got = ::pread(fd, buf.data(), want_n, static_cast<off_t>(cache_header_size + at));
            if (got < 0 && errno == EINTR) continue;
            if (got <= 0) {
                r.invalid = true;
                return r;
            }
            crc = crc32c(std::span(buf.data(), static_cast<std::size_t>(got)), crc);
            at += static_cast<std::uint64_t>(got);
        }
        if (crc != h->crc) {
            r.invalid = true;
            return r;
        }
        std::lock_guard lk(st.mu);
        st.verified.insert(id);
    }
    ::futimens(fd, nullptr); // recently used (LRU); fails harmlessly on a read-only folder
    r.hit = cache_entry{std::move(owner), h->size};
    return r;
}

/// The advisory lock on one object, released (and its descriptor closed) when dropped.
struct cache_lock {
    int fd = -1;
    explicit cache_lock(int f) noexcept : fd(f) {}
    cache_lock(const cache_lock&) = delete;
    cache_lock& operator=(const cache_lock&) = delete;
    ~cache_lock()
    {
        if (fd >= 0) ::close(fd); // closing the last descriptor releases the flock
    }
};

/// An object being written to the folder: a `replacing_file` renamed into place when whole,
/// its header written last.
class cache_file_writer {
public:
    cache_file_writer(std::shared_ptr<cache_state> st, std::string name, std::string url, std::string etag)
        : st_(std::move(st)), name_(std::move(name)), url_(std::move(url)), etag_(std::move(etag))
    {
    }
    cache_file_writer(const cache_file_writer&) = delete;
    cache_file_writer& operator=(const cache_file_writer&) = delete;

    /// Creates the temporary file. False (and the folder marked unusable) when it cannot.
    bool open()
    {
        const std::string final_path = st_->object_path(name_);
        const std::string tmp = final_path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(st_->serial.fetch_add(1));
        if (auto ec = file_.open(final_path, 0644, tmp)) {
            st_->unusable("cannot create " + tmp, ec);
            return false;
        }
        return true;
    }

    /// Appends `bytes`. False (the file removed, the folder marked unusable) on failure.
    bool write(std::span<const std::byte> bytes)
    {
        if (!file_.is_open()) return false;
        crc_ = crc32c(bytes, crc_);
        // The bytes go after the header's room; the header is written once they are all in.
        const std::uint64_t at = cache_header_size + size_;
        if (auto ec = file_.write_at(at, bytes)) return fail("cannot write " + file_.temporary(), ec);
        size_ += bytes.size();
        return true;
    }

    /// Writes the header, syncs, renames into place, evicts. Returns the published file,
    /// open, or nullopt (the folder marked unusable) on failure.
    std::optional<cache_entry> commit()
    {
        if (!file_.is_open()) return std::nullopt;
        const auto head = encode_cache_header({size_, crc_, url_, etag_});
        if (!head) {
            abandon(); // a URL too long for the header: not cached, and not an error
            return std::nullopt;
        }
        if (auto ec = file_.write_at(0, std::as_bytes(std::span(head->data(), head->size()))))
            return fail_entry("cannot write " + file_.temporary(), ec);
        struct stat sb{};
        ::fstat(file_.native_handle(), &sb);
        if (auto ec = file_.commit(st_->o.fsync, st_->o.fsync))
            return fail_entry(std::string(file_.failed_step()) + " " + file_.temporary(), ec);
        // Reopened read-only for the readers.
        const std::string& final_path = file_.target();
        const int rfd = ::open(final_path.c_str(), O_RDONLY | O_CLOEXEC);
        st_->n.bytes_written.fetch_add(size_);
        bool scan = false;
        {
            std::lock_guard lk(st_->mu);
            st_->verified.insert(std::make_tuple(sb.st_dev, sb.st_ino, size_));
            st_->usage += cache_header_size + size_;
            st_->since_scan += cache_header_size + size_;
            scan = st_->o.max_bytes > 0 && (st_->usage > st_->o.max_bytes || st_->since_scan > st_->o.max_bytes / 8);
        }
        if (scan) cache_evict(*st_, final_path);
        if (rfd < 0) return std::nullopt; // evicted by another process already: the caller reads around
        return cache_entry{std::make_shared<cache_fd>(rfd), size_};
    }

    void abandon() noexcept { file_.abandon(); }

private:
    bool fail(const std::string& what, std::error_code ec)
    {
        abandon();
        st_->unusable(what, ec);
        return false;
    }
    std::optional<cache_entry> fail_entry(const std::string& what, std::error_code ec)
    {
        fail(what, ec);
        return std::nullopt;
    }

    std::shared_ptr<cache_state> st_;
    std::string name_, url_, etag_;
    conveyor::detail::replacing_file file_;
    std::uint32_t crc_ = 0;
    std::uint64_t size_ = 0;
};

/// The process's cache states, one per folder (the current run's).
struct cache_registry {
    std::mutex mu;
    std::map<std::string, std::shared_ptr<cache_state>> by_dir;

    static cache_registry& get()
    {
        static cache_registry r;
        return r;
    }
    static std::string key_of(const std::string& dir)
    {
        std::error_code ec;
        auto p = std::filesystem::weakly_canonical(std::filesystem::absolute(dir, ec), ec);
        return ec ? dir : p.string();
    }
};

inline std::shared_ptr<cache_state> cache_state_for(const cache_options& o)
{
    if (o.dir.empty())
        throw conveyor::error(std::make_error_code(std::errc::invalid_argument),
                              {.stage = "store", .detail = "cache_options::dir is empty: the cache needs a folder"});
    auto& reg = cache_registry::get();
    const std::string key = cache_registry::key_of(o.dir);
    std::lock_guard lk(reg.mu);
    auto& slot = reg.by_dir[key];
    if (!slot) {
        auto st = std::make_shared<cache_state>();
        st->o = o;
        st->objects = key + "/objects";
        st->locks = key + "/locks";
        cache_open_folder(*st);
        slot = std::move(st);
    } else {
        // The latest options rule the run's eviction and checks.
        slot->o.max_bytes = o.max_bytes;
        slot->o.trust = o.trust;
        slot->o.fsync = o.fsync;
    }
    return slot;
}

/// What a read gets from the cache: a checked file, or the object's lock to fetch it with
/// (and the ETag to record), or neither (read around the cache).
struct cache_ticket {
    std::optional<cache_entry> hit;
    std::shared_ptr<cache_lock> lock;
    std::string name, url, etag;
};

/// The ETag of `where` now, asked once per run.
inline asio::awaitable<std::string> cache_version(const store& inner, cache_state& st, const location& where)
{
    const std::string url = where.url();
    {
        std::lock_guard lk(st.mu);
        if (auto it = st.versions.find(url); it != st.versions.end()) co_return it->second;
    }
    auto v = co_await inner.async_version(where);
    std::lock_guard lk(st.mu);
    st.versions[url] = v.etag;
    co_return v.etag;
}

/// The lock on one object: a descriptor with the flock held, the folder's error, or busy.
struct lock_try {
    int fd = -1;
    std::error_code ec;
};

inline lock_try cache_try_lock(const cache_state& st, const std::string& name)
{
    const std::string path = st.locks + "/" + name;
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) return {-1, last_error()};
    if (::flock(fd, LOCK_EX | LOCK_NB) == 0) return {fd, {}};
    const auto ec = last_error();
    ::close(fd);
    if (ec == std::errc::resource_unavailable_try_again || ec == std::errc::operation_would_block) return {-1, {}};
    return {-1, ec};
}

// The blocking pool's calls, named (a lambda's type has no linkage: see file::ranged_file::async_open).
struct cache_find_call {
    std::shared_ptr<cache_state> st;
    std::string name, url;
    std::optional<std::string> want;
    cache_lookup operator()() const { return cache_find(*st, name, url, want); }
};
struct cache_lock_call {
    std::shared_ptr<cache_state> st;
    std::string name;
    lock_try operator()() const { return cache_try_lock(*st, name); }
};
struct cache_open_call {
    std::shared_ptr<cache_file_writer> w;
    bool operator()() const { return w->open(); }
};
struct cache_write_call {
    std::shared_ptr<cache_file_writer> w;
    slice bytes;
    bool operator()() const { return w->write(bytes.span()); }
};
struct cache_commit_call {
    std::shared_ptr<cache_file_writer> w;
    std::optional<cache_entry> operator()() const { return w->commit(); }
};
struct cache_store_call { // a whole object at once
    std::shared_ptr<cache_file_writer> w;
    slice bytes;
    void operator()() const
    {
        if (w->open() && w->write(bytes.span())) w->commit();
    }
};

/** Looks `where` up; on a miss takes the object's lock (waiting while another reader
    holds it, then looking again). */
inline asio::awaitable<cache_ticket> cache_acquire(std::shared_ptr<const store> inner, std::shared_ptr<cache_state> st, location where)
{
    cache_ticket t;
    t.url = where.url();
    t.name = cache_name(t.url);
    std::optional<std::string> want;
    if (!st->o.trust) want = co_await cache_version(*inner, *st, where);
    auto pool = inner->rt().blocking_executor();
    const cache_find_call look{st, t.name, t.url, want};
    auto r = co_await conveyor::detail::offload(pool, look);
    if (r.hit) {
        st->n.hits.fetch_add(1);
        t.hit = std::move(r.hit);
        co_return t;
    }
    bool stale = r.stale, invalid = r.invalid;
    if (!st->writable.load()) {
        st->n.bypassed.fetch_add(1);
        co_return t;
    }
    auto ex = co_await asio::this_coro::executor;
    asio::steady_timer timer(ex);
    auto pause = std::chrono::milliseconds(2);
    bool waited = false;
    for (;;) {
        cache_lock_call call{st, t.name}; // named, not a temporary in the co_await: GCC 12 destroys those twice
        auto lt = co_await conveyor::detail::offload(pool, std::move(call));
        if (lt.ec) {
            st->unusable("cannot lock " + st->locks + "/" + t.name, lt.ec);
            st->n.bypassed.fetch_add(1);
            co_return t;
        }
        if (lt.fd < 0) { // another reader is fetching it
            waited = true;
            timer.expires_after(pause);
            co_await timer.async_wait(asio::use_awaitable);
            pause = std::min(pause * 2, std::chrono::milliseconds(50));
            continue;
        }
        t.lock = std::make_shared<cache_lock>(lt.fd);
        break;
    }
    // Look again under the lock: another reader may have published it since the first look.
    r = co_await conveyor::detail::offload(pool, look);
    if (r.hit) {
        st->n.hits.fetch_add(1);
        if (waited) st->n.waits.fetch_add(1);
        t.lock.reset();
        t.hit = std::move(r.hit);
        co_return t;
    }
    if (stale) st->n.stale.fetch_add(1);
    else if (invalid) st->n.invalid.fetch_add(1);
    st->n.misses.fetch_add(1);
    if (want) t.etag = *want;
    else t.etag = co_await cache_version(*inner, *st, where);
    co_return t;
}

/// Bytes [`offset`, `offset + length`) of a checked cache file.
inline asio::awaitable<slice> cache_read_range(runtime& rt, cache_entry e, std::uint64_t offset, std::uint64_t length)
{
    if (offset >= e.size) co_return slice{};
    length = std::min(length, e.size - offset);
    auto f = co_await file::ranged_file::async_open(rt, e.path());
    buffer b = co_await f.async_read(cache_header_size + offset, static_cast<std::size_t>(length));
    co_return slice(std::move(b));
}

/// A cached object open for ranged reads.
class cached_object final : public ranged_object {
public:
    cached_object(cache_entry e, file::ranged_file f) : e_(std::move(e)), f_(std::move(f)) {}
    asio::awaitable<slice> async_read(std::uint64_t offset, std::uint64_t length) const override
    {
        if (offset >= e_.size) co_return slice{};
        length = std::min(length, e_.size - offset);
        co_return slice(co_await f_.async_read(cache_header_size + offset, static_cast<std::size_t>(length)));
    }

private:
    cache_entry e_; // keeps the checked file open
    file::ranged_file f_;
};

/** Streams `where` from the remote store into the cache file (at the network's pace: its
    chunks are not taken from the memory budget and wait for no consumer), then publishes
    it. Nullopt when the folder failed (marked unusable); throws what the remote store threw. */
inline asio::awaitable<std::optional<cache_entry>> cache_fetch_chunks(std::shared_ptr<const store> inner, std::shared_ptr<cache_state> st,
                                                                     location where, cache_ticket t, chunk_options o)
{
    auto pool = inner->rt().blocking_executor();
    auto w = std::make_shared<cache_file_writer>(st, t.name, t.url, t.etag);
    // Named calls, not temporaries in the co_await: GCC 12 destroys those twice.
    cache_open_call open_call{w};
    if (!co_await conveyor::detail::offload(pool, std::move(open_call))) co_return std::nullopt;
    chunk_options fo;
    fo.chunk_size = o.chunk_size;
    fo.chunks_in_flight = std::max(2u, o.chunks_in_flight);
    fo.use_memory_budget = false;
    auto reader = inner->read_chunks(where, fo);
    while (auto c = co_await reader->async_next()) {
        slice bytes = std::move(c->bytes);
        cache_write_call write_call{w, std::move(bytes)};
        if (!co_await conveyor::detail::offload(pool, std::move(write_call))) co_return std::nullopt;
    }
    cache_commit_call commit_call{w};
    co_return co_await conveyor::detail::offload(pool, std::move(commit_call));
}

/// A chunk reader that serves a cached file (fetching it first on a miss), or the remote
/// store's reader when the cache is read around.
class cached_chunk_reader final : public chunk_reader {
public:
    cached_chunk_reader(std::shared_ptr<const store> inner, std::shared_ptr<cache_state> st, location where, chunk_options o)
        : inner_(std::move(inner)), st_(std::move(st)), where_(std::move(where)), url_(where_.url()), o_(std::move(o))
    {
    }

    asio::awaitable<std::optional<chunk>> async_next() override
    {
        if (!reader_) co_await start();
        auto c = co_await reader_->async_next();
        if (c && entry_) c->offset -= cache_header_size;
        co_return c;
    }
    const std::string& url() const noexcept override { return url_; }
    std::int64_t size() const noexcept override
    {
        if (entry_) return static_cast<std::int64_t>(entry_->size);
        return reader_ ? reader_->size() : -1;
    }

private:
    asio::awaitable<void> start()
    {
        auto t = co_await cache_acquire(inner_, st_, where_);
        if (!t.hit && t.lock) {
            t.hit = co_await cache_fetch_chunks(inner_, st_, where_, t, o_);
            t.lock.reset(); // published (or abandoned): the others may look
            if (!t.hit) st_->n.bypassed.fetch_add(1);
        }
        if (!t.hit) {
            reader_ = inner_->read_chunks(where_, o_);
            co_return;
        }
        entry_ = std::move(t.hit);
        chunk_options fo = o_;
        const std::uint64_t from = std::min(o_.offset, entry_->size);
        fo.offset = cache_header_size + from;
        fo.length = std::min(o_.length, entry_->size - from);
        reader_ = file::read_chunks(inner_->rt(), entry_->path(), std::move(fo));
    }

    std::shared_ptr<const store> inner_;
    std::shared_ptr<cache_state> st_;
    location where_;
    std::string url_;
    chunk_options o_;
    std::optional<cache_entry> entry_;
    std::unique_ptr<chunk_reader> reader_;
};

inline cache_stats stats_of(const cache_state& st)
{
    cache_stats s;
    s.hits = st.n.hits.load();
    s.misses = st.n.misses.load();
    s.stale = st.n.stale.load();
    s.invalid = st.n.invalid.load();
    s.waits = st.n.waits.load();
    s.bypassed = st.n.bypassed.load();
    s.evicted = st.n.evicted.load();
    s.leftovers = st.n.leftovers.load();
    s.bytes_written = st.n.bytes_written.load();
    s.warnings = st.n.warnings.load();
    return s;
}

} // namespace detail

CONVEYOR_DECL cached_store::cached_store(std::shared_ptr<const store> inner, const cache_options& o)
    : inner_(std::move(inner)), state_(detail::cache_state_for(o))
{
}

CONVEYOR_DECL asio::awaitable<slice> cached_store::async_read(location where, std::int64_t size_hint) const
{
    auto inner = inner_;
    auto st = state_;
    auto t = co_await detail::cache_acquire(inner, st, where);
    if (t.hit) {
        const std::uint64_t size = t.hit->size;
        slice s = co_await detail::cache_read_range(inner->rt(), std::move(*t.hit), 0, size);
        if (s.size() == size) co_return s;
        // Shrunk since it was checked: read around it.
        st->n.invalid.fetch_add(1);
        co_return co_await inner->async_read(std::move(where), size_hint);
    }
    slice bytes = co_await inner->async_read(where, size_hint);
    if (t.lock) {
        auto w = std::make_shared<detail::cache_file_writer>(st, t.name, t.url, t.etag);
        detail::cache_store_call call{w, bytes}; // named: see cache_acquire
        co_await conveyor::detail::offload(inner->rt().blocking_executor(), std::move(call));
    }
    co_return bytes;
}

CONVEYOR_DECL asio::awaitable<object_version> cached_store::async_version(location where) const
{
    co_return co_await inner_->async_version(std::move(where));
}

CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> cached_store::async_open(location where) const
{
    auto inner = inner_;
    auto st = state_;
    const std::string url = where.url();
    std::optional<std::string> want;
    if (!st->o.trust) want = co_await detail::cache_version(*inner, *st, where);
    detail::cache_find_call call{st, detail::cache_name(url), url, want}; // named: see cache_acquire
    auto r = co_await conveyor::detail::offload(inner->rt().blocking_executor(), std::move(call));
    if (!r.hit) {
        st->n.bypassed.fetch_add(1);
        co_return co_await inner->async_open(std::move(where));
    }
    st->n.hits.fetch_add(1);
    auto f = co_await file::ranged_file::async_open(inner->rt(), r.hit->path());
    co_return std::make_shared<detail::cached_object>(std::move(*r.hit), std::move(f));
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> cached_store::read_chunks(const location& where, const chunk_options& o) const
{
    return std::make_unique<detail::cached_chunk_reader>(inner_, state_, where, o);
}

CONVEYOR_DECL std::vector<listed_object> cached_store::list(const location& where) const
{
    return inner_->list(where);
}

CONVEYOR_DECL std::unique_ptr<object_writer> cached_store::open_writer(const location& where, const write_options& o) const
{
    return inner_->open_writer(where, o);
}

CONVEYOR_DECL cache_stats cached_store::stats() const
{
    return detail::stats_of(*state_);
}

CONVEYOR_DECL cache_stats cache_stats_of(const std::string& dir)
{
    auto& reg = detail::cache_registry::get();
    const std::string key = detail::cache_registry::key_of(dir);
    std::lock_guard lk(reg.mu);
    const auto it = reg.by_dir.find(key);
    return it == reg.by_dir.end() ? cache_stats{} : detail::stats_of(*it->second);
}

CONVEYOR_DECL void start_cache_run(const std::string& dir)
{
    auto& reg = detail::cache_registry::get();
    const std::string key = detail::cache_registry::key_of(dir);
    std::lock_guard lk(reg.mu);
    reg.by_dir.erase(key);
}

} // namespace conveyor::store

#endif
