// conveyor/store/impl/file.ipp — the store of local paths.
#ifndef CONVEYOR_STORE_IMPL_FILE_IPP
#define CONVEYOR_STORE_IMPL_FILE_IPP

#include <conveyor/core/detail/replace_file.hpp>
#include <conveyor/core/error.hpp>
#include <conveyor/file/chunks.hpp>
#include <conveyor/store/file.hpp>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <utility>


namespace conveyor::store {
namespace detail {

[[noreturn]] inline void file_error(std::error_code ec, std::string where, std::string detail, std::int64_t offset = -1)
{
    throw conveyor::error(ec, {.stage = "store", .where = std::move(where), .offset = offset, .detail = std::move(detail)});
}

/// A local object being written: a `replacing_file` (a hidden temporary file in the same
/// folder, renamed when complete), written through a buffer.
class file_writer final : public object_writer {
public:
    file_writer(std::string path, bool sync, std::size_t buffer) : sync_(sync)
    {
        const std::filesystem::path p(path);
        std::error_code ec;
        if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
        if (ec) file_error(ec, p.parent_path().string(), "cannot make the object's folder");
        if (auto e = file_.open(std::move(path), 0644)) file_error(e, file_.temporary(), "cannot create the temporary file");
        buf_.reserve(std::max<std::size_t>(buffer, 64 * 1024));
    }

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
        if (auto e = file_.commit(sync_, sync_)) {
            const std::string_view step = file_.failed_step();
            if (step == "cannot rename") file_error(e, file_.target(), "cannot rename " + file_.temporary() + " to it");
            file_error(e, file_.temporary(), step == "cannot sync" ? "fsync failed" : "close failed");
        }
    }

    void abandon() noexcept override { file_.abandon(); }

private:
    void flush()
    {
        if (buf_.empty()) return;
        write_all(buf_);
        buf_.clear();
    }
    void write_all(std::span<const std::byte> bytes)
    {
        const auto at = static_cast<std::int64_t>(file_.size());
        if (auto e = file_.append(bytes)) file_error(e, file_.temporary(), "write failed", at);
    }

    conveyor::detail::replacing_file file_;
    bool sync_;
    std::vector<std::byte> buf_;
};

/// A local file open for ranged reads.
class file_object final : public ranged_object {
public:
    explicit file_object(file::ranged_file f) noexcept : f_(std::move(f)) {}
    asio::awaitable<slice> async_read(std::uint64_t offset, std::uint64_t length) const override
    {
        co_return slice(co_await f_.async_read(offset, static_cast<std::size_t>(length)));
    }

private:
    file::ranged_file f_;
};

} // namespace detail

CONVEYOR_DECL runtime& file_store::rt() const
{
    return rt_ ? *rt_ : runtime::shared();
}

CONVEYOR_DECL asio::awaitable<slice> file_store::async_read(location where, std::int64_t) const
{
    auto f = co_await file::ranged_file::async_open(rt(), where.path());
    co_return slice(co_await f.async_read(0, static_cast<std::size_t>(f.size())));
}

CONVEYOR_DECL asio::awaitable<std::shared_ptr<const ranged_object>> file_store::async_open(location where) const
{
    co_return std::make_shared<detail::file_object>(co_await file::ranged_file::async_open(rt(), where.path()));
}

CONVEYOR_DECL slice file_store::read(const location& where) const
{
    return read_small(where, UINT64_MAX, "");
}

CONVEYOR_DECL std::unique_ptr<chunk_reader> file_store::read_chunks(const location& where, const chunk_options& o) const
{
    return file::read_chunks(rt(), where.path(), o);
}

CONVEYOR_DECL std::vector<listed_object> file_store::list(const location& where) const
{
    std::vector<listed_object> out;
    std::error_code ec;
    namespace fs = std::filesystem;
    fs::recursive_directory_iterator it(where.path(), ec), end;
    if (ec) detail::file_error(ec, where.printable(), "cannot list this folder");
    for (; it != end; it.increment(ec)) {
        if (ec) detail::file_error(ec, where.printable(), "cannot list this folder");
        std::error_code fec;
        if (!it->is_regular_file(fec)) continue;
        const auto size = it->file_size(fec);
        out.push_back({it->path().string(), fec ? -1 : static_cast<std::int64_t>(size)});
    }
    if (ec) detail::file_error(ec, where.printable(), "cannot list this folder");
    std::sort(out.begin(), out.end(), [](const listed_object& a, const listed_object& b) { return a.url < b.url; });
    return out;
}

CONVEYOR_DECL std::unique_ptr<object_writer> file_store::open_writer(const location& where, const write_options& o) const
{
    return std::make_unique<detail::file_writer>(where.path(), o.fsync, o.write_buffer);
}

} // namespace conveyor::store

#endif
