// conveyor/shard/detail/impl/tar_reader.ipp — the push parser of tar archives.
#ifndef CONVEYOR_SHARD_DETAIL_IMPL_TAR_READER_IPP
#define CONVEYOR_SHARD_DETAIL_IMPL_TAR_READER_IPP

#include <conveyor/shard/detail/tar_reader.hpp>

#include <conveyor/core/error.hpp>

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace conveyor::shard::detail {

CONVEYOR_DECL buffer_pool& default_shard_pool()
{
    static buffer_pool pool;
    return pool;
}

/// The kinds whose data, whatever their size field says, are not stored (as Go's reader
/// and Python's tarfile take them; POSIX wants their size to be zero).
inline bool tar_header_only(tar_kind k) noexcept
{
    switch (k) {
    case tar_kind::hard_link:
    case tar_kind::symlink:
    case tar_kind::char_device:
    case tar_kind::block_device:
    case tar_kind::directory:
    case tar_kind::fifo: return true;
    default: return false;
    }
}

/// Which error a refusal of `decode_tar_header` is (its reasons are fixed sentences).
inline errc tar_header_errc(std::string_view why) noexcept
{
    if (why.starts_with("header checksum") || why.starts_with("checksum field")) return errc::bad_checksum;
    if (why.starts_with("size is negative")) return errc::negative_size;
    if (why.find("field is not a number") != std::string_view::npos) return errc::bad_number;
    return errc::truncated; // "a header needs 512 bytes": never reached, blocks are whole here
}

/// A pax `size` value: decimal digits only, fitting in 63 bits.
inline bool parse_pax_size(std::string_view v, std::uint64_t& out) noexcept
{
    const auto first = v.find_first_not_of('0'); // leading zeros are allowed (Go writes none, others may)
    v = first == std::string_view::npos ? v.substr(v.size() - std::min<std::size_t>(v.size(), 1)) : v.substr(first);
    if (v.empty() || v.size() > 18) return false;
    std::uint64_t n = 0;
    for (char c : v) {
        if (c < '0' || c > '9') return false;
        n = n * 10 + static_cast<std::uint64_t>(c - '0');
    }
    out = n;
    return true;
}

CONVEYOR_DECL tar_reader::tar_reader(std::string url, tar_options o)
    : url_(std::move(url)), o_(o), pool_(o.pool ? o.pool : &default_shard_pool())
{
}

CONVEYOR_DECL void tar_reader::feed(chunk c)
{
    if (!started_) {
        started_ = true;
        pos_ = fed_end_ = c.offset;
    }
    if (finished_ || c.offset != fed_end_)
        throw conveyor::error(conveyor::make_error_code(conveyor::errc::invalid_argument),
                              {.where = url_, .offset = static_cast<std::int64_t>(c.offset),
                               .detail = finished_ ? "tar reader fed after finish()"
                                                   : "tar reader fed a chunk at byte " + std::to_string(c.offset) +
                                                         " where the input so far ends at byte " + std::to_string(fed_end_)});
    fed_end_ += c.bytes.size();
    if (state_ == state::end || c.bytes.empty() || fed_end_ <= pos_) return; // nothing more to read, or all to skip
    held_.push_back(std::move(c));
}

CONVEYOR_DECL void tar_reader::finish()
{
    finished_ = true;
}

CONVEYOR_DECL std::size_t tar_reader::held_bytes() const noexcept
{
    std::size_t n = gather_.capacity();
    for (const auto& c : held_) n += c.bytes.size();
    return n;
}

CONVEYOR_DECL void tar_reader::advance_to(std::uint64_t offset) noexcept
{
    pos_ = offset;
    while (!held_.empty() && held_.front().offset + held_.front().bytes.size() <= pos_) held_.pop_front();
}

CONVEYOR_DECL void tar_reader::copy_out(std::byte* to, std::size_t n) noexcept
{
    while (n > 0) {
        const chunk& f = held_.front();
        const std::size_t off = static_cast<std::size_t>(pos_ - f.offset);
        const std::size_t take = std::min(n, f.bytes.size() - off);
        std::memcpy(to, f.bytes.data() + off, take);
        to += take;
        n -= take;
        pos_ += take;
        if (off + take == f.bytes.size()) held_.pop_front();
    }
}

CONVEYOR_DECL void tar_reader::fail(errc code, std::uint64_t offset, std::string detail)
{
    state_ = state::end;
    held_.clear();
    gather_ = buffer();
    throw shard_error(code, url_, offset, std::move(detail));
}

CONVEYOR_DECL std::optional<tar_member> tar_reader::next()
{
    if (error_) std::rethrow_exception(error_);
    try {
        return step();
    } catch (...) {
        error_ = std::current_exception();
        throw;
    }
}

CONVEYOR_DECL std::optional<tar_member> tar_reader::step()
{
    for (;;) {
        switch (state_) {
        case state::end: return std::nullopt;

        case state::header: {
            if (available() < tar_block) {
                if (!finished_) return std::nullopt;
                at_input_end();
                return std::nullopt;
            }
            const std::uint64_t at = pos_;
            const chunk& f = held_.front();
            const std::size_t off = static_cast<std::size_t>(at - f.offset);
            const std::byte* block;
            if (f.bytes.size() - off >= tar_block) {
                block = f.bytes.data() + off;
            } else { // the header straddles chunks
                copy_out(block_.data(), tar_block);
                block = block_.data();
            }
            if (is_zero_block({block, tar_block})) {
                if (entry_start_ != UINT64_MAX)
                    fail(errc::truncated, entry_start_,
                         "the extended header at byte " + std::to_string(entry_start_) + " is followed by the end-of-archive marker, not by its member");
                advance_to(at + tar_block);
                if (zero_seen_) {
                    state_ = state::end;
                    held_.clear();
                    return std::nullopt;
                }
                zero_seen_ = true;
                zero_offset_ = at;
                continue;
            }
            if (zero_seen_)
                fail(errc::data_after_end_of_archive, at,
                     "a zero block at byte " + std::to_string(zero_offset_) +
                         " (the end-of-archive marker's first half) is followed by a header; what follows would be lost");
            on_header(block, at);
            continue;
        }

        case state::metadata: {
            const std::size_t want = meta_.size() - gathered_;
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(want, available()));
            if (n > 0) copy_out(reinterpret_cast<std::byte*>(meta_.data()) + gathered_, n);
            gathered_ += n;
            if (gathered_ < meta_.size()) {
                if (!finished_) return std::nullopt;
                at_input_end();
                return std::nullopt;
            }
            on_metadata();
            advance_to(end_at_);
            state_ = state::header;
            continue;
        }

        case state::member: {
            if (gathered_ == 0 && gather_.capacity() == 0) {
                if (size_ == 0) return emit(slice());
                if (available() == 0 || (finished_ && available() < size_)) {
                    // Wait for the chunk where the data start: they may lie all in it.
                    if (!finished_) return std::nullopt;
                    at_input_end();
                    return std::nullopt;
                }
                const chunk& f = held_.front();
                const std::uint64_t off = pos_ - f.offset;
                if (f.bytes.size() - off >= size_) // all in one chunk: a view of it
                    return emit(f.bytes.sub(static_cast<std::size_t>(off), static_cast<std::size_t>(size_)));
                {
                    if (size_ > o_.max_member_size)
                        fail(errc::member_too_large, entry_start_ != UINT64_MAX ? entry_start_ : header_at_,
                             "member '" + header_.name + "' has " + std::to_string(size_) +
                                 " bytes, more than max_member_size (" + std::to_string(o_.max_member_size) +
                                 ") allows gathering across chunks");
                    gather_ = pool_->acquire(static_cast<std::size_t>(size_));
                }
            }
            const std::size_t n = static_cast<std::size_t>(std::min<std::uint64_t>(size_ - gathered_, available()));
            if (n > 0) copy_out(gather_.data() + gathered_, n);
            gathered_ += n;
            if (gathered_ == size_) {
                ++counts_.assembled;
                counts_.assembled_bytes += size_;
                return emit(slice(std::move(gather_)));
            }
            if (!finished_) return std::nullopt;
            at_input_end();
            return std::nullopt;
        }
        }
    }
}

CONVEYOR_DECL void tar_reader::on_header(const std::byte* block, std::uint64_t at)
{
    header_at_ = at;
    const std::string why = decode_tar_header({block, tar_block}, header_);
    if (!why.empty()) fail(tar_header_errc(why), at, "header at byte " + std::to_string(at) + ": " + why);

    const tar_kind kind = header_.kind;
    const bool extension = kind == tar_kind::pax_local || kind == tar_kind::pax_global ||
                           kind == tar_kind::gnu_long_name || kind == tar_kind::gnu_long_link;
    std::uint64_t size = static_cast<std::uint64_t>(header_.size);
    if (!extension) {
        if (pax_size_) size = *pax_size_;
        else if (global_size_) size = *global_size_;
        if (tar_header_only(kind)) size = 0;
    }
    data_at_ = at + tar_block;
    size_ = size;
    end_at_ = data_at_ + tar_padded(size);
    if (size > total_ || data_at_ + size > total_)
        fail(errc::size_past_end, at,
             "the header at byte " + std::to_string(at) + " gives " + std::to_string(size) + " bytes of data, up to byte " +
                 std::to_string(data_at_ + size) + ", but the archive ends at byte " + std::to_string(total_));

    switch (kind) {
    case tar_kind::pax_local:
    case tar_kind::pax_global:
    case tar_kind::gnu_long_name:
    case tar_kind::gnu_long_link:
        ++counts_.extended_headers;
        if (kind != tar_kind::pax_global && entry_start_ == UINT64_MAX) entry_start_ = at;
        if (size > o_.max_metadata_size)
            fail(errc::metadata_too_large, at,
                 "extended header ('" + std::string(1, header_.typeflag) + "') of " + std::to_string(size) +
                     " bytes, more than max_metadata_size (" + std::to_string(o_.max_metadata_size) + ")");
        meta_kind_ = kind;
        meta_.assign(static_cast<std::size_t>(size), '\0');
        gathered_ = 0;
        advance_to(data_at_);
        state_ = state::metadata;
        return;
    case tar_kind::gnu_sparse:
        fail(errc::sparse_member, at, "member '" + header_.name + "' is a GNU sparse file (type 'S')");
    case tar_kind::regular:
        if (pax_path_) header_.name = *pax_path_;
        else if (long_name_) header_.name = *long_name_;
        else if (global_path_) header_.name = *global_path_;
        gathered_ = 0;
        advance_to(data_at_);
        state_ = state::member;
        return;
    default:
        if (tar_header_only(kind)) ++counts_.skipped_entries;
        else ++counts_.skipped_other;
        entry_start_ = UINT64_MAX;
        long_name_.reset();
        pax_path_.reset();
        pax_size_.reset();
        advance_to(end_at_);
        return;
    }
}

CONVEYOR_DECL void tar_reader::on_metadata()
{
    switch (meta_kind_) {
    case tar_kind::gnu_long_name:
    case tar_kind::gnu_long_link: {
        const auto nul = meta_.find('\0');
        if (nul == std::string::npos)
            fail(errc::unterminated_name, header_at_,
                 std::string(meta_kind_ == tar_kind::gnu_long_name ? "GNU long name" : "GNU long link") +
                     " of the header at byte " + std::to_string(header_at_) + " has no NUL in its " +
                     std::to_string(meta_.size()) + " bytes");
        if (meta_kind_ == tar_kind::gnu_long_name) long_name_ = meta_.substr(0, nul);
        break;
    }
    case tar_kind::pax_local: apply_pax(meta_, false); break;
    case tar_kind::pax_global: apply_pax(meta_, true); break;
    default: break;
    }
    meta_.clear();
    meta_.shrink_to_fit();
}

CONVEYOR_DECL void tar_reader::apply_pax(std::string_view data, bool global)
{
    std::vector<std::pair<std::string, std::string>> records;
    const std::string where = std::string(global ? "pax global header" : "pax extended header") + " at byte " + std::to_string(header_at_);
    if (const std::string why = parse_pax_records(data, records); !why.empty()) fail(errc::bad_pax_record, header_at_, where + ": " + why);
    auto& path = global ? global_path_ : pax_path_;
    auto& size = global ? global_size_ : pax_size_;
    for (const auto& [k, v] : records) {
        if (k.find('\0') != std::string::npos) fail(errc::bad_pax_record, header_at_, where + ": a key holds a NUL");
        if (k.starts_with("GNU.sparse."))
            fail(errc::sparse_member, header_at_, where + " describes a GNU sparse file (" + k + ")");
        if (k == "path" || k == "linkpath") {
            if (v.find('\0') != std::string::npos) fail(errc::bad_pax_record, header_at_, where + ": its " + k + " holds a NUL");
            if (k == "path") {
                // An empty value takes back what an earlier record said (POSIX).
                if (v.empty()) path.reset();
                else path = v;
            }
        } else if (k == "size") {
            std::uint64_t n = 0;
            if (v.empty()) size.reset();
            else if (!parse_pax_size(v, n)) fail(errc::bad_pax_record, header_at_, where + ": size '" + v.substr(0, 40) + "' is not a decimal number of bytes");
            else size = n;
        }
    }
}

CONVEYOR_DECL void tar_reader::at_input_end()
{
    const std::string end = std::to_string(fed_end_);
    switch (state_) {
    case state::header:
        if (pos_ > fed_end_) {
            // The last entry was skipped or returned before its data or padding arrived.
            const bool in_data = fed_end_ < data_at_ + size_;
            fail(errc::truncated, entry_start_ != UINT64_MAX ? entry_start_ : header_at_,
                 "the input ends at byte " + end + ", inside the " + (in_data ? "data" : "padding") + " of the entry whose header is at byte " +
                     std::to_string(header_at_) + " (" + (in_data ? "data" : "padding") + " up to byte " +
                     std::to_string(in_data ? data_at_ + size_ : end_at_) + ")");
        }
        if (available() > 0)
            fail(errc::truncated, pos_, "the input ends at byte " + end + ", " + std::to_string(available()) + " bytes into a header");
        if (entry_start_ != UINT64_MAX)
            fail(errc::truncated, entry_start_, "the input ends at byte " + end + ", after the extended header at byte " +
                                                    std::to_string(entry_start_) + " but before its member");
        if (!zero_seen_ && o_.require_end_of_archive)
            fail(errc::missing_end_of_archive, pos_,
                 "the input ends at byte " + end + (counts_.members + counts_.skipped_entries + counts_.skipped_other > 0 ? " after the last entry" : ", before any header") +
                     ", without the end-of-archive marker (two zero blocks)");
        // Two zero blocks, or a lone one at the very end, or (when allowed) none.
        state_ = state::end;
        held_.clear();
        return;
    case state::metadata:
        fail(errc::truncated, header_at_, "the input ends at byte " + end + ", inside the data of the extended header at byte " +
                                              std::to_string(header_at_) + " (data up to byte " + std::to_string(data_at_ + size_) + ")");
    case state::member:
        fail(errc::truncated, entry_start_ != UINT64_MAX ? entry_start_ : header_at_,
             "the input ends at byte " + end + ", inside the data of member '" + header_.name + "' whose header is at byte " +
                 std::to_string(header_at_) + " (data up to byte " + std::to_string(data_at_ + size_) + ")");
    case state::end: return;
    }
}

CONVEYOR_DECL tar_member tar_reader::emit(slice data)
{
    tar_member m;
    m.name = std::move(header_.name);
    m.data = std::move(data);
    m.header_offset = entry_start_ != UINT64_MAX ? entry_start_ : header_at_;
    m.data_offset = data_at_;
    m.end_offset = end_at_;
    m.typeflag = header_.typeflag;
    ++counts_.members;
    entry_start_ = UINT64_MAX;
    long_name_.reset();
    pax_path_.reset();
    pax_size_.reset();
    gathered_ = 0;
    gather_ = buffer();
    advance_to(end_at_);
    state_ = state::header;
    return m;
}

} // namespace conveyor::shard::detail

#endif
