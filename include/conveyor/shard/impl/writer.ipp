// conveyor/shard/impl/writer.ipp — the shard writer (see writer.hpp).
#ifndef CONVEYOR_SHARD_IMPL_WRITER_IPP
#define CONVEYOR_SHARD_IMPL_WRITER_IPP

#include <conveyor/shard/writer.hpp>

#include <conveyor/core/detail/ascii.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/core/location.hpp>
#include <conveyor/s3/client.hpp>
#include <conveyor/shard/detail/tar_write.hpp>
#include <conveyor/store/open.hpp>

#include <system_error>

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

namespace detail {

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
    if (location(format_shard_name(opts_.pattern, 0)).is_s3())
        detail::bad_argument("shard pattern '" + opts_.pattern + "' is an S3 URL: give the writer an s3::client");
    if (opts_.max_count == 0) detail::bad_argument("max_count must be at least 1");
    if (opts_.tar.record_size == 0 || opts_.tar.record_size % shard::detail::tar_block != 0)
        detail::bad_argument("record_size must be a positive multiple of 512");
    if (opts_.tar.uname.size() > 31 || opts_.tar.gname.size() > 31) detail::bad_argument("uname and gname hold at most 31 bytes");
}

CONVEYOR_DECL writer::writer(writer_options o, const s3::client& s3) : opts_(std::move(o)), next_shard_(opts_.first_shard)
{
    (void)location(format_shard_name(opts_.pattern, 0));
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
    const location where(format_shard_name(opts_.pattern, next_shard_));
    store::store_options so;
    if (s3_) so.s3 = *s3_;
    sink_ = store::open_store(where, so)->open_writer(
        where, {.content_type = opts_.content_type, .fsync = opts_.fsync, .write_buffer = opts_.write_buffer});
    ++next_shard_;
    current_ = index_shard{};
    current_.url = where.url();
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
