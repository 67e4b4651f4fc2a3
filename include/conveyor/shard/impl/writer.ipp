// conveyor/shard/impl/writer.ipp — the shard writer (see writer.hpp).
#ifndef CONVEYOR_SHARD_IMPL_WRITER_IPP
#define CONVEYOR_SHARD_IMPL_WRITER_IPP

#include <conveyor/shard/writer.hpp>

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/s3/config.hpp>
#include <conveyor/s3/multipart.hpp>
#include <conveyor/shard/detail/tar_write.hpp>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include <fcntl.h>
#include <unistd.h>

namespace conveyor::shard {

namespace detail {

[[noreturn]] inline void writer_error(std::error_code ec, std::string where, std::string key, std::string detail,
                                      std::int64_t offset = -1)
{
    throw conveyor::error(ec, {.stage = "shard writer", .key = std::move(key), .where = std::move(where), .offset = offset,
                               .detail = std::move(detail)});
}

[[noreturn]] inline void bad_argument(std::string what, std::string key = {})
{
    writer_error(make_error_code(conveyor::errc::invalid_argument), {}, std::move(key), std::move(what));
}

inline bool is_s3_url(std::string_view s)
{
    return s.size() >= 5 && conveyor::detail::iequals(s.substr(0, 5), "s3://");
}

} // namespace detail

CONVEYOR_DECL std::string format_shard_name(std::string_view pattern, std::uint64_t n)
{
    std::string out;
    int conversions = 0;
    for (std::size_t i = 0; i < pattern.size(); ++i) {
        if (pattern[i] != '%') {
            out += pattern[i];
            continue;
        }
        if (i + 1 < pattern.size() && pattern[i + 1] == '%') {
            out += '%';
            ++i;
            continue;
        }
        std::size_t j = i + 1;
        const bool zero = j < pattern.size() && pattern[j] == '0';
        if (zero) ++j;
        std::size_t width = 0;
        while (j < pattern.size() && pattern[j] >= '0' && pattern[j] <= '9' && width < 1000) width = width * 10 + (pattern[j++] - '0');
        if (j >= pattern.size() || (pattern[j] != 'd' && pattern[j] != 'u') || width > 64)
            detail::bad_argument("shard name pattern '" + std::string(pattern) + "': only %d, %Nd and %0Nd conversions are allowed (and %%)");
        std::string digits = std::to_string(n);
        if (digits.size() < width) digits.insert(0, width - digits.size(), zero ? '0' : ' ');
        out += digits;
        ++conversions;
        i = j;
    }
    if (conversions != 1)
        detail::bad_argument("shard name pattern '" + std::string(pattern) + "' must hold exactly one %d conversion (it holds " +
                             std::to_string(conversions) + ")");
    return out;
}

CONVEYOR_DECL std::vector<std::uint64_t> plan_shards(std::span<const std::uint64_t> data_bytes, std::uint64_t max_count,
                                                     std::uint64_t max_size)
{
    std::vector<std::uint64_t> starts;
    std::uint64_t count = 0, size = 0;
    for (std::uint64_t i = 0; i < data_bytes.size(); ++i) {
        if (starts.empty() || count >= max_count || size >= max_size) {
            starts.push_back(i);
            count = 0;
            size = 0;
        }
        ++count;
        size += data_bytes[i];
    }
    return starts;
}

// ---- sinks: where one shard's bytes go ------------------------------------------------

struct writer::sink {
    virtual ~sink() = default;
    virtual void write(std::span<const std::byte> bytes) = 0;
    /// Makes the shard visible under its name.
    virtual void commit() = 0;
    /// Removes what was written (never throws).
    virtual void abandon() noexcept = 0;
};

namespace detail {

/// A local shard: a hidden temporary file in the same folder, renamed when complete.
class file_sink final : public writer::sink {
public:
    file_sink(std::string path, bool sync, std::size_t buffer) : path_(std::move(path)), sync_(sync)
    {
        static std::atomic<std::uint64_t> serial{0};
        const std::filesystem::path p(path_);
        std::error_code ec;
        if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
        if (ec) writer_error(ec, p.parent_path().string(), {}, "cannot make the shard's folder");
        tmp_ = (p.parent_path() / ("." + p.filename().string() + ".tmp-" + std::to_string(::getpid()) + "-" +
                                   std::to_string(serial.fetch_add(1))))
                   .string();
        fd_ = ::open(tmp_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd_ < 0) writer_error({errno, std::system_category()}, tmp_, {}, "cannot create the shard's temporary file");
        buf_.reserve(std::max<std::size_t>(buffer, 64 * 1024));
    }
    ~file_sink() override { abandon(); }

    void write(std::span<const std::byte> bytes) override
    {
        if (buf_.size() + bytes.size() <= buf_.capacity()) {
            buf_.insert(buf_.end(), bytes.begin(), bytes.end());
            return;
        }
        flush();
        if (bytes.size() >= buf_.capacity() / 2)
            write_all(bytes);
        else
            buf_.insert(buf_.end(), bytes.begin(), bytes.end());
    }

    void commit() override
    {
        flush();
        if (sync_ && ::fsync(fd_) != 0) writer_error({errno, std::system_category()}, tmp_, {}, "fsync failed");
        const int fd = std::exchange(fd_, -1);
        if (::close(fd) != 0) writer_error({errno, std::system_category()}, tmp_, {}, "close failed");
        if (::rename(tmp_.c_str(), path_.c_str()) != 0) {
            const int e = errno;
            ::unlink(tmp_.c_str());
            writer_error({e, std::system_category()}, path_, {}, "cannot rename " + tmp_ + " to it");
        }
        tmp_.clear();
        if (sync_) {
            const auto dir = std::filesystem::path(path_).parent_path();
            const int d = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
            if (d >= 0) {
                ::fsync(d);
                ::close(d);
            }
        }
    }

    void abandon() noexcept override
    {
        if (fd_ >= 0) ::close(std::exchange(fd_, -1));
        if (!tmp_.empty()) ::unlink(tmp_.c_str());
        tmp_.clear();
    }

private:
    void flush()
    {
        if (buf_.empty()) return;
        write_all(buf_);
        buf_.clear();
    }
    void write_all(std::span<const std::byte> bytes)
    {
        while (!bytes.empty()) {
            const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
            if (n < 0) {
                if (errno == EINTR) continue;
                writer_error({errno, std::system_category()}, tmp_, {}, "write failed", static_cast<std::int64_t>(written_));
            }
            written_ += static_cast<std::uint64_t>(n);
            bytes = bytes.subspan(static_cast<std::size_t>(n));
        }
    }

    std::string path_, tmp_;
    bool sync_;
    int fd_ = -1;
    std::uint64_t written_ = 0;
    std::vector<std::byte> buf_;
};

/// An S3 shard: parts uploaded as they fill; one PutObject when it stays under one part.
class s3_sink final : public writer::sink {
public:
    s3_sink(const s3::client& c, std::string url, std::string content_type)
        : c_(c), url_(std::move(url)), content_type_(std::move(content_type))
    {
        auto u = s3::parse_s3_url(url_);
        bucket_ = std::move(u.bucket);
        key_ = std::move(u.key);
        if (key_.empty()) bad_argument("shard URL '" + url_ + "' names no object");
        part_size_ = std::max<std::uint64_t>(c_.options().upload_part_size, 5u << 20);
        part_ = c_.rt().buffers().acquire(static_cast<std::size_t>(part_size_));
        part_.resize(0);
    }
    ~s3_sink() override { abandon(); }

    void write(std::span<const std::byte> bytes) override
    {
        while (!bytes.empty()) {
            const std::size_t room = static_cast<std::size_t>(part_size_) - part_.size();
            const std::size_t n = std::min(room, bytes.size());
            const std::size_t at = part_.size();
            part_.resize(at + n);
            if (n) std::memcpy(part_.data() + at, bytes.data(), n);
            bytes = bytes.subspan(n);
            if (part_.size() == part_size_) send_part();
        }
    }

    void commit() override
    {
        if (!upload_) {
            c_.run(c_.async_put(bucket_, key_, part_.span(), content_type_));
            part_ = buffer{};
            done_ = true;
            return;
        }
        if (part_.size() > 0) send_part();
        upload_->complete();
        upload_.reset();
        done_ = true;
    }

    void abandon() noexcept override
    {
        // The upload aborts itself in the background when dropped unfinished.
        upload_.reset();
        part_ = buffer{};
    }

private:
    void send_part()
    {
        if (!upload_) upload_.emplace(c_, bucket_, key_, content_type_);
        buffer full = std::move(part_);
        part_ = c_.rt().buffers().acquire(static_cast<std::size_t>(part_size_));
        part_.resize(0);
        upload_->upload_part(std::move(full));
    }

    s3::client c_;
    std::string url_, bucket_, key_, content_type_;
    std::uint64_t part_size_ = 0;
    buffer part_;
    std::optional<s3::multipart_upload> upload_;
    bool done_ = false;
};

/// Why `key` cannot be a sample's key, or "".
inline std::string key_problem(std::string_view key)
{
    if (key.empty()) return "the key is empty";
    if (key.find('\0') != std::string_view::npos) return "the key holds a NUL byte";
    const auto slash = key.rfind('/');
    const auto base = slash == std::string_view::npos ? key : key.substr(slash + 1);
    if (base.empty()) return "the key ends with '/'";
    if (base.find('.') != std::string_view::npos)
        return "the key's last component holds a '.' (readers split member names at the first dot of the base name)";
    // A control character would make the index unreadable (and a member name no one meant).
    if (auto why = conveyor::detail::index_entry_problem(key, 65536); !why.empty()) return "the key " + why;
    return {};
}

inline std::string field_problem(std::string_view name)
{
    if (name.empty()) return "a field name is empty";
    if (name.find('\0') != std::string_view::npos) return "field name holds a NUL byte";
    if (name.find('/') != std::string_view::npos) return "field '" + std::string(name) + "' holds a '/'";
    if (auto why = conveyor::detail::index_entry_problem(name, 65536); !why.empty()) return "a field name " + why;
    return {};
}

} // namespace detail

// ---- the writer -----------------------------------------------------------------------

CONVEYOR_DECL writer::writer(writer_options o) : opts_(std::move(o)), next_shard_(opts_.first_shard)
{
    if (detail::is_s3_url(opts_.pattern))
        detail::bad_argument("shard pattern '" + opts_.pattern + "' is an S3 URL: give the writer an s3::client");
    (void)format_shard_name(opts_.pattern, 0);
    if (opts_.max_count == 0) detail::bad_argument("max_count must be at least 1");
    if (opts_.tar.record_size == 0 || opts_.tar.record_size % shard::detail::tar_block != 0)
        detail::bad_argument("record_size must be a positive multiple of 512");
    if (opts_.tar.uname.size() > 31 || opts_.tar.gname.size() > 31) detail::bad_argument("uname and gname hold at most 31 bytes");
}

CONVEYOR_DECL writer::writer(writer_options o, const s3::client& s3) : opts_(std::move(o)), next_shard_(opts_.first_shard)
{
    (void)format_shard_name(opts_.pattern, 0);
    if (opts_.max_count == 0) detail::bad_argument("max_count must be at least 1");
    if (opts_.tar.record_size == 0 || opts_.tar.record_size % shard::detail::tar_block != 0)
        detail::bad_argument("record_size must be a positive multiple of 512");
    if (opts_.tar.uname.size() > 31 || opts_.tar.gname.size() > 31) detail::bad_argument("uname and gname hold at most 31 bytes");
    s3_ = std::make_unique<s3::client>(s3);
}

CONVEYOR_DECL writer::writer(writer&&) noexcept = default;
CONVEYOR_DECL writer& writer::operator=(writer&& o) noexcept
{
    if (this != &o) {
        if (sink_) sink_->abandon();
        opts_ = std::move(o.opts_);
        s3_ = std::move(o.s3_);
        sink_ = std::move(o.sink_);
        index_ = std::move(o.index_);
        current_ = std::move(o.current_);
        header_ = std::move(o.header_);
        offset_ = o.offset_;
        data_bytes_ = o.data_bytes_;
        next_shard_ = o.next_shard_;
        samples_ = o.samples_;
        bytes_ = o.bytes_;
        open_ = o.open_;
        closed_ = o.closed_;
        failed_ = o.failed_;
    }
    return *this;
}

CONVEYOR_DECL writer::~writer()
{
    if (sink_) sink_->abandon();
}

CONVEYOR_DECL void writer::start_shard()
{
    const std::string url = format_shard_name(opts_.pattern, next_shard_);
    if (detail::is_s3_url(url))
        sink_ = std::make_unique<detail::s3_sink>(*s3_, url, opts_.content_type);
    else
        sink_ = std::make_unique<detail::file_sink>(url, opts_.fsync, opts_.write_buffer);
    ++next_shard_;
    current_ = index_shard{};
    current_.url = url;
    offset_ = 0;
    data_bytes_ = 0;
    open_ = true;
}

CONVEYOR_DECL void writer::flush_header()
{
    if (header_.empty()) return;
    sink_->write(header_);
    offset_ += header_.size();
    header_.clear();
}

CONVEYOR_DECL void writer::put(std::span<const std::byte> bytes)
{
    flush_header();
    sink_->write(bytes);
    offset_ += bytes.size();
}

CONVEYOR_DECL void writer::finish_shard()
{
    // Two zero blocks end the archive; zeros pad it to a whole record.
    const std::uint64_t end = offset_ + header_.size() + 2 * shard::detail::tar_block;
    const std::uint64_t rec = opts_.tar.record_size;
    const std::uint64_t total = (end + rec - 1) / rec * rec;
    header_.resize(header_.size() + static_cast<std::size_t>(total - offset_ - header_.size()), std::byte{0});
    flush_header();
    sink_->commit();
    sink_.reset();
    current_.bytes = offset_;
    current_.samples = current_.entries.size();
    bytes_ += offset_;
    index_.shards.push_back(std::move(current_));
    current_ = index_shard{};
    open_ = false;
}

CONVEYOR_DECL void writer::write(std::string_view key, std::span<const field_view> fields)
{
    if (closed_) detail::bad_argument("write after close", std::string(key));
    if (failed_) detail::bad_argument("write after a failed write", std::string(key));
    if (auto why = detail::key_problem(key); !why.empty()) detail::bad_argument(why, std::string(key));
    if (fields.empty()) detail::bad_argument("a sample needs at least one field", std::string(key));
    std::uint64_t data = 0;
    for (std::size_t i = 0; i < fields.size(); ++i) {
        if (auto why = detail::field_problem(fields[i].name); !why.empty()) detail::bad_argument(why, std::string(key));
        for (std::size_t j = 0; j < i; ++j)
            if (fields[j].name == fields[i].name)
                detail::bad_argument("field '" + std::string(fields[i].name) + "' is given twice", std::string(key));
        data += fields[i].data.size();
    }
    try {
        const bool next = !open_ || current_.entries.size() >= opts_.max_count || data_bytes_ >= opts_.max_size;
        if (!next && !current_.entries.empty() && current_.entries.back().key == key)
            detail::bad_argument("the key repeats the previous sample's (readers would merge the two)", std::string(key));
        if (next) {
            if (open_) finish_shard();
            start_shard();
        }
        index_entry e;
        e.key = std::string(key);
        e.offset = offset_ + header_.size();
        std::string name;
        static constexpr std::byte zeros[shard::detail::tar_block] = {};
        for (const auto& f : fields) {
            name.assign(key);
            name += '.';
            name += f.name;
            shard::detail::append_member_header(header_, name, f.data.size(), opts_.tar);
            e.fields.push_back({std::string(f.name), offset_ + header_.size(), f.data.size()});
            // Small members are gathered with their headers; large ones go straight out.
            if (f.data.size() <= 4096) {
                header_.insert(header_.end(), f.data.begin(), f.data.end());
            } else {
                put(f.data);
            }
            const std::size_t pad = static_cast<std::size_t>(shard::detail::tar_padded(f.data.size()) - f.data.size());
            header_.insert(header_.end(), zeros, zeros + pad);
        }
        e.size = offset_ + header_.size() - e.offset;
        if (header_.size() >= (1u << 16)) flush_header();
        current_.entries.push_back(std::move(e));
        data_bytes_ += data;
        ++samples_;
    } catch (const conveyor::error& err) {
        if (err.code() == make_error_code(conveyor::errc::invalid_argument) && err.where().empty()) throw;
        failed_ = true;
        if (sink_) sink_->abandon();
        sink_.reset();
        open_ = false;
        throw;
    } catch (...) {
        failed_ = true;
        if (sink_) sink_->abandon();
        sink_.reset();
        open_ = false;
        throw;
    }
}

CONVEYOR_DECL void writer::write(const sample& s)
{
    std::vector<field_view> fv;
    fv.reserve(s.fields.size());
    for (const auto& f : s.fields) fv.push_back({f.name, f.data.span()});
    write(s.key, fv);
}

CONVEYOR_DECL void writer::close()
{
    if (closed_ || failed_) return;
    try {
        if (open_) finish_shard();
    } catch (...) {
        failed_ = true;
        if (sink_) sink_->abandon();
        sink_.reset();
        open_ = false;
        throw;
    }
    closed_ = true;
}

} // namespace conveyor::shard

#endif
